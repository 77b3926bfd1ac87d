"""A put's time and the previous version: a store without it is byte for byte; the old reader refuses it by name.

As tests/engine/test_lanes_old_reader.py, against the main branch's head
before put times (`PREVIOUS`), taken from git and run in a child interpreter.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from test_lanes_old_reader import PROGRAM, run_previous, sources_of

from model import directory_digest
from walqueue import Queue

#: The main branch's head before put times: the previous version's reader.
PREVIOUS = "e8a61b1"


@pytest.fixture(scope="module")
def previous(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return sources_of(PREVIOUS, tmp_path_factory.mktemp("previous"))


def test_a_store_without_put_times_is_byte_for_byte_the_previous_versions(previous: Path, tmp_path: Path) -> None:
    old, new = tmp_path / "old", tmp_path / "new"
    done = run_previous(previous, f"with Queue({str(old)!r}, sync=False) as q:\n" + textwrap.indent(PROGRAM, "    "))
    assert done.returncode == 0, done.stderr
    with Queue(new, sync=False) as q:
        exec(PROGRAM, {"q": q})  # noqa: S102 - the same program, in this version
    assert directory_digest(old) == directory_digest(new)


def test_the_previous_reader_refuses_a_stamped_put_by_name(previous: Path, tmp_path: Path) -> None:
    store = tmp_path / "q"
    with Queue(store, sync=False) as q:
        q.put("a", {}, put_at=1_000)
    code = textwrap.dedent(f"""
        try:
            Queue({str(store)!r}, sync=False).close()
        except Exception as exc:
            print(type(exc).__name__, exc)
        else:
            print("opened")
        """)
    done = run_previous(previous, code)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("CorruptStore") and "put_at" in done.stdout, done.stdout
    with Queue(store, sync=False) as q:  # compacted, the put time is spent: the snapshot keeps only the due time
        q.compact()
    done = run_previous(previous, code + "\nprint(Queue(" + repr(str(store)) + ", sync=False).get('a'))")
    assert done.stdout.startswith("opened") and "available_at=1000" in done.stdout, done.stdout
