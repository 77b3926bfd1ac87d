"""`/metrics` read by prometheus_client's own parser: the naming rules, and counters that match a scripted workload."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from dashboard_helpers import call

from walqueue import Lease, Queue, StaleLease
from walqueue.dashboard import Dashboard
from walqueue.dashboard.prometheus import render

parser = pytest.importorskip("prometheus_client.parser", reason="prometheus_client is pinned in requirements-test.txt")
text_string_to_metric_families = parser.text_string_to_metric_families

_NAME = re.compile(r"walqueue_[a-z][a-z0-9_]*")
_LABELS = {"status", "op", "le", "queue"}  # queue: the lanes label, bounded (prometheus.py)


def families(text: str) -> dict[str, object]:
    return {family.name: family for family in text_string_to_metric_families(text)}


def scripted(queue: Queue) -> dict[str, int]:
    """A workload whose every counter is known; returns what each must read."""
    for name in ("a", "b", "c"):
        queue.put(name, {"n": name}, available_at=100)
    queue.put("a", {"n": "a"}, available_at=100)  # an identical retry: a duplicate
    queue.put_many(
        [
            {"task_id": "d", "payload": {}, "max_attempts": 1},
            {"task_id": "b", "payload": {"n": "b"}, "available_at": 100},
        ]
    )
    leases = {lease.task_id: lease for lease in queue.reserve("w", now=100, lease_seconds=10, limit=4)}
    queue.ack(leases["a"], now=101)
    queue.release(leases["b"], now=101, delay=50)
    queue.extend(leases["c"], now=101, lease_seconds=100)
    for stale in (leases["a"], Lease("c", "w", 99)):
        with pytest.raises(StaleLease):
            queue.ack(stale, now=102)
    with pytest.raises(StaleLease):
        queue.release(leases["a"], now=102)
    queue.reserve("w", now=111, lease_seconds=10)  # d's lease ran out: it expires, and dies (1 attempt)
    queue.redrive("d", available_at=500)
    queue.cancel("d")
    queue.cancel("b")
    queue.compact()
    return {
        "puts": 4,
        "duplicate_puts": 2,
        "reserves": 4,
        "acks": 1,
        "releases": 1,
        "expiries": 1,
        "deaths": 1,
        "redrives": 1,
        "cancels": 2,
        "extends": 1,
        "stale_leases": 3,
        "compactions": 1,
    }


@pytest.fixture
def synced(tmp_path: Path) -> Queue:
    queue = Queue(tmp_path / "q", sync=True)
    yield queue  # type: ignore[misc]
    queue.close()


def test_the_counters_match_a_scripted_workload_exactly(synced: Queue) -> None:
    expected = scripted(synced)
    counters = synced.metrics(now=200)["counters"]
    assert {name: counters[name] for name in expected} == expected
    text = call(Dashboard(synced, clock=lambda: 200), "/metrics").body.decode()
    parsed = families(text)
    names = {"stale_leases": "walqueue_stale_lease_refusals"}
    for name, value in expected.items():
        family = parsed[names.get(name, f"walqueue_{name}")]
        assert family.type == "counter"  # type: ignore[attr-defined]
        (sample,) = family.samples  # type: ignore[attr-defined]
        assert sample.name.endswith("_total") and sample.value == value, name


def test_the_gauges_and_histograms_read_the_queue(synced: Queue) -> None:
    scripted(synced)
    stats = synced.stats()
    parsed = families(call(Dashboard(synced, clock=lambda: 200), "/metrics").body.decode())
    tasks = {sample.labels["status"]: sample.value for sample in parsed["walqueue_tasks"].samples}  # type: ignore[attr-defined]
    assert tasks == stats["counts"]
    assert parsed["walqueue_wal_bytes"].samples[0].value == stats["wal_bytes"]  # type: ignore[attr-defined]
    assert parsed["walqueue_snapshot_seq"].samples[0].value == stats["snapshot_seq"]  # type: ignore[attr-defined]
    fsync = {sample.name: sample for sample in parsed["walqueue_fsync_seconds"].samples}  # type: ignore[attr-defined]
    fsyncs = parsed["walqueue_fsyncs"].samples[0].value  # type: ignore[attr-defined]
    assert fsyncs >= 1 and fsync["walqueue_fsync_seconds_count"].value == fsyncs
    group = {s.name: s for s in parsed["walqueue_commit_group_size"].samples}  # type: ignore[attr-defined]
    # Every transaction was made durable by exactly one fsync: the group sizes add up to them all.
    assert group["walqueue_commit_group_size_sum"].value == synced.last_seq
    assert group["walqueue_commit_group_size_count"].value == fsyncs


def test_every_metric_follows_the_naming_rules(synced: Queue) -> None:
    scripted(synced)
    reading = dict(synced.metrics(now=200))
    reading["request_seconds"] = {"put": reading["histograms"]["fsync_seconds"]}  # as a server adds it
    text = render(reading)
    for line in text.splitlines():
        assert line.startswith(("# HELP walqueue_", "# TYPE walqueue_", "walqueue_")), line
    parsed = families(text)
    assert len(parsed) >= 20
    for name, family in parsed.items():
        assert _NAME.fullmatch(name), name
        assert family.documentation, f"{name} has no HELP"  # type: ignore[attr-defined]
        assert family.type in ("counter", "gauge", "histogram"), name  # type: ignore[attr-defined]
        for sample in family.samples:  # type: ignore[attr-defined]
            assert set(sample.labels) <= _LABELS, sample
            if family.type == "counter":  # type: ignore[attr-defined]
                assert sample.name == name + "_total"
        if "seconds" in name:
            assert name.endswith("_seconds"), name
        if "bytes" in name:
            assert name.endswith("_bytes"), name
    assert "walqueue_request_seconds" in parsed
    ops = {sample.labels.get("op") for sample in parsed["walqueue_request_seconds"].samples}  # type: ignore[attr-defined]
    assert ops == {"put"}


def test_a_histogram_is_cumulative_and_ends_at_inf(synced: Queue) -> None:
    synced.put("x", {})
    parsed = families(call(Dashboard(synced), "/metrics").body.decode())
    buckets = [s for s in parsed["walqueue_fsync_seconds"].samples if s.name.endswith("_bucket")]  # type: ignore[attr-defined]
    values = [s.value for s in buckets]
    assert values == sorted(values)
    assert buckets[-1].labels["le"] == "+Inf"
    assert buckets[-1].value == synced.metrics()["counters"]["fsyncs"]


def test_queue_gauges_carry_a_queue_label_bounded_in_cardinality(tmp_path: Path) -> None:
    from walqueue.dashboard.prometheus import MAX_QUEUE_LABELS

    with Queue(tmp_path / "q", sync=False) as queue:
        queue.put_many([{"task_id": f"t{n}", "payload": {}, "queue": f"q{n:04d}"} for n in range(MAX_QUEUE_LABELS + 5)])
        queue.configure_queue("q0000", paused=True, concurrency=2)
        parsed = families(call(Dashboard(queue, clock=lambda: 200), "/metrics").body.decode())
    samples = parsed["walqueue_queue_tasks"].samples  # type: ignore[attr-defined]
    ready = {s.labels["queue"]: s.value for s in samples if s.labels["status"] == "ready"}
    assert len(ready) == MAX_QUEUE_LABELS + 1  # the first 100 by name, and the rest summed
    assert ready["q0000"] == 1 and ready["_other"] == 5
    paused = {s.labels["queue"]: s.value for s in parsed["walqueue_queue_paused"].samples}  # type: ignore[attr-defined]
    assert paused["q0000"] == 1 and paused["q0001"] == 0
    (limit,) = parsed["walqueue_queue_concurrency_limit"].samples  # type: ignore[attr-defined]
    assert (limit.labels["queue"], limit.value) == ("q0000", 2)


def test_lifecycle_counters_by_queue_are_bounded_and_parse(tmp_path: Path) -> None:
    """A queue label on the lifecycle counters: the first MAX_QUEUE_LABELS queues by name, the rest as _other."""
    from walqueue.dashboard.prometheus import MAX_QUEUE_LABELS

    with Queue(tmp_path / "q", sync=False) as q:
        names = [f"q{n:03}" for n in range(MAX_QUEUE_LABELS + 5)]
        q.put_many([{"task_id": name, "payload": {}, "queue": name} for name in names])
        q.put("plain", {})
        parsed = families(render(dict(q.metrics())))
    puts = {sample.labels["queue"]: sample.value for sample in parsed["walqueue_queue_puts"].samples}  # type: ignore[attr-defined]
    assert len(puts) == MAX_QUEUE_LABELS + 1 and puts["_other"] == 6  # "default" sorts among them: 6 are left over
    assert sum(puts.values()) == parsed["walqueue_puts"].samples[0].value  # type: ignore[attr-defined]
