"""``python -m forestcoll`` runs the command line."""

import sys

from forestcoll.cli import main

sys.exit(main())
