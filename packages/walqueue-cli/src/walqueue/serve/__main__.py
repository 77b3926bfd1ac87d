"""`python -m walqueue.serve DIRECTORY --socket PATH`: the server (script `walqueue-serve`)."""

import sys

from walqueue.serve.cli import main

sys.exit(main())
