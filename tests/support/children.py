"""A child process that imports exactly the walqueue this test process imports.

In no-install mode those are the three ``src`` directories (pytest's
`pythonpath`), when installed site-packages: `child_environment` passes the
roots of the packages imported here on through PYTHONPATH, whichever they are.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import walqueue
import walqueue.cli
import walqueue.format

__all__ = ["child_environment", "consumer_process", "run_consumer"]

#: How long a consumer run may take before the test fails: only a hung one does.
TIMEOUT = 30.0


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


def consumer_process(
    directory: Path | str, *, env: dict[str, str] | None = None, preexec_fn: Callable[[], object] | None = None
) -> subprocess.Popen[bytes]:
    """``python -m walqueue.cli DIRECTORY``, the JSON-lines consumer, with stdin, stdout and stderr piped."""
    return subprocess.Popen(
        [sys.executable, "-m", "walqueue.cli", str(directory)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=child_environment() if env is None else env,
        preexec_fn=preexec_fn,
    )


def run_consumer(*args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    """``python -m walqueue.cli *args`` run to its exit with `stdin`, its output captured."""
    command = [sys.executable, "-m", "walqueue.cli", *args]
    return subprocess.run(command, input=stdin, capture_output=True, env=child_environment(), timeout=TIMEOUT)
