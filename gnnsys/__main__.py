"""``python -m gnnsys`` runs the command line."""

from gnnsys.cli import main

raise SystemExit(main())
