"""`python -m bertlite.cli`: the `bertlite` command."""

import sys

from bertlite.cli import main

sys.exit(main())
