"""The dashboard's parts on their own: the sampler's minutes, the --http options, serving in a thread, events."""

from __future__ import annotations

import argparse
import json
import logging
import re
import socket
import urllib.error
import urllib.request
from typing import Any

import pytest

from walqueue.dashboard import RunningServer
from walqueue.dashboard.http import add_http_arguments, http_options, is_loopback, parse_address
from walqueue.dashboard.sampler import MINUTES, Sampler
from walqueue.engine import events
from walqueue.engine.metrics import Histogram


def reading(puts: int, acks: int = 0, snapshot_seq: int = 0) -> dict[str, Any]:
    return {
        "counters": {"puts": puts, "acks": acks, "releases": 0, "deaths": 0, "compactions": 0},
        "gauges": {"snapshot_seq": snapshot_seq},
    }


def test_throughput_is_the_difference_of_first_readings_per_minute() -> None:
    sampler = Sampler()
    start = 60 * 1000
    sampler.observe(start + 5, reading(10))
    sampler.observe(start + 50, reading(12))
    sampler.observe(start + 65, reading(17, acks=3))
    sampler.observe(start + 185, reading(20, acks=3))  # minute 2 had no reading
    series = sampler.throughput(start + 185)["series"]
    assert len(series["puts"]) == MINUTES
    assert series["puts"][-4:] == [7, None, None, 0]  # minute 1's end is unknown, so is minute 1
    assert series["acks"][-4:] == [3, None, None, 0]
    assert series["puts"][:-4] == [None] * (MINUTES - 4)


def test_a_counter_that_went_down_gives_no_figure() -> None:
    sampler = Sampler()
    sampler.observe(60, reading(50))
    sampler.observe(125, reading(3))  # the queue was reopened: its counters started again
    assert sampler.throughput(125)["series"]["puts"][-2] is None


def test_the_sampler_notices_a_new_snapshot() -> None:
    sampler = Sampler()
    sampler.observe(100, reading(1, snapshot_seq=5))
    assert sampler.moments()["snapshot_changed_at"] is None
    sampler.observe(130, reading(1, snapshot_seq=9))
    assert sampler.moments()["snapshot_changed_at"] == 130


def options(*argv: str, environ: dict[str, str] | None = None) -> Any:
    parser = argparse.ArgumentParser()
    add_http_arguments(parser)
    return http_options(parser.parse_args(list(argv)), environ or {})


def test_http_options_default_to_nothing_and_loopback_is_free() -> None:
    assert options() is None
    chosen = options("--http", "127.0.0.1:8080", "--http-actions")
    assert (chosen.host, chosen.port, chosen.actions, chosen.token) == ("127.0.0.1", 8080, True, None)
    assert options("--http", "[::1]:0").host == "::1"
    assert options("--http", ":9000").host == "127.0.0.1"


@pytest.mark.parametrize(
    "argv",
    [
        ("--http", "0.0.0.0:8080"),
        ("--http", "0.0.0.0:8080", "--http-allow-remote"),
        ("--http", "127.0.0.1"),
        ("--http", "127.0.0.1:99999"),
        ("--http", "example.org:80"),
        ("--http-actions",),
    ],
)
def test_http_options_refuse_what_is_unsafe_or_malformed(argv: tuple[str, ...]) -> None:
    with pytest.raises(ValueError):
        options(*argv)


def test_a_remote_address_needs_the_flag_and_a_token(tmp_path: Any) -> None:
    token_file = tmp_path / "token"
    token_file.write_text("a-token-of-twenty-chars\n")
    chosen = options("--http", "0.0.0.0:8080", "--http-allow-remote", "--http-token-file", str(token_file))
    assert chosen.token == "a-token-of-twenty-chars"
    from_env = options("--http", "0.0.0.0:1", "--http-allow-remote", environ={"WALQUEUE_HTTP_TOKEN": "x" * 16})
    assert from_env.token == "x" * 16
    with pytest.raises(ValueError):
        options("--http", "0.0.0.0:1", "--http-allow-remote", environ={"WALQUEUE_HTTP_TOKEN": "short"})
    assert is_loopback("127.0.0.2") and is_loopback("::1") and not is_loopback("10.0.0.1")
    assert parse_address("[::1]:80") == ("::1", 80)


def test_the_server_goes_on_after_garbage_on_the_wire(served: RunningServer) -> None:
    for garbage in (
        b"\x00\xff garbage\r\n\r\n",
        b"GET /" + b"a" * 70000 + b" HTTP/1.1\r\n\r\n",
        b"BREW /api/overview HTTP/1.1\r\nHost: x\r\n\r\n",
    ):
        with socket.create_connection((served.host, served.port), timeout=10) as connection:
            connection.sendall(garbage)
            answer = connection.recv(1000)
            # A 4xx (http.server answers a request line it cannot read without a status line), or a close.
            assert answer == b"" or re.search(rb"\b4\d\d\b", answer), answer
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(served.url + "api/dead?page=" + "9" * 40, timeout=10)
    assert refused.value.code == 400
    with urllib.request.urlopen(served.url + "api/overview", timeout=10) as answer:
        assert answer.status == 200 and "counts" in json.loads(answer.read())


def test_a_silent_client_holds_only_its_own_thread(served: RunningServer) -> None:
    with socket.create_connection((served.host, served.port), timeout=10):
        with urllib.request.urlopen(served.url + "metrics", timeout=10) as answer:
            assert answer.status == 200


def test_events_are_logged_by_name_with_fields_and_as_json_lines(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="walqueue.events"):
        events.emit(events.RELEASE, {"task_id": "t", "error": {"type": "KeyError", "message": "<x>"}})
    (record,) = caplog.records
    assert record.event == "task.release"  # type: ignore[attr-defined]
    assert record.fields == {"task_id": "t", "error": {"type": "KeyError", "message": "<x>"}}  # type: ignore[attr-defined]
    line = json.loads(events.JsonLinesFormatter().format(record))
    assert line["event"] == "task.release" and line["fields"]["task_id"] == "t" and line["level"] == "INFO"
    with pytest.raises(ValueError):
        events.emit("task.exploded", {"task_id": "t"})
    assert len(set(events.EVENTS)) == len(events.EVENTS) and all(name.startswith("task.") for name in events.EVENTS)


def test_a_histogram_puts_each_value_in_the_first_bucket_that_holds_it() -> None:
    histogram = Histogram((1.0, 2.0))
    for value in (0.5, 1.0, 1.5, 3.0):
        histogram.observe(value)
    assert histogram.reading() == {"bounds": [1.0, 2.0], "counts": [2, 1, 1], "sum": 6.0, "count": 4}
    with pytest.raises(ValueError):
        Histogram((2.0, 1.0))


def test_the_event_stream_is_off_until_turned_on_and_then_writes_json_lines() -> None:
    import io

    log = logging.getLogger("walqueue.events")
    assert events.listening is False
    stream = io.StringIO()
    handler = events.log_events_to(stream)
    try:
        assert events.listening is True
        events.emit(events.CANCEL, {"task_id": "t\n<b>", "worker": None})
    finally:
        log.removeHandler(handler)
        log.propagate = True
        events.enable(False)
    (line,) = stream.getvalue().splitlines()
    record = json.loads(line)
    assert record["event"] == "task.cancel" and record["fields"] == {"task_id": "t\n<b>", "worker": None}
    assert line.isascii()
