"""(see docs/design.md)"""
