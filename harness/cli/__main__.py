"""``python -m harness.cli``: the ``jbodlab`` command."""

from harness.cli.jbodlab import main

raise SystemExit(main())
