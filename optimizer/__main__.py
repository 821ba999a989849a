"""``python -m optimizer``: dispatches to :func:`optimizer.cli.main`."""

import sys

from optimizer.cli import main

sys.exit(main())
