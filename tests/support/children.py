"""A child process that imports exactly the walqueue this test process imports.

In no-install mode those are the three ``src`` directories (pytest's
`pythonpath`), when installed site-packages: `child_environment` passes the
roots of the packages imported here on through PYTHONPATH, whichever they are.
"""

from __future__ import annotations

import os
from pathlib import Path

import walqueue
import walqueue.cli
import walqueue.format

__all__ = ["child_environment"]


def _import_roots() -> list[str]:
    """The sys.path entries that hold the walqueue packages imported here."""
    roots = [Path(walqueue.__file__).parents[1]]  # <root>/walqueue/__init__.py
    for package in (walqueue.format, walqueue.cli):
        roots.extend(Path(entry).parents[1] for entry in package.__path__)  # <root>/walqueue/<name>
    unique: list[str] = []
    for root in roots:
        if str(root) not in unique:
            unique.append(str(root))
    return unique


def child_environment() -> dict[str, str]:
    env = dict(os.environ)
    inherited = [env["PYTHONPATH"]] if env.get("PYTHONPATH") else []
    env["PYTHONPATH"] = os.pathsep.join(_import_roots() + inherited)
    return env
