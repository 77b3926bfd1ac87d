"""Request lines are bounded (hardening: "CLI line length"), and the `wait` op of the protocol.

A line longer than `MAX_LINE_BYTES` is refused with `BadRequest` after
reading at most that many bytes of it (plus one read's worth), and the next
line is served. The functional checks use a small limit in-process; one
check sends a real line just over the real bound through the consumer's pipe
and measures the child's peak memory.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from walqueue import Queue
from walqueue.cli.__main__ import serve
from walqueue.format import MAX_FRAME_BYTES
from walqueue.protocol.requests import (
    MAX_LINE_BYTES,
    OVERLONG,
    LineReader,
    discard_line,
    read_bounded_line,
    respond,
)

pytestmark = pytest.mark.timeout(120)


def child_environment(src_pythonpath: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [src_pythonpath, env.get("PYTHONPATH", "")]))
    return env


class CountingReader(io.BytesIO):
    """A stream that records the most bytes held by the reader between two newlines."""

    def __init__(self, data: bytes) -> None:
        super().__init__(data)
        self.reads: list[int] = []

    def readline(self, size: int | None = -1) -> bytes:
        chunk = super().readline(size)
        self.reads.append(len(chunk))
        return chunk


def answers_of(output: io.BytesIO) -> list[dict[str, Any]]:
    return [json.loads(line) for line in output.getvalue().splitlines()]


def test_the_bound_covers_a_frame_of_six_byte_escapes_plus_an_envelope() -> None:
    assert MAX_LINE_BYTES >= 6 * MAX_FRAME_BYTES
    assert MAX_LINE_BYTES - 6 * MAX_FRAME_BYTES <= 2**20


def test_a_line_just_over_the_bound_is_a_bad_request_and_the_next_line_is_served(tmp_path: Path) -> None:
    limit = 1000
    over = b'{"op":"stats","pad":"' + b"x" * limit + b'"}\n'
    requests = CountingReader(over + b'{"op":"put","task_id":"t","payload":{},"id":2}\n')
    answers = io.BytesIO()
    with Queue(tmp_path / "q", sync=False) as queue:
        assert serve(queue, requests, answers, line_limit=limit) == 0
        assert queue.get("t") is not None
    first, second = answers_of(answers)
    assert first["ok"] is False and first["error"] == "BadRequest" and str(limit) in first["message"]
    assert "id" not in first
    assert second == {"id": 2, "ok": True, "task_id": "t"}
    # The reader never asked for more than the limit and one byte in one line.
    assert max(requests.reads) <= limit + 1


def test_a_line_of_exactly_the_bound_is_read_and_parsed(tmp_path: Path) -> None:
    limit = 200
    body = b'{"op":"get","task_id":"'
    line = body + b"y" * (limit - len(body) - 2) + b'"}'
    assert len(line) == limit
    answers = io.BytesIO()
    with Queue(tmp_path / "q", sync=False) as queue:
        serve(queue, io.BytesIO(line + b"\n" + line), answers, line_limit=limit)
    assert answers_of(answers) == [{"ok": True, "task": None}] * 2


def test_an_unterminated_last_line_over_the_bound_is_refused(tmp_path: Path) -> None:
    answers = io.BytesIO()
    with Queue(tmp_path / "q", sync=False) as queue:
        serve(queue, io.BytesIO(b"z" * 101), answers, line_limit=100)
    [answer] = answers_of(answers)
    assert answer["error"] == "BadRequest"


def test_read_bounded_line_and_discard_line_keep_to_their_bounds() -> None:
    stream = io.BytesIO(b"a" * 50 + b"\nshort\n" + b"b" * 10)
    assert read_bounded_line(stream.readline, 10) is OVERLONG
    discard_line(stream.readline)
    assert read_bounded_line(stream.readline, 10) == b"short\n"
    assert read_bounded_line(stream.readline, 10) == b"b" * 10
    assert read_bounded_line(stream.readline, 10) is None


@pytest.mark.parametrize("chunk", [1, 3, 7, 1000])
def test_line_reader_splits_any_chunking_and_reports_each_overlong_line_once(chunk: int) -> None:
    data = b"one\n" + b"x" * 25 + b"\ntwo\n\n" + b"y" * 11 + b"\n" + b"z" * 10 + b"\nlast"
    reader = LineReader(limit=10)
    got: list[Any] = []
    for start in range(0, len(data), chunk):
        got.extend(bytes(item) if item is not OVERLONG else item for item in reader.feed(data[start : start + chunk]))
        assert reader.pending <= 10 + 1
    assert got == [b"one\n", OVERLONG, b"two\n", b"\n", OVERLONG, b"z" * 10 + b"\n"]
    assert reader.end() == b"last"


def test_line_reader_end_after_an_overlong_unterminated_line_is_nothing() -> None:
    reader = LineReader(limit=4)
    assert reader.feed(b"abcdefgh") == [OVERLONG]
    assert reader.end() is None


def test_wait_in_the_consumer_answers_not_committed_after_its_timeout(tmp_path: Path) -> None:
    with Queue(tmp_path / "q", sync=False) as queue:
        started = time.monotonic()
        reply = respond(b'{"op":"wait","timeout":0.2,"id":1}', queue)
        assert time.monotonic() - started >= 0.2
    assert reply.answer == {"id": 1, "ok": True, "committed": False}


@pytest.mark.parametrize("timeout", ["1", True, -1, 86_401, None, 1e400])
def test_wait_refuses_a_timeout_that_is_not_a_number_of_seconds_in_range(tmp_path: Path, timeout: Any) -> None:
    line = '{"op":"wait","timeout":' + ("1e400" if timeout == 1e400 else json.dumps(timeout)) + "}"
    with Queue(tmp_path / "q", sync=False) as queue:
        reply = respond(line, queue)
    assert reply.answer["error"] == "BadRequest"


def test_a_real_line_just_over_the_bound_is_refused_with_memory_bounded(tmp_path: Path, src_pythonpath: str) -> None:
    # The consumer must not read the 97 MiB line whole: its peak memory stays
    # well below the line's size plus a copy, and the next line is answered.
    # VmHWM, the peak of this process's own memory map: getrusage's ru_maxrss keeps the peak of
    # the memory map exec replaced, the parent's when the child was spawned with vfork, so it
    # reported pytest's size once earlier tests had grown it.
    program = (
        "import sys\n"
        "from walqueue.cli.__main__ import main\n"
        "status = main(sys.argv[1:])\n"
        "hwm = next(line for line in open('/proc/self/status') if line.startswith('VmHWM:'))\n"
        "print('maxrss', hwm.split()[1], file=sys.stderr)\n"
        "sys.exit(status)\n"
    )
    process = subprocess.Popen(
        [sys.executable, "-c", program, str(tmp_path / "q")],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=child_environment(src_pythonpath),
    )
    assert process.stdin is not None
    try:
        block = b"x" * 2**20
        sent = 0
        while sent <= MAX_LINE_BYTES + 2**20:
            process.stdin.write(block)
            sent += len(block)
        process.stdin.write(b'\n{"op":"get","task_id":"t","id":"next"}\n')
        process.stdin.close()
        process.stdin = None
        out, err = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=10)
    assert process.returncode == 0, err
    first, second = (json.loads(line) for line in out.splitlines())
    assert first["error"] == "BadRequest"
    assert second == {"id": "next", "ok": True, "task": None}
    peak_bytes = int(err.decode().split("maxrss")[-1].split()[0]) * 1024  # Linux: KiB
    # The line held at most once, plus the interpreter (the unbounded reader held it about 2.3 times).
    print(f"consumer peak RSS {peak_bytes / 2**20:.0f} MiB for a line of {sent / 2**20:.0f} MiB")
    assert peak_bytes < MAX_LINE_BYTES + 80 * 2**20, peak_bytes
