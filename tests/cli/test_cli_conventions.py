"""The consumer's conventions: --version, EX_USAGE for usage errors, a clean Ctrl-C."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

import walqueue
from support.children import consumer_process
from walqueue.format.cmdline import EX_USAGE, EXIT_INTERRUPTED

ANSWER_TIMEOUT = 30.0

RunCli = Callable[..., subprocess.CompletedProcess[str]]


@pytest.fixture
def child_env(src_pythonpath: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (src_pythonpath, env.get("PYTHONPATH", "")) if p)
    return env


@pytest.fixture
def run_cli(child_env: dict[str, str]) -> RunCli:
    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "walqueue.cli", *args],
            capture_output=True,
            text=True,
            stdin=subprocess.DEVNULL,
            env=child_env,
            timeout=ANSWER_TIMEOUT,
            check=False,
        )

    return run


def test_version_prints_the_one_version_and_needs_no_directory(run_cli: RunCli) -> None:
    result = run_cli("--version")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"walqueue {walqueue.__version__}"


@pytest.mark.parametrize("args", [["--bogus", "DIR"], [], ["a", "b"]], ids=["unknown-option", "no-dir", "two-dirs"])
def test_usage_errors_exit_64_and_open_nothing(run_cli: RunCli, tmp_path: Path, args: list[str]) -> None:
    result = run_cli(*[str(tmp_path / a) if a in ("DIR", "a", "b") else a for a in args])
    assert result.returncode == EX_USAGE == 64, result.stderr
    assert "usage: walqueue" in result.stderr and result.stdout == ""
    assert list(tmp_path.iterdir()) == []  # no directory was created


def test_help_documents_every_exit_status(run_cli: RunCli) -> None:
    result = run_cli("--help")
    assert result.returncode == 0
    section = result.stdout.split("exit status:")[1]
    for code in ("0", "1", "2", "64", "130"):
        assert f"\n  {code} " in section, code


def _sigint_default() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_ctrl_c_closes_the_queue_and_exits_130_without_a_traceback(tmp_path: Path, child_env: dict[str, str]) -> None:
    directory = tmp_path / "q"
    # Ctrl-C at a terminal: SIGINT as the default. A background job of a non-interactive shell
    # inherits it ignored, and a Python started so never raises KeyboardInterrupt.
    process = consumer_process(directory, env=child_env, preexec_fn=_sigint_default)
    assert process.stdin is not None and process.stdout is not None
    process.stdin.write(b'{"op": "put", "task_id": "t1", "payload": {}, "id": 1}\n')
    process.stdin.flush()
    assert json.loads(process.stdout.readline()) == {"id": 1, "ok": True, "task_id": "t1"}
    process.send_signal(signal.SIGINT)  # now blocked reading the next request
    _, stderr = process.communicate(timeout=ANSWER_TIMEOUT)
    assert process.returncode == EXIT_INTERRUPTED == 130, stderr
    assert b"Traceback" not in stderr and stderr.strip() == b"walqueue: interrupted"
    # The queue was closed (its lock released) and what was answered is durable.
    with walqueue.Queue(directory) as queue:
        assert queue.get("t1") is not None
