"""`python -m walqueue.format.fsck DIRECTORY`: the same command as `walqueue-fsck`."""

from walqueue.format.fsck.cli import main

raise SystemExit(main())
