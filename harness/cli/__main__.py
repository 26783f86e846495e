"""``python -m harness.cli``: the ``jbodlab`` command."""

from harness.cli.main import main

raise SystemExit(main())
