"""tools/instructions.py: the instruction-count harness answers the command-line conventions.

The measurement itself needs valgrind and minutes; here only what an
operator meets first: --help, a usage error for an unknown workload.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

TOOL = str(Path(__file__).resolve().parents[2] / "tools" / "instructions.py")


def run_tool(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, TOOL, *args], capture_output=True, text=True, timeout=60, check=False)


def test_help_names_every_workload() -> None:
    done = run_tool("--help")
    assert done.returncode == 0
    for name in ("replay_20k", "replay_100k", "snapshot_40k", "put_reserve_ack", "put_many_batches"):
        assert name in done.stdout


@pytest.mark.skipif(shutil.which("valgrind") is None, reason="the workload check comes after the valgrind check")
def test_an_unknown_workload_is_a_usage_error() -> None:
    done = run_tool("--only", "no_such_workload")
    assert done.returncode == 64
    assert "unknown workload" in done.stderr and "put_reserve_ack" in done.stderr
