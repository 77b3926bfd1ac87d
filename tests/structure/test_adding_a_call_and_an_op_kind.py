"""A new call and a new op kind are each declared once, and then work everywhere.

In a copy of the packages' sources, a throwaway call (`grant(task_id, *,
max_attempts)`: a ready task's attempts set anew) and its op kind are added
only where docs/ARCHITECTURE.md ("Adding a call", "Adding an op kind") says:
the call's row, its `Queue` method and planner; the kind's `OP_KINDS` row,
its transition and its name in format's `OP_NAMES`. Then, in a child process
running that copy, the call works through the JSON-lines consumer, a
`Client` (and its `Pipeline`) and an `AsyncClient` of a `walqueue-serve` started from the copy;
its op is counted in metrics and replayed when the store is reopened.
Anything else that had to change for that would be a place that fails to
derive from the rows.
"""

from __future__ import annotations

import filecmp
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
PACKAGES = REPO_ROOT / "packages"

ENGINE = "walqueue-engine/src/walqueue/engine"
#: file (relative to packages/) -> [(anchor, text inserted before it)]; None as anchor: appended.
ADDITIONS: dict[str, list[tuple[str | None, str]]] = {
    "walqueue-cli/src/walqueue/protocol/calltable.py": [
        (
            "CALLS: Final[",
            'GRANT: Final[Call[None]] = _write("grant", (_arg("task_id", "name"), _arg("max_attempts", "count",'
            ' keyword=True)), "a ready task gets max_attempts anew")\n',
        ),
        ("    )  # fmt: skip\n}", "        GRANT,\n"),
    ],
    f"{ENGINE}/queue.py": [
        (
            "    def batch(self) -> Batch:",
            "    def grant(self, task_id: str, *, max_attempts: int) -> None:\n"
            "        self._check_open()\n"
            "        with self._guard:\n"
            "            self._commit(ops.plan_grant(self._state, task_id, max_attempts))\n\n",
        )
    ],
    f"{ENGINE}/ops.py": [
        (
            None,
            "\n\ndef plan_grant(state: State, task_id: str, max_attempts: int) -> Plan:\n"
            '    kind = OP_KINDS["grant"]\n'
            '    max_attempts = check_int(max_attempts, "max_attempts", 1)\n'
            '    op: Op = {"op": "grant", "task": _record_in(state, task_id, kind), "max_attempts": max_attempts}\n'
            "    return Plan([op], [kind.encode(op)])\n",
        )
    ],
    f"{ENGINE}/opkinds.py": [
        (
            '        _kind("error",',
            '        _kind("grant", (("max_attempts", Field.POSITIVE_INT),), READY, "grants", "task.grant"),\n',
        )
    ],
    f"{ENGINE}/transitions.py": [
        (
            None,
            "\n\ndef grant(state: StateReads, staging: Staging, record: Row | None, op: Op) -> Stored:\n"
            "    assert record is not None\n"
            '    return _with(record, record[STATUS], record[AVAILABLE_AT], op["max_attempts"], None, None,'
            " record[ERROR])\n",
        )
    ],
    "walqueue-format/src/walqueue/format/transaction.py": [('"error"})', '"grant", ')],
}

CHILD = textwrap.dedent(
    """
    import asyncio, json, os, subprocess, sys, tempfile
    import walqueue
    from walqueue import Queue
    from walqueue.client import AsyncClient, Client
    from walqueue.engine import state

    copy = sys.argv[1]
    assert state.__file__.startswith(copy), state.__file__  # the copy runs, not the worktree
    here = sys.argv[2]

    def store(name, task):
        path = os.path.join(here, name)
        with Queue(path) as queue:
            queue.put(task, {})
        return path

    def attempts(path, task):  # reopened: the grant op is replayed from the log
        with Queue(path) as queue:
            return queue.get(task).max_attempts

    # 1. The JSON-lines protocol (its --help lists the call from the row).
    usage = subprocess.run([sys.executable, "-m", "walqueue.cli", "--help"], capture_output=True, text=True, timeout=60)
    assert any(line.split()[:2] == ["grant", "task_id,"] for line in usage.stdout.splitlines()), usage.stdout
    lines = store("lines", "a")
    requests = [{"op": "grant", "task_id": "a", "max_attempts": 7, "id": 1}, {"op": "metrics", "now": 0, "id": 2}]
    done = subprocess.run(
        [sys.executable, "-m", "walqueue.cli", lines],
        input="".join(json.dumps(r) + "\\n" for r in requests), capture_output=True, text=True, timeout=60,
    )
    answers = [json.loads(line) for line in done.stdout.splitlines()]
    assert answers[0] == {"ok": True, "id": 1}, (answers, done.stderr)
    assert answers[1]["metrics"]["counters"]["grants"] == 1, answers[1]
    assert attempts(lines, "a") == 7

    # 2. Client.call and AsyncClient.call against walqueue-serve.
    served = store("served", "b")
    socket_path = os.path.join(tempfile.mkdtemp(prefix="wq-", dir="/tmp"), "s")
    server = subprocess.Popen(
        [sys.executable, "-m", "walqueue.serve", served, "--socket", socket_path, "--log-level", "WARNING"],
        stdout=subprocess.PIPE,
    )
    try:
        assert server.stdout.readline().startswith(b"walqueue-serve: listening")
        with Client(socket_path) as client:
            assert client.call("grant", "b", max_attempts=9) is None
            assert client.get("b").max_attempts == 9
            with client.pipeline() as pipe:  # and in a pipeline, by name too
                pipe.call("grant", "b", max_attempts=10)
                pipe.call("get", "b")
                assert pipe.execute()[1].max_attempts == 10

        async def grant_awaited():
            async with AsyncClient(socket_path) as aclient:
                assert await aclient.call("grant", "b", max_attempts=11) is None
                return (await aclient.metrics(now=0))["counters"]["grants"]

        assert asyncio.run(grant_awaited()) == 3
    finally:
        server.terminate()
        assert server.wait(60) == 0
    assert attempts(served, "b") == 11
    print("granted everywhere")
    """
)


def copy_sources(target: Path) -> list[Path]:
    roots = []
    for src in sorted(PACKAGES.glob("*/src")):
        root = target / src.relative_to(PACKAGES)
        shutil.copytree(src, root, ignore=shutil.ignore_patterns("__pycache__"))
        roots.append(root)
    return roots


def add(target: Path) -> None:
    for name, additions in ADDITIONS.items():
        path = target / name
        text = path.read_text()
        for anchor, addition in additions:
            if anchor is None:
                text += addition
            else:
                assert text.count(anchor) == 1, f"{name}: the anchor {anchor!r} is not there exactly once"
                text = text.replace(anchor, addition + anchor)
        path.write_text(text)


def changed(before: Path, after: Path) -> set[str]:
    found: set[str] = set()
    for path in after.rglob("*.py"):
        name = path.relative_to(after).as_posix()
        if not filecmp.cmp(before / name, path, shallow=False):
            found.add(name)
    return found


@pytest.mark.timeout(180)
def test_a_call_and_an_op_kind_declared_in_their_places_work_through_every_client(tmp_path: Path) -> None:
    pristine = tmp_path / "pristine"
    copy = tmp_path / "copy"
    copy_sources(pristine)
    roots = copy_sources(copy)
    add(copy)
    assert changed(pristine, copy) == set(ADDITIONS)

    env = dict(os.environ, PYTHONPATH=os.pathsep.join(map(str, roots)), PYTHONDONTWRITEBYTECODE="1")
    work = tmp_path / "stores"
    work.mkdir()
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(copy), str(work)], env=env, capture_output=True, text=True, timeout=150
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "granted everywhere"
