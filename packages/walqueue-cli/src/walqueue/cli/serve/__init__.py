"""Deprecated: the server's command line is `walqueue.serve` (`python -m walqueue.serve`, script `walqueue-serve`).

Kept so that `python -m walqueue.cli.serve` and `from walqueue.cli.serve
import main`, documented before the server had its own package, keep
working. A package rather than a module, so that the old module's history
follows it to `walqueue/serve/cli.py`.
"""

from __future__ import annotations

from walqueue.serve.cli import main

__all__ = ["main"]
