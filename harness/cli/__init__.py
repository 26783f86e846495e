"""The ``jbodlab`` command (:func:`main`, in :mod:`harness.cli.jbodlab`: the console script
``harness.cli:main``) and its subcommands, one module each."""

from harness.cli.jbodlab import main

__all__ = ["main"]
