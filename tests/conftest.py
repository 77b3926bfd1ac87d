"""Plumbing shared by every test directory: running Python in a subprocess.

pytest's `pythonpath` setting (root pyproject.toml) puts the three src
directories on this process's sys.path, but a child process does not inherit
sys.path. `run_python` passes the same directories on through PYTHONPATH, so
a subprocess test sees exactly the code this process sees, installed or not.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Protocol

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
#: The reference model (tools/model/) is shared with tools/torture: importable here as `model`.
TOOLS_DIR = REPO_ROOT / "tools"
if str(TOOLS_DIR) not in sys.path:
    sys.path.insert(0, str(TOOLS_DIR))
#: The helpers more than one test directory uses (tests/support), importable as `support`: pytest's
#: prepend import mode puts only each test module's own directory on sys.path.
TESTS_DIR = REPO_ROOT / "tests"
if str(TESTS_DIR) not in sys.path:
    sys.path.insert(0, str(TESTS_DIR))


class RunPython(Protocol):
    """The type of the `run_python` fixture, for annotations in tests."""

    def __call__(
        self,
        args: Sequence[str],
        *,
        input: str | None = None,
        cwd: str | os.PathLike[str] | None = None,
        env: Mapping[str, str] | None = None,
        timeout: float = 60.0,
    ) -> subprocess.CompletedProcess[str]: ...


@pytest.fixture(scope="session")
def src_pythonpath(pytestconfig: pytest.Config) -> str:
    """PYTHONPATH for a child: the directories of pytest's `pythonpath` setting.

    Those are the three src directories; under `-o pythonpath=` (testing
    installed wheels) it is empty, and children see only what is installed.
    """
    entries = pytestconfig.getini("pythonpath")
    return os.pathsep.join(str(Path(entry).resolve()) for entry in entries)


@pytest.fixture(scope="session")
def run_python(src_pythonpath: str) -> RunPython:
    """Run `sys.executable *args` with the src directories on PYTHONPATH.

    Text in (stdin is empty unless `input` is given), text out; never raises
    on a non-zero exit: tests assert on `returncode`, `stdout` and `stderr`.
    """

    def run(
        args: Sequence[str],
        *,
        input: str | None = None,
        cwd: str | os.PathLike[str] | None = None,
        env: Mapping[str, str] | None = None,
        timeout: float = 60.0,
    ) -> subprocess.CompletedProcess[str]:
        child_env = dict(os.environ if env is None else env)
        if src_pythonpath:
            inherited = child_env.get("PYTHONPATH")
            child_env["PYTHONPATH"] = src_pythonpath + (os.pathsep + inherited if inherited else "")
        return subprocess.run(
            [sys.executable, *args],
            input=input,
            # Never the terminal's stdin: a child that reads it would hang.
            stdin=subprocess.DEVNULL if input is None else None,
            capture_output=True,
            text=True,
            cwd=cwd,
            env=child_env,
            timeout=timeout,
            check=False,
        )

    return run
