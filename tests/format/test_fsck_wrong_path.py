"""A mistyped path is not a healthy queue: a directory of unrelated files is "not a WALQueue store" (exit 3).

`walqueue-fsck docs/` used to print notes about unknown files and then
"healthy (exit 0)". A directory holding no store file (CURRENT, LOCK, a
segment, a snapshot, a temporary file) but other files gets its own
status and exit code, documented in --help; an empty directory is still a
new, healthy store, and a store with unknown files in it is still a store.
"""

from __future__ import annotations

import contextlib
import io
from pathlib import Path
from typing import TYPE_CHECKING

from test_fsck import tx, unchanged, write_segment

from walqueue.format.fsck import EXIT_HEALTHY, EXIT_NOT_A_STORE, check, main

if TYPE_CHECKING:
    from conftest import RunPython

REPO_ROOT = Path(__file__).resolve().parents[2]


def foreign_directory(directory: Path) -> Path:
    directory.mkdir()
    (directory / "README.md").write_text("# notes\n")
    (directory / "FORMAT.md").write_text("bytes\n")
    (directory / "sub").mkdir()
    return directory


def test_a_directory_of_unrelated_files_is_not_a_store(tmp_path: Path) -> None:
    directory = foreign_directory(tmp_path / "docs")
    with unchanged(directory):
        report = check(directory)
    assert report.status == "not-a-store" and report.exit_code == EXIT_NOT_A_STORE == 3
    assert [f.kind for f in report.findings] == ["not-a-store"]
    assert report.survey is None and report.causes == []
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        assert main([str(directory)]) == EXIT_NOT_A_STORE
    assert "not a WALQueue store" in err.getvalue()
    assert "result: not-a-store (exit 3)" in out.getvalue() and "healthy" not in out.getvalue()


def test_the_repository_docs_directory_is_not_a_store(run_python: RunPython) -> None:
    result = run_python(["-m", "walqueue.format.fsck", str(REPO_ROOT / "docs")])
    assert result.returncode == EXIT_NOT_A_STORE, result.stdout
    assert "not a WALQueue store" in result.stdout


def test_an_empty_directory_is_still_a_healthy_new_store(tmp_path: Path) -> None:
    assert check(tmp_path).exit_code == EXIT_HEALTHY


def test_a_store_with_unknown_files_is_still_a_store(tmp_path: Path) -> None:
    write_segment(tmp_path, 1, tx(1))
    (tmp_path / "notes.txt").write_text("x")
    report = check(tmp_path)
    assert report.exit_code == EXIT_HEALTHY and "unknown-file" in [f.kind for f in report.findings]
    lock_only = tmp_path / "locked"
    lock_only.mkdir()
    (lock_only / "LOCK").write_bytes(b"")
    (lock_only / "notes.txt").write_text("x")
    assert check(lock_only).exit_code == EXIT_HEALTHY


def test_help_documents_the_not_a_store_status(run_python: RunPython) -> None:
    result = run_python(["-m", "walqueue.format.fsck", "--help"])
    section = result.stdout.split("exit status:")[1]
    assert "\n  3 " in section and "not a WALQueue store" in section


def test_the_operating_guide_exit_code_table_lists_not_a_store() -> None:
    table = (REPO_ROOT / "docs" / "guide" / "operating.md").read_text().split("## Exit codes")[1].split("\n\n")[2]
    [row] = [line for line in table.splitlines() if line.startswith("| 3 |")]
    assert "not a WALQueue store" in row
