"""The history of a run (pure): client ops, harness actions and node events as values, and
their parsing (Jepsen style)."""
