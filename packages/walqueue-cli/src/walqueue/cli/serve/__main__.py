"""`python -m walqueue.cli.serve`: deprecated spelling of `python -m walqueue.serve`."""

import sys

from walqueue.serve.cli import main

sys.exit(main())
