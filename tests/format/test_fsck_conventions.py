"""walqueue-fsck's conventions: --version, EX_USAGE for usage errors, a clean Ctrl-C."""

from __future__ import annotations

import contextlib
import io
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

import walqueue.format
import walqueue.format.fsck as fsck
import walqueue.format.fsck.cli as fsck_cli
from walqueue.format.cmdline import EX_USAGE, EXIT_INTERRUPTED

if TYPE_CHECKING:
    from conftest import RunPython


def test_version_needs_no_directory(run_python: RunPython) -> None:
    result = run_python(["-m", "walqueue.format.fsck", "--version"])
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"walqueue-fsck {walqueue.format.__version__}"


@pytest.mark.parametrize(
    "args", [["--jsn", "DIR"], [], ["DIR", "DIR"], ["--salvage"]], ids=["typo", "no-dir", "two-dirs", "no-out"]
)
def test_a_usage_error_exits_64_never_2_which_means_corrupt(
    run_python: RunPython, tmp_path: Path, args: list[str]
) -> None:
    result = run_python(["-m", "walqueue.format.fsck", *(str(tmp_path) if a == "DIR" else a for a in args)])
    assert result.returncode == EX_USAGE == 64, result.stderr
    assert result.returncode != fsck.EXIT_CORRUPT
    assert "usage: walqueue-fsck" in result.stderr and result.stdout == ""


def test_help_documents_every_exit_status(run_python: RunPython) -> None:
    result = run_python(["-m", "walqueue.format.fsck", "--help"])
    assert result.returncode == 0
    section = result.stdout.split("exit status:")[1]
    for code in ("0", "1", "2", "64", "130"):
        assert f"\n  {code} " in section, code
    assert "--salvage" in result.stdout and "docs/REPAIR.md" in result.stdout


def test_ctrl_c_exits_130_with_one_line(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    def interrupted(*args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(fsck_cli, "check", interrupted)
    monkeypatch.setattr(fsck_cli, "salvage", interrupted)
    for args in ([str(tmp_path)], ["--salvage", str(tmp_path / "out"), str(tmp_path)]):
        err = io.StringIO()
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            assert fsck.main(args) == EXIT_INTERRUPTED == 130
        assert err.getvalue() == "walqueue-fsck: interrupted\n"
