"""The real consumer program (CONTRACT §6), driven as a co-process through pipes.

Every test writes one request and reads its answer before writing the next,
as a client of `python -m walqueue.cli DIR` would: an answer that is not
flushed at once shows up as a timeout, not as a slow pass. The child imports
exactly the `walqueue` packages this test process imports (the three `src`
directories in no-install mode, site-packages when installed).
"""

from __future__ import annotations

import json
import queue
import resource
import signal
import subprocess
import threading
from pathlib import Path
from typing import IO, Any

import pytest

from support.children import consumer_process, run_consumer
from walqueue import Queue

ANSWER_TIMEOUT = 30.0


class Consumer:
    """One running consumer. Answers are collected by a thread so that a read can time out."""

    def __init__(self, directory: Path | str, *, limit_file_bytes: int | None = None) -> None:
        def limit_file_size() -> None:
            # A write beyond the limit then fails with EFBIG instead of
            # killing the process with SIGXFSZ: a real OSError inside Queue.
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
            assert limit_file_bytes is not None
            resource.setrlimit(resource.RLIMIT_FSIZE, (limit_file_bytes, limit_file_bytes))

        self.process = consumer_process(directory, preexec_fn=limit_file_size if limit_file_bytes is not None else None)
        self._answers: queue.Queue[bytes | None] = queue.Queue()
        threading.Thread(target=self._collect, args=(self.process.stdout,), daemon=True).start()

    def _collect(self, stdout: IO[bytes]) -> None:
        for line in stdout:
            self._answers.put(line)
        self._answers.put(None)

    def send(self, data: bytes) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(data)
        self.process.stdin.flush()

    def answer(self) -> dict[str, Any]:
        line = self._answers.get(timeout=ANSWER_TIMEOUT)
        if line is None:
            assert self.process.stderr is not None
            status = self.process.wait(timeout=ANSWER_TIMEOUT)
            stderr = self.process.stderr.read().decode(errors="replace")
            raise AssertionError(f"the consumer exited ({status}) without answering; stderr:\n{stderr}")
        assert line.endswith(b"\n") and line.count(b"\n") == 1
        decoded: dict[str, Any] = json.loads(line)
        return decoded

    def ask(self, request: dict[str, Any]) -> dict[str, Any]:
        self.send(json.dumps(request).encode() + b"\n")
        return self.answer()

    def finish(self) -> tuple[int, str]:
        """Close stdin (end of input); return the exit status and stderr, checking no answer is left."""
        assert self.process.stdin is not None and self.process.stderr is not None
        self.process.stdin.close()
        status = self.process.wait(timeout=ANSWER_TIMEOUT)
        assert self._answers.get(timeout=ANSWER_TIMEOUT) is None, "an answer nobody asked for"
        return status, self.process.stderr.read().decode()

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        for stream in (self.process.stdin, self.process.stderr):
            if stream is not None:
                stream.close()


@pytest.fixture
def consumer(tmp_path: Path) -> Any:
    running = Consumer(tmp_path / "q")
    yield running
    running.kill()


def put(task_id: str, **fields: Any) -> dict[str, Any]:
    return {"op": "put", "task_id": task_id, "payload": fields.pop("payload", {"name": task_id}), **fields}


def run_until_exit(directory: Path | str, stdin_data: bytes | None) -> subprocess.CompletedProcess[bytes]:
    return run_consumer(str(directory), stdin=stdin_data)


# -- the operations -----------------------------------------------------------------------


def test_put_reserve_ack_release_round_trip(consumer: Consumer) -> None:
    assert consumer.ask(put("a", payload={"n": 1})) == {"ok": True, "task_id": "a"}
    assert consumer.ask(put("b", payload={"n": 2}, max_attempts=5)) == {"ok": True, "task_id": "b"}

    reserved = consumer.ask({"op": "reserve", "worker": "w1", "now": 100, "lease_seconds": 30, "limit": 5})
    assert reserved["ok"] is True
    lease_a, lease_b = reserved["leases"]
    assert lease_a == {
        "task_id": "a",
        "worker": "w1",
        "generation": 1,
        "deadline": 130,
        "attempts": 1,
        "payload": {"n": 1},
    }
    assert lease_b["task_id"] == "b" and lease_b["generation"] == 1

    assert consumer.ask({"op": "ack", "lease": lease_a, "now": 110}) == {"ok": True}
    assert consumer.ask({"op": "release", "lease": lease_b, "now": 110, "delay": 50}) == {"ok": True}

    task_a = consumer.ask({"op": "get", "task_id": "a"})["task"]
    assert task_a["status"] == "completed" and task_a["payload"] is None
    task_b = consumer.ask({"op": "get", "task_id": "b"})["task"]
    assert task_b["status"] == "ready" and task_b["available_at"] == 160 and task_b["attempts"] == 1

    assert consumer.ask({"op": "reserve", "worker": "w2", "now": 159, "lease_seconds": 5}) == {"ok": True, "leases": []}
    again = consumer.ask({"op": "reserve", "worker": "w2", "now": 160, "lease_seconds": 5})["leases"]
    assert [(lease["task_id"], lease["generation"], lease["deadline"]) for lease in again] == [("b", 2, 165)]
    assert consumer.finish() == (0, "")


def test_put_many_answers_task_ids_in_input_order_and_retries_change_nothing(consumer: Consumer) -> None:
    items = [{"task_id": "z", "payload": {}}, {"task_id": "m", "payload": {"k": [1]}, "key": "key-m"}]
    assert consumer.ask({"op": "put_many", "tasks": items}) == {"ok": True, "task_ids": ["z", "m"]}
    last_seq = consumer.ask({"op": "stats"})["stats"]["last_seq"]
    assert consumer.ask({"op": "put_many", "tasks": items + items}) == {"ok": True, "task_ids": ["z", "m", "z", "m"]}
    assert consumer.ask({"op": "stats"})["stats"]["last_seq"] == last_seq
    assert consumer.ask({"op": "get", "task_id": "m"})["task"]["key"] == "key-m"
    assert consumer.finish()[0] == 0


def test_get_answers_a_task_object_or_null(consumer: Consumer) -> None:
    consumer.ask(put("a", payload={"deep": {"x": [True, None, 1.5]}}, available_at=7, max_attempts=2))
    assert consumer.ask({"op": "get", "task_id": "a"}) == {
        "ok": True,
        "task": {
            "task_id": "a",
            "key": "a",
            "status": "ready",
            "payload": {"deep": {"x": [True, None, 1.5]}},
            "available_at": 7,
            "max_attempts": 2,
            "attempts": 0,
            "generation": 0,
            "worker": None,
            "deadline": None,
            "last_error": None,
        },
    }
    assert consumer.ask({"op": "get", "task_id": "never-stored"}) == {"ok": True, "task": None}
    assert consumer.finish()[0] == 0


def test_tasks_lists_by_task_id_and_filters_by_status(consumer: Consumer) -> None:
    for task_id in ("c", "a", "b"):
        consumer.ask(put(task_id))
    consumer.ask({"op": "reserve", "worker": "w", "now": 0, "lease_seconds": 10})  # leases "a"
    everything = consumer.ask({"op": "tasks"})["tasks"]
    assert [task["task_id"] for task in everything] == ["a", "b", "c"]
    leased = consumer.ask({"op": "tasks", "status": "leased"})["tasks"]
    assert [(task["task_id"], task["worker"], task["deadline"]) for task in leased] == [("a", "w", 10)]
    assert [task["task_id"] for task in consumer.ask({"op": "tasks", "status": "ready"})["tasks"]] == ["b", "c"]
    assert consumer.ask({"op": "tasks", "status": "dead"}) == {"ok": True, "tasks": []}
    assert consumer.finish()[0] == 0


def test_stats_answers_the_queue_stats(consumer: Consumer) -> None:
    consumer.ask(put("a"))
    stats = consumer.ask({"op": "stats"})["stats"]
    assert stats["counts"] == {"ready": 1, "leased": 0, "completed": 0, "dead": 0}
    assert stats["last_seq"] == 1 and stats["snapshot_seq"] == 0 and stats["wal_bytes"] > 0
    assert stats["segments"] >= 1
    assert consumer.finish()[0] == 0


def test_compact_publishes_a_snapshot_and_the_state_survives(consumer: Consumer) -> None:
    consumer.ask(put("a"))
    consumer.ask(put("b"))
    assert consumer.ask({"op": "compact"}) == {"ok": True}
    stats = consumer.ask({"op": "stats"})["stats"]
    assert stats["snapshot_seq"] == stats["last_seq"] == 2 and stats["wal_bytes"] == 0
    assert [task["task_id"] for task in consumer.ask({"op": "tasks"})["tasks"]] == ["a", "b"]
    assert consumer.finish()[0] == 0


# -- errors: named, answered, nothing changed, and the consumer goes on ----------------------

BAD_LINES = [
    (b"not json\n", "not JSON"),
    (b"[1,2]\n", "must be a JSON object"),
    (b'{"op":"explode"}\n', "unknown op"),
    (b'{"op":"put","payload":{}}\n', "missing field 'task_id'"),
    (b'{"op":"put","task_id":"x","payload":{},"colour":"red"}\n', "unknown field 'colour'"),
    (b'{"op":"put","task_id":"x","payload":[1]}\n', "JSON object"),
    (b'{"op":"reserve","worker":"w","now":true,"lease_seconds":5}\n', "boolean"),
    (b'{"op":"reserve","worker":"w","now":1.0,"lease_seconds":5}\n', "must be an integer"),
    (b'{"op":"reserve","worker":"w","now":-3,"lease_seconds":5}\n', ">= 0"),
    (b'{"op":"ack","lease":{"task_id":"a"},"now":5}\n', "lease"),
    (b'{"op":"put","task_id":"\xff","payload":{}}\n', "not UTF-8"),
    (b'{"op":"put","task_id":"' + b"n" * 1025 + b'","payload":{}}\n', "1024"),  # refused by Queue itself
]


def answers_bad_requests(consumer: Consumer, lines: list[tuple[bytes, str]]) -> None:
    """Each line is answered `BadRequest` with a message containing its words."""
    for line, words in lines:
        consumer.send(line)
        answer = consumer.answer()
        assert answer["ok"] is False and answer["error"] == "BadRequest", (line, answer)
        assert words in answer["message"], (line, answer)


def test_every_bad_request_is_answered_changes_nothing_and_the_consumer_goes_on(consumer: Consumer) -> None:
    consumer.ask(put("a"))
    before = consumer.ask({"op": "stats"})["stats"]
    answers_bad_requests(consumer, BAD_LINES)
    assert consumer.ask({"op": "stats"})["stats"] == before
    assert consumer.ask(put("b")) == {"ok": True, "task_id": "b"}
    assert consumer.finish()[0] == 0


def test_key_conflict_is_answered_by_name_and_changes_nothing(consumer: Consumer) -> None:
    consumer.ask(put("a", payload={"v": 1}, id=1))
    before = consumer.ask({"op": "stats"})["stats"]
    answer = consumer.ask(put("a", payload={"v": 2}, id=2))
    assert answer["id"] == 2 and answer["ok"] is False and answer["error"] == "KeyConflict"
    assert isinstance(answer["message"], str) and answer["message"]
    assert consumer.ask({"op": "stats"})["stats"] == before
    assert consumer.ask({"op": "get", "task_id": "a"})["task"]["payload"] == {"v": 1}
    assert consumer.finish()[0] == 0


def test_stale_lease_is_answered_by_name_and_changes_nothing(consumer: Consumer) -> None:
    consumer.ask(put("a"))
    (lease,) = consumer.ask({"op": "reserve", "worker": "w", "now": 0, "lease_seconds": 10})["leases"]
    assert consumer.ask({"op": "ack", "lease": lease, "now": 1}) == {"ok": True}
    before = consumer.ask({"op": "stats"})["stats"]
    for request in (
        {"op": "ack", "lease": lease, "now": 2, "id": "again"},
        {"op": "release", "lease": lease, "now": 2, "id": "again"},
        {"op": "ack", "lease": {**lease, "worker": "someone-else"}, "now": 2, "id": "again"},
    ):
        answer = consumer.ask(request)
        assert answer["id"] == "again" and answer["ok"] is False and answer["error"] == "StaleLease", answer
    assert consumer.ask({"op": "stats"})["stats"] == before
    assert consumer.finish()[0] == 0


def test_an_io_error_that_poisons_the_queue_is_fatal_and_exits_1(tmp_path: Path) -> None:
    directory = tmp_path / "q"
    consumer = Consumer(directory, limit_file_bytes=64 * 1024)
    try:
        assert consumer.ask(put("small")) == {"ok": True, "task_id": "small"}
        answer = consumer.ask(put("huge", payload={"blob": "x" * 200_000}, id={"n": 1}))
        assert answer["id"] == {"n": 1} and answer["ok"] is False and answer["error"] == "Fatal"
        assert "Error" in answer["message"]
        status, _ = consumer.finish()
        assert status == 1
    finally:
        consumer.kill()
    with Queue(directory, sync=False) as reopened:  # the lock was released; the torn write is cut
        assert [task.task_id for task in reopened.tasks()] == ["small"]


# -- the id ---------------------------------------------------------------------------------


@pytest.mark.parametrize("request_id", [42, -0.5, "req-1", None, {"trace": [1, "x"]}, [3, None], True])
def test_the_id_of_any_json_type_is_echoed(consumer: Consumer, request_id: Any) -> None:
    for request in ({"op": "stats", "id": request_id}, {"op": "nope", "id": request_id}):
        answer = consumer.ask(request)
        assert "id" in answer and answer["id"] == request_id and type(answer["id"]) is type(request_id)
    assert "id" not in consumer.ask({"op": "stats"})
    assert consumer.finish()[0] == 0


# -- lines, end of input, exit statuses -------------------------------------------------------


def test_blank_lines_are_skipped_without_an_answer(consumer: Consumer) -> None:
    consumer.send(b"\n   \n\t\r\n")
    assert consumer.ask({"op": "stats", "id": "first"})["id"] == "first"
    consumer.send(b"\n\n")
    assert consumer.finish() == (0, "")


def test_a_last_line_without_newline_is_answered_before_exit_0(tmp_path: Path) -> None:
    result = run_until_exit(tmp_path / "q", b'{"op":"put","task_id":"a","payload":{}}\n{"op":"stats","id":2}')
    assert result.returncode == 0, result.stderr
    answers = [json.loads(line) for line in result.stdout.splitlines()]
    assert answers[0] == {"ok": True, "task_id": "a"} and answers[1]["id"] == 2 and len(answers) == 2


def test_end_of_input_exits_0_and_a_new_queue_sees_the_state(tmp_path: Path) -> None:
    directory = tmp_path / "q"
    consumer = Consumer(directory)
    try:
        consumer.ask(put("a", payload={"n": 1}))
        consumer.ask(put("b", payload={"n": 2}))
        (lease,) = consumer.ask({"op": "reserve", "worker": "w", "now": 5, "lease_seconds": 10})["leases"]
        consumer.ask({"op": "ack", "lease": lease, "now": 6})
        assert consumer.finish() == (0, "")
    finally:
        consumer.kill()
    with Queue(directory, sync=False) as reopened:  # the consumer closed the queue and released the lock
        task_a = reopened.get("a")
        assert task_a is not None and task_a.status == "completed" and task_a.payload is None
        task_b = reopened.get("b")
        assert task_b is not None and task_b.status == "ready" and task_b.payload == {"n": 2}
        assert reopened.stats()["counts"] == {"ready": 1, "leased": 0, "completed": 1, "dead": 0}


def _assert_refused_before_reading(directory: Path | str, *words: str) -> None:
    """Exit 2 with a message on stderr while stdin stays open and unwritten: nothing was read."""
    process = consumer_process(directory)
    try:
        status = process.wait(timeout=ANSWER_TIMEOUT)
        assert process.stdout is not None and process.stderr is not None
        stdout, stderr = process.stdout.read(), process.stderr.read().decode()
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        for stream in (process.stdin, process.stdout, process.stderr):
            if stream is not None:
                stream.close()
    assert status == 2
    assert stdout == b""
    assert str(directory) in stderr
    for word in words:
        assert word in stderr, stderr


def test_a_locked_directory_exits_2_before_reading_any_request(tmp_path: Path) -> None:
    directory = tmp_path / "q"
    with Queue(directory, sync=False) as owner:
        owner.put("mine", {})
        _assert_refused_before_reading(directory, "DirectoryLocked")
        assert owner.stats()["last_seq"] == 1  # the owner is undisturbed


def test_a_corrupt_directory_exits_2_before_reading_any_request(tmp_path: Path) -> None:
    directory = tmp_path / "q"
    directory.mkdir()
    (directory / "CURRENT").write_bytes(b"garbage, not a frame")
    _assert_refused_before_reading(directory, "CorruptStore")
    assert (directory / "CURRENT").read_bytes() == b"garbage, not a frame"


def test_a_path_that_is_a_regular_file_exits_2(tmp_path: Path) -> None:
    path = tmp_path / "file"
    path.write_bytes(b"not a directory")
    _assert_refused_before_reading(path, "cannot open")
    assert path.read_bytes() == b"not a directory"


def test_help_explains_the_protocol_with_an_example_session(tmp_path: Path) -> None:
    result = run_consumer("--help")
    assert result.returncode == 0
    text = result.stdout.decode()
    for word in ("DIRECTORY", "put_many", "reserve", "lease_seconds", "StaleLease", "Fatal", "example session", '"id"'):
        assert word in text, word


def test_a_missing_directory_argument_is_a_usage_error(tmp_path: Path) -> None:
    result = run_consumer()
    # EX_USAGE (64): 2 means "cannot open DIRECTORY", a usage error is not that.
    assert result.returncode == 64 and b"DIRECTORY" in result.stderr and result.stdout == b""


def test_a_reader_that_goes_away_stops_the_consumer_cleanly(tmp_path: Path) -> None:
    directory = tmp_path / "q"
    process = consumer_process(directory)
    assert process.stdout is not None
    process.stdout.close()  # nobody will ever read an answer
    _, stderr = process.communicate(b'{"op":"put","task_id":"a","payload":{}}\n', timeout=ANSWER_TIMEOUT)
    assert process.returncode == 1
    assert b"stdout was closed" in stderr and b"Traceback" not in stderr
    with Queue(directory, sync=False) as reopened:  # the lock was released; the put was durable before its answer
        assert reopened.get("a") is not None
