"""The ``jbodlab`` command (:mod:`harness.cli.main`) and its subcommands, one module each."""
