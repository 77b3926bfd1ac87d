"""`python -m walqueue.worker`: the walqueue-worker command."""

from __future__ import annotations

from walqueue.worker.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
