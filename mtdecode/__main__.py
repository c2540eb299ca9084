"""`python -m mtdecode ...` is the `mtdecode` command line."""

import sys

from mtdecode.cli import main

sys.exit(main())
