"""The lab: scenarios as values, runner, history, checkers, faults, recorder, analysis, CLI."""
