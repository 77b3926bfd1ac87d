"""Deprecated: `Run` lives in walqueue.worker.run, and `Settler` is walqueue.worker.complete's `Completer`.

Kept so that imports written against the old layout keep working; new code imports the roles' modules.
"""

from __future__ import annotations

from walqueue.worker.complete import Completer, describe_delay
from walqueue.worker.run import Run

__all__ = ["Run", "Settler", "describe_delay"]

#: The complete role under its old name.
Settler = Completer
