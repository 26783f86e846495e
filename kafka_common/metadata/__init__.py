"""The metadata model both the controller and the brokers replay (see docs/design.md)."""
