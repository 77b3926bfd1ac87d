"""A file fsck or salvage cannot read is unreadable, never damaged, and salvage never calls it "nothing dropped".

The store has a snapshot and a live segment whose last transactions are the
newest puts. When that segment cannot be read (mode 000 in a process
without root's override, an I/O error), what it holds is unknown: fsck must
name the file as unreadable (a permission error), not blame a bit flip, and
salvage must refuse (an error) rather than write a store without those puts
and report that it dropped nothing. CI runs as root, where mode 000 is
readable, so the refusal to open is simulated by patching the one place
that opens store files, and a subprocess test drops privileges when it can.
"""

from __future__ import annotations

import contextlib
import errno
import io
import os
import shutil
import stat
import subprocess
import sys
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
from walqueue.format.salvage import SalvageError, salvage, survey

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


@pytest.fixture
def unreadable_segment(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """Make `wal-...2.log` refuse to open with EACCES, as mode 000 does for a non-root process."""
    name = wal_name(2)
    real = StoreDirectory.open_regular

    def open_regular(self: StoreDirectory, entry: str, what: str, *, max_size: int | None = None) -> int:
        if entry == name:
            raise PermissionError(errno.EACCES, "Permission denied", self.file_path(entry))
        return real(self, entry, what, max_size=max_size)

    monkeypatch.setattr(StoreDirectory, "open_regular", open_regular)
    yield name


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


def _can_drop_privileges() -> bool:
    return os.geteuid() != 0 or (hasattr(os, "setuid") and shutil.which("true") is not None)


@pytest.mark.timeout(120)
def test_a_mode_000_segment_in_a_process_without_privileges(src_pythonpath: str) -> None:
    """The real thing: chmod 000, and a process that cannot override it (root drops to nobody)."""
    if not _can_drop_privileges():
        pytest.skip("cannot run a process without root's permission override here")
    with tempfile.TemporaryDirectory(prefix="walqueue-unreadable-") as top:
        os.chmod(top, 0o755)
        store = store_with_snapshot(Path(top) / "q")
        for path in [store, *store.iterdir()]:
            os.chmod(path, 0o755 if path.is_dir() else 0o644)
        (store / wal_name(2)).chmod(0)
        outs = Path(top) / "outs"
        outs.mkdir()
        os.chmod(outs, 0o777)
        user = {"user": NOBODY} if os.geteuid() == 0 else {}
        env = {**os.environ, "PYTHONPATH": src_pythonpath}
        command = [sys.executable, "-m", "walqueue.format.fsck"]
        try:
            checked = subprocess.run(
                [*command, str(store)], env=env, capture_output=True, text=True, timeout=60, check=False, **user
            )
        except PermissionError:
            pytest.skip("the interpreter cannot be run by an unprivileged user here (or the user cannot be switched)")
        if "No module named" in checked.stderr:
            pytest.skip("the source tree is not readable by an unprivileged user")
        assert checked.returncode == EXIT_CORRUPT, checked.stderr
        assert "[unreadable]" in checked.stdout and "bit flip" not in checked.stdout
        salvaged = subprocess.run(
            [*command, "--salvage", str(outs / "new"), str(store)],
            env=env, capture_output=True, text=True, timeout=60, check=False, **user,
        )  # fmt: skip
        assert salvaged.returncode == EXIT_CORRUPT, salvaged.stdout
        assert "cannot read" in salvaged.stderr and "drops no transaction" not in salvaged.stdout
        (store / wal_name(2)).chmod(stat.S_IRUSR | stat.S_IWUSR)
