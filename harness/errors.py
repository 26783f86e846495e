"""The root of the errors harness raises on purpose (pure: imports nothing, so the pure
``scenario`` package may derive from it).

::

    HarnessError                        the lab refuses its input or a run cannot go on
    ├── scenario.fields.ScenarioError   a scenario value that cannot be used (also ValueError)
    ├── results.schema.ResultsError     bad results input or directory (also ValueError)
    ├── nemesis.file_targets.FileTargetError   a file target that names no file (also ValueError)
    ├── cluster.services.ServiceError   a node not formatted, started or ready (also RuntimeError)
    └── run.session.SessionError        a bad session command or none running (also RuntimeError)

The host side's errors are ``infra.errors.InfraError``.
"""

from __future__ import annotations


class HarnessError(Exception):
    """Base of every error harness raises on purpose: a scenario, results directory,
    session command or node the lab cannot use (the message names it). Catch it to tell
    those from a bug; to handle one kind, catch its class."""
