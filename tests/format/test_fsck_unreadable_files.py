"""A file fsck or salvage cannot read is unreadable, never damaged, and salvage never calls it "nothing dropped".

The store has a snapshot and a live segment whose last transactions are the
newest puts. When that segment cannot be read (mode 000 in a process
without root's override, an I/O error), what it holds is unknown: fsck must
name the file as unreadable (a permission error), not blame a bit flip, and
salvage must refuse (an error) rather than write a store without those puts
and report that it dropped nothing. CI runs as root, where mode 000 is
readable, so the refusal to open is simulated by patching the one place
that opens store files, and one test forks a child that drops root's
privileges before it reads a real mode-000 segment.
"""

from __future__ import annotations

import contextlib
import errno
import io
import json
import os
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_fsck import unchanged

from walqueue import Queue
from walqueue.format import wal_name
from walqueue.format.directory import StoreDirectory
from walqueue.format.fsck import EXIT_CORRUPT, check, main
from walqueue.format.fsck.render import describe_plan
from walqueue.format.fsck.salvage import SalvageError, salvage, survey

#: The unprivileged user a root test process drops to.
NOBODY = 65534


def store_with_snapshot(directory: Path) -> Path:
    """5 puts, a compaction (snapshot at seq 5, live segment 2), then three more puts (seq 6..8)."""
    with Queue(directory, sync=False, compact_bytes=None) as q:
        for i in range(5):
            q.put(f"a{i}", {"i": i})
        q.compact()
        for i in range(3):
            q.put(f"late{i}", {"i": i})
    return directory


def refuse_to_open(monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    """Make store file `name` refuse to open with EACCES, as mode 000 does for a non-root process."""
    real = StoreDirectory.open_regular

    def open_regular(self: StoreDirectory, entry: str, what: str, *, max_size: int | None = None) -> int:
        if entry == name:
            raise PermissionError(errno.EACCES, "Permission denied", self.file_path(entry))
        return real(self, entry, what, max_size=max_size)

    monkeypatch.setattr(StoreDirectory, "open_regular", open_regular)


@pytest.fixture
def unreadable_segment(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """The live segment `wal-...2.log`, which holds the newest puts, cannot be opened."""
    refuse_to_open(monkeypatch, wal_name(2))
    yield wal_name(2)


def test_fsck_names_an_unreadable_segment_as_unreadable_not_as_a_bit_flip(
    tmp_path: Path, unreadable_segment: str
) -> None:
    store = store_with_snapshot(tmp_path / "q")
    report = check(store)
    assert report.exit_code == EXIT_CORRUPT
    [finding] = [f for f in report.findings if f.file == unreadable_segment]
    assert (finding.severity, finding.kind) == ("error", "unreadable")
    assert "Permission denied" in finding.message
    assert [c.kind for c in report.causes] == ["unreadable"]
    assert "permission" in report.causes[0].message and "bit flip" not in report.causes[0].message
    assert report.survey is not None and report.survey.unreadable() == [unreadable_segment]


def test_the_plan_of_a_store_with_an_unreadable_segment_never_says_nothing_is_dropped(
    tmp_path: Path, unreadable_segment: str
) -> None:
    store = store_with_snapshot(tmp_path / "q")
    plan = survey(store).plan
    assert plan is not None
    assert plan.unreadable == [unreadable_segment] and not plan.complete
    text = "\n".join(describe_plan(plan))
    assert "drops no transaction" not in text
    assert f"cannot read {unreadable_segment}" in text


def test_salvage_refuses_when_a_live_segment_cannot_be_read(tmp_path: Path, unreadable_segment: str) -> None:
    store = store_with_snapshot(tmp_path / "q")
    out = tmp_path / "salvaged"
    with unchanged(store), pytest.raises(SalvageError, match=f"cannot read {unreadable_segment}"):
        salvage(store, out)
    assert not out.exists() or not any(out.iterdir())
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()) as stdout:
        assert main(["--salvage", str(out), str(store)]) == EXIT_CORRUPT
    assert "cannot read" in err.getvalue() and "drops no transaction" not in stdout.getvalue()


def test_an_unreadable_current_is_unreadable_not_damaged(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = store_with_snapshot(tmp_path / "q")
    refuse_to_open(monkeypatch, "CURRENT")
    report = check(store)
    assert [(f.severity, f.kind, f.file) for f in report.findings if f.severity != "note"] == [
        ("error", "unreadable", "CURRENT")
    ]
    assert [c.kind for c in report.causes] == ["unreadable"]
    with pytest.raises(SalvageError, match="cannot read CURRENT"):
        salvage(store, tmp_path / "out")


def test_a_read_error_in_the_middle_of_a_segment_is_unreadable_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = store_with_snapshot(tmp_path / "q")
    import walqueue.format.survey as survey_module

    def failing_scan(*args: object, **kwargs: object) -> Iterator[tuple[int, int, object]]:
        raise OSError(errno.EIO, "Input/output error")
        yield  # pragma: no cover

    monkeypatch.setattr(survey_module, "scan_frames", failing_scan)
    found = survey(store)
    assert found.unreadable() == [wal_name(2)]
    with pytest.raises(SalvageError, match="cannot read"):
        salvage(store, tmp_path / "out")


def _in_unprivileged_child(store: Path, out: Path) -> dict[str, object]:
    """Check and salvage `store` in a forked child that cannot override file modes; its results.

    Root drops to nobody first (the modules are already imported, so the
    child reads no source file); any other user just runs, since mode 000
    already applies to it.
    """
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        status = 1
        try:
            os.close(read_end)
            if os.geteuid() == 0:
                os.setgroups([])
                os.setgid(NOBODY)
                os.setuid(NOBODY)
            stdout, stderr = io.StringIO(), io.StringIO()
            with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
                checked = main([str(store)])
                salvaged = main(["--salvage", str(out), str(store)])
            result = {
                "checked": checked,
                "salvaged": salvaged,
                "stdout": stdout.getvalue(),
                "stderr": stderr.getvalue(),
            }
            os.write(write_end, json.dumps(result).encode())
            status = 0
        finally:
            os._exit(status)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as pipe:
        data = pipe.read()
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, "the unprivileged child failed"
    return dict(json.loads(data))


@pytest.mark.timeout(120)
@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_mode_000_segment_in_a_process_without_privileges() -> None:
    """The real thing: chmod 000, read by a process that cannot override it (root drops to nobody)."""
    with tempfile.TemporaryDirectory(prefix="walqueue-unreadable-") as top:
        os.chmod(top, 0o777)
        store = store_with_snapshot(Path(top) / "q")
        for path in [store, *store.iterdir()]:
            os.chmod(path, 0o755 if path.is_dir() else 0o644)
        (store / wal_name(2)).chmod(0)
        result = _in_unprivileged_child(store, Path(top) / "new")
        (store / wal_name(2)).chmod(stat.S_IRUSR | stat.S_IWUSR)
    assert result["checked"] == EXIT_CORRUPT, result
    stdout = str(result["stdout"])
    assert f"{wal_name(2)}: cannot read: Permission denied [unreadable]" in stdout
    assert "bit flip" not in stdout and "drops no transaction" not in stdout
    assert result["salvaged"] == EXIT_CORRUPT
    assert f"cannot read {wal_name(2)}" in str(result["stderr"])
