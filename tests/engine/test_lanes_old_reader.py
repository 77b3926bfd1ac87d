"""Lanes and the previous version: a store without lanes is byte for byte its store; its reader refuses ours by name.

The previous version's engine and format layers are taken from git (the
commit before lanes, `PREVIOUS`) into a temporary directory and run in a
child interpreter that sees only them (``python -S``: no site-packages, so
not this checkout's editable install). The same program run by both versions
must leave identical files; a store that uses a queue, a priority or a
queue setting must be refused by the old reader with a message that names
what it does not know.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from model import directory_digest
from walqueue import Queue

REPO = Path(__file__).resolve().parents[2]
#: The main branch's head when lanes began: the previous version's reader.
PREVIOUS = "7ef88fe"

PROGRAM = """
q.put("a", {"n": 1})
q.put("b", {"n": 2}, key="kb", available_at=5, max_attempts=2)
q.put_many([{"task_id": "c", "payload": {}}, {"task_id": "d", "payload": {"x": [1, 2]}}])
[lease] = q.reserve("w", now=0, lease_seconds=10)
q.ack(lease, now=1)
[lease] = q.reserve("w", now=6, lease_seconds=10)
q.release(lease, now=7, delay=3, error={"type": "E", "message": "m"})
q.compact()
q.put("e", {})
q.reserve("w", now=100, lease_seconds=10, limit=2)
"""


@pytest.fixture(scope="module")
def previous(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The previous version's engine and format sources, from git, or a skip where git or the commit is absent."""
    return sources_of(PREVIOUS, tmp_path_factory.mktemp("previous"))


def sources_of(commit: str, root: Path) -> Path:
    """The engine and format sources of `commit`, from git, into `root` (a skip where git or the commit is absent)."""
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    paths = ["packages/walqueue-format/src", "packages/walqueue-engine/src"]
    archive = subprocess.run(["git", "-C", str(REPO), "archive", commit, *paths], capture_output=True, check=False)
    if archive.returncode != 0:
        pytest.skip(f"commit {commit} is not in this checkout: {archive.stderr.decode(errors='replace')[:200]}")
    subprocess.run(["tar", "-x", "-C", str(root)], input=archive.stdout, check=True)
    return root


def run_previous(previous: Path, code: str) -> subprocess.CompletedProcess[str]:
    """Run `code` in a child that imports walqueue from the previous version's sources only."""
    path = os.pathsep.join(str(previous / p) for p in ("packages/walqueue-format/src", "packages/walqueue-engine/src"))
    env = {**os.environ, "PYTHONPATH": path}
    source = "import sys\nfrom walqueue import Queue\n" + textwrap.dedent(code)
    return subprocess.run([sys.executable, "-S", "-c", source], capture_output=True, text=True, env=env, timeout=120)


def test_the_child_really_runs_the_previous_version(previous: Path) -> None:
    done = run_previous(previous, "import walqueue.engine.state as s; print(s.__file__); print(sorted(s.OP_KINDS))")
    assert done.returncode == 0, done.stderr
    where, kinds = done.stdout.splitlines()
    assert where.startswith(str(previous))
    assert "configure" not in kinds


def assert_same_files_as_previous(previous: Path, old: Path, new: Path) -> None:
    """`PROGRAM` run by the previous version into `old` and by this one into `new` leaves identical files."""
    done = run_previous(previous, f"with Queue({str(old)!r}, sync=False) as q:\n" + textwrap.indent(PROGRAM, "    "))
    assert done.returncode == 0, done.stderr
    with Queue(new, sync=False) as q:
        exec(PROGRAM, {"q": q})  # noqa: S102 - the same program, in this version
    assert directory_digest(old) == directory_digest(new)


def test_a_store_without_lanes_is_byte_for_byte_the_previous_versions(previous: Path, tmp_path: Path) -> None:
    old, new = tmp_path / "old", tmp_path / "new"
    assert_same_files_as_previous(previous, old, new)
    before = directory_digest(old)
    with Queue(old, sync=False) as q:  # the previous version's store opens here, unchanged
        assert [t.task_id for t in q.tasks()] == ["a", "b", "c", "d", "e"]
        assert q.queues()[0]["name"] == "default"
    assert directory_digest(old) == before


@pytest.mark.parametrize(
    ("write", "named"),
    [
        ("q.put('a', {}, queue='mail')", "queue"),
        ("q.put('a', {}, priority=5)", "priority"),
        ("q.configure_queue('mail', paused=True)", "configure"),
        ("q.configure_queue('mail', rate=(2, 10)); q.put('a', {}, queue='mail'); q.compact()", "queues"),
        ("q.put('a', {}, queue='mail'); q.compact()", "queue"),
    ],
)
def test_the_previous_reader_refuses_a_lanes_store_by_name(
    previous: Path, tmp_path: Path, write: str, named: str
) -> None:
    store = tmp_path / "q"
    with Queue(store, sync=False) as q:
        exec(write, {"q": q})  # noqa: S102 - a lanes store
    done = open_in_previous(previous, store)
    assert done.stdout.startswith("CorruptStore"), done.stdout
    assert repr(named)[1:-1] in done.stdout, json.dumps(done.stdout)


def open_in_previous(previous: Path, store: Path, then: str = "") -> subprocess.CompletedProcess[str]:
    """Open `store` with the previous version: its stdout says "opened" (then runs `then`) or names the refusal."""
    code = f"""
    try:
        Queue({str(store)!r}, sync=False).close()
    except Exception as exc:
        print(type(exc).__name__, exc)
    else:
        print("opened")
    """
    done = run_previous(previous, textwrap.dedent(code) + then)
    assert done.returncode == 0, done.stderr
    return done
