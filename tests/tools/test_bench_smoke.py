"""The benchmark (tools/bench/) must keep running: every workload at a tiny scale, every figure in its JSON.

Nothing here measures speed. The benchmark's targets are ratios printed by a
run (docs/PERFORMANCE.md); a test that asserted a time or a ratio would fail
on a busy machine for no fault of the code. These tests check that the tool
runs, that it writes every workload, backend, ratio and target, and that its
SQLite baseline keeps the queue's semantics (so that the comparison stays a
comparison of like with like).
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from walqueue import KeyConflict, Queue, StaleLease

REPO_ROOT = Path(__file__).resolve().parents[2]
BENCH = REPO_ROOT / "tools" / "bench"

sys.path.insert(0, str(REPO_ROOT / "tools"))
from bench import backends as bench_backends  # noqa: E402
from bench.registry import BY_NAME, WORKLOADS, resolve  # noqa: E402

#: Every workload and the ratios/figures each must report.
EXPECTED_FIGURES: dict[str, set[str]] = {
    "put_durable": {"walqueue_vs_sqlite", "walqueue_vs_floor", "walqueue_vs_prealloc", "prealloc_vs_floor"},
    "reserve_ack_durable": {
        "walqueue_vs_sqlite",
        "walqueue_vs_floor",
        "walqueue_vs_prealloc",
        "floor_vs_sqlite",
        "inplace_vs_append_sync",
        "append_fdatasync_vs_fsync",
    },
    "put_many_durable": {
        "walqueue_vs_sqlite",
        "walqueue_vs_floor",
        "keys_unsorted_vs_sqlite",
        "ceiling_vs_sqlite",
        "rules_share_of_sqlite",
    },
    "cpu_per_call": {
        "put_walqueue_vs_sqlite",
        "cycle_walqueue_vs_sqlite",
        "put_walqueue_vs_floor",
        "cycle_walqueue_vs_floor",
    },
    "reopen": {
        "replay_walqueue_over_floor",
        "replay_walqueue_tx_per_s",
        "snapshot_walqueue_tasks_per_s",
        "snapshot_floor_tasks_per_s",
        "snapshot_walqueue_over_floor",
    },
    "cycle_cost_growth": {"walqueue_growth", "sqlite_growth"},
    "memory_per_task": {
        "bytes_per_ready_task",
        "bytes_per_tombstone",
        "bytes_per_ready_task_after_reopen",
        "full_collection_over_empty",
    },
    "lanes": {
        "cycle_lanes_vs_one_lane",
        "reserve_idle_many_vs_1",
        "reserve_paused_many_vs_1",
        "reserve_limited_many_vs_1",
        "bytes_per_ready_task_one_lane",
        "bytes_per_ready_task_lanes_minus_one_lane",
        "reopen_many_queues_vs_one",
    },
    "group_commit_threads": {
        f"{phase}_{figure}"
        for phase in ("puts", "cycles")
        for figure in (
            "walqueue8_vs_walqueue1",
            "walqueue8_vs_sqlite8",
            "walqueue8_vs_floor8",
            "walqueue8_vs_prealloc8",
            "walqueue1_fsyncs_per_op",
            "walqueue8_fsyncs_per_op",
            "walqueue1_cpu_share",
            "walqueue8_cpu_share",
        )
    },
    # (i): one set per variant (store opened from its WAL or a snapshot, sync on or off); the
    # WAL+sync variant keeps the names without a suffix.
    "latency_while_compacting": {
        name + suffix
        for suffix in ("", "_wal_nosync", "_snapshot_sync", "_snapshot_nosync")
        for name in {
            f"{kind}_{stat}_{mode}"
            for kind in ("put", "cycle")
            for stat in ("p50", "p99", "p999", "max")
            for mode in ("compaction", "none")
        }
        | {"put_p99_compaction_over_none", "cycle_p99_compaction_over_none", "compactions", "compaction_seconds"}
    },
    "open_torn_tail": {"torn_over_healthy"},
    "server_processes": {
        "puts_serve8_vs_sqlite8",
        "puts_serve8_vs_serve1",
        "cycles_serve8_vs_sqlite8",
        "cycles_serve8_vs_serve1",
        "rtt_get_client_vs_queue",
        "rtt_put_client_vs_queue",
        "server_cpu_per_put",
        "server_cpu_per_get",
        "server_user_cpu_per_put",
        "server_user_cpu_per_get",
        "clients_cpu_per_put",
        "clients_cpu_per_get",
        "pipeline_100_puts_vs_100_calls",
    },
}
EXPECTED_FIGURES["mixed_run_compacting"] = {
    f"{kind}_{name}{suffix}"
    for suffix in ("", "_snapshot")
    for kind in ("put", "cycle")
    for name in (
        *(f"{p}_{mode}" for p in ("p50", "p99", "p999", "max") for mode in ("compaction", "none")),
        "p99_compaction_over_none",
    )
} | {f"{name}{suffix}" for suffix in ("", "_snapshot") for name in ("compacting_seconds", "compactions")}
#: (n) measures S3 through moto's server when moto and boto3 are installed (test-only dependencies).
MOTO = importlib.util.find_spec("moto") is not None and importlib.util.find_spec("boto3") is not None
EXPECTED_FIGURES["replication"] = {"async_file_vs_plain", "sync_file_vs_plain", "restore_vs_reopen"} | (
    {"async_s3_vs_plain", "sync_s3_vs_plain"} if MOTO else set()
)
if importlib.util.find_spec("persistqueue") is not None:  # (j) compares with persist-queue when it can
    EXPECTED_FIGURES["server_processes"] |= {"puts_serve8_vs_persist_queue8", "cycles_serve8_vs_persist_queue8"}
#: (l) compares walqueue-worker with huey's consumer when huey is installed (a tool-only dependency).
HUEY = importlib.util.find_spec("huey") is not None
EXPECTED_FIGURES["worker_end_to_end"] = (
    {
        f"walqueue_{config}_vs_huey_{config}{suffix}"
        for config in ("threads_8", "processes_4")
        for suffix in ("", "_with_start_up")
    }
    if HUEY
    else set()
)
#: (o) compares task functions with results with huey's tasks when huey is installed.
EXPECTED_FIGURES["task_results"] = (
    {"one_at_a_time_vs_huey", "in_flight_vs_huey", "chains_vs_huey", "first_result_huey_over_walqueue"}
    if HUEY
    else set()
)
#: The targets of docs/PERFORMANCE.md: (workload, figure).
EXPECTED_TARGETS = {
    ("lanes", "cycle_lanes_vs_one_lane"),
    ("lanes", "reserve_idle_many_vs_1"),
    ("lanes", "reserve_paused_many_vs_1"),
    ("lanes", "reserve_limited_many_vs_1"),
    ("lanes", "bytes_per_ready_task_lanes_minus_one_lane"),
    ("lanes", "reopen_many_queues_vs_one"),
    ("put_durable", "walqueue_vs_sqlite"),
    ("put_durable", "walqueue_vs_floor"),
    ("put_durable", "walqueue_vs_prealloc"),
    ("reserve_ack_durable", "walqueue_vs_sqlite"),
    ("put_many_durable", "walqueue_vs_sqlite"),
    ("cpu_per_call", "put_walqueue_vs_sqlite"),
    ("cpu_per_call", "cycle_walqueue_vs_sqlite"),
    ("reopen", "replay_walqueue_over_floor"),
    ("reopen", "snapshot_walqueue_tasks_per_s"),
    ("cycle_cost_growth", "walqueue_growth"),
    ("memory_per_task", "bytes_per_ready_task"),
    ("memory_per_task", "bytes_per_tombstone"),
    ("memory_per_task", "full_collection_over_empty"),
    ("group_commit_threads", "puts_walqueue8_vs_walqueue1"),
    ("group_commit_threads", "puts_walqueue8_vs_sqlite8"),
    ("group_commit_threads", "cycles_walqueue8_vs_walqueue1"),
    ("group_commit_threads", "cycles_walqueue8_vs_sqlite8"),
    ("latency_while_compacting", "put_max_compaction"),
    ("latency_while_compacting", "put_p99_compaction_over_none"),
    ("latency_while_compacting", "cycle_p99_compaction_over_none"),
    ("latency_while_compacting", "put_max_compaction_snapshot_sync"),
    ("latency_while_compacting", "put_p99_compaction_over_none_snapshot_sync"),
    ("latency_while_compacting", "cycle_p99_compaction_over_none_snapshot_sync"),
    ("mixed_run_compacting", "put_max_compaction"),
    ("mixed_run_compacting", "put_p99_compaction_over_none"),
    ("mixed_run_compacting", "put_max_compaction_snapshot"),
    ("mixed_run_compacting", "put_p99_compaction_over_none_snapshot"),
    ("open_torn_tail", "torn_over_healthy"),
    ("server_processes", "puts_serve8_vs_sqlite8"),
    ("server_processes", "cycles_serve8_vs_sqlite8"),
    ("server_processes", "puts_serve8_vs_serve1"),
    ("server_processes", "server_cpu_per_put"),
    ("server_processes", "server_cpu_per_get"),
}
EXPECTED_TARGETS |= {("replication", "async_file_vs_plain"), ("replication", "restore_vs_reopen")}
if MOTO:
    EXPECTED_TARGETS |= {("replication", "async_s3_vs_plain")}
if HUEY:
    EXPECTED_TARGETS |= {
        ("worker_end_to_end", "walqueue_threads_8_vs_huey_threads_8"),
        ("worker_end_to_end", "walqueue_processes_4_vs_huey_processes_4"),
        ("task_results", "one_at_a_time_vs_huey"),
        ("task_results", "in_flight_vs_huey"),
        ("task_results", "chains_vs_huey"),
    }


def _positive(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value > 0


def _check_figure(where: str, fig: dict[str, Any], count: int | None = None) -> None:
    for name in ("median", "min", "max"):
        assert _positive(fig[name]), (where, name, fig[name])
    assert fig["min"] <= fig["median"] <= fig["max"], where
    assert fig["samples"] and all(_positive(v) for v in fig["samples"]), where
    if count is not None:
        assert len(fig["samples"]) == count, where


def _backend_blocks(result: dict[str, Any]) -> list[dict[str, Any]]:
    backends = result["backends"]
    if backends and "median" not in next(iter(backends.values())):
        return list(backends.values())  # grouped, e.g. {"put": {...}, "cycle": {...}}
    return [backends] if backends else []


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory: pytest.TempPathFactory, src_pythonpath: str) -> tuple[dict[str, Any], str]:
    out = tmp_path_factory.mktemp("bench") / "tiny.json"
    env = dict(os.environ)
    if src_pythonpath:
        env["PYTHONPATH"] = src_pythonpath + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    proc = subprocess.run(
        [sys.executable, str(BENCH), "--scale", "tiny", "--json", str(out), "--quiet", "--dir", str(out.parent)],
        capture_output=True,
        text=True,
        env=env,
        stdin=subprocess.DEVNULL,
        timeout=600,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # The stores live in a temporary directory that the tool removes.
    assert [p.name for p in out.parent.iterdir()] == ["tiny.json"]
    return json.loads(out.read_text(encoding="utf-8")), proc.stdout


def test_every_workload_and_figure_is_reported(tiny_run: tuple[dict[str, Any], str]) -> None:
    report, _ = tiny_run
    assert report["meta"]["scale"] == "tiny"
    workloads = report["workloads"]
    assert set(workloads) == set(EXPECTED_FIGURES)
    reps = report["meta"]["scale_params"]["reps"]
    for key, names in EXPECTED_FIGURES.items():
        result = workloads[key]
        assert set(result["ratios"]) == names, key
        for name, fig in result["ratios"].items():
            _check_figure(f"{key}.{name}", fig)
        for block in _backend_blocks(result):
            for name, fig in block.items():
                _check_figure(f"{key}.{name}", fig)
                _check_figure(f"{key}.{name} other clock", fig["other_clock"], len(fig["samples"]))
    for key in ("put_durable", "reserve_ack_durable", "put_many_durable", "cpu_per_call"):
        # (b) also times the disk alone (two syncs per cycle, three ways), and (c) the validation
        # alone (the baseline's and walqueue's), in the same interleaving.
        # (a) and (b) also time the preallocated floor (pwrite + fdatasync per frame).
        extra = {
            "put_durable": {"prealloc"},
            "reserve_ack_durable": {"prealloc", "sync_append_fsync", "sync_append_fdatasync", "sync_inplace_fdatasync"},
            "put_many_durable": {"rules_sqlite", "rules_walqueue", "walqueue_keys_unsorted"},
        }.get(key, set())
        for block in _backend_blocks(workloads[key]):
            assert set(block) == {"walqueue", "sqlite", "floor"} | extra, key
            for fig in block.values():
                assert len(fig["samples"]) == reps, key
    # Ratios are taken within each repetition: one per repetition.
    assert len(workloads["put_durable"]["ratios"]["walqueue_vs_sqlite"]["samples"]) == reps
    # (b)'s disk-only and (c)'s validation-only figures: information, one per repetition, never a target.
    for key, name in (
        ("reserve_ack_durable", "inplace_vs_append_sync"),
        ("reserve_ack_durable", "append_fdatasync_vs_fsync"),
        ("put_many_durable", "ceiling_vs_sqlite"),
        ("put_many_durable", "rules_share_of_sqlite"),
        ("put_many_durable", "keys_unsorted_vs_sqlite"),
    ):
        fig = workloads[key]["ratios"][name]
        assert len(fig["samples"]) == reps, name
        assert fig["target"] is None and fig["met"] is None, name
        assert fig["note"].startswith("information: "), name
    # (h): every backend at every thread count, for both phases, one sample per repetition.
    h_reps = report["meta"]["scale_params"]["group_commit_threads"]["reps"]
    for phase in ("puts", "cycles"):
        block = workloads["group_commit_threads"]["backends"][phase]
        backends = ("walqueue", "sqlite", "floor", "prealloc")
        assert set(block) == {f"{b}_{n}" for b in backends for n in (1, 2, 4, 8, 16)}, phase
        assert all(len(fig["samples"]) == h_reps for fig in block.values()), phase
        assert set(workloads["group_commit_threads"]["series"][phase]) == set(block), phase
    # (i): in every variant, one automatic compaction per round, none with compaction disabled,
    # and both modes' windows of the same length (the latencies the plot draws are in the JSON);
    # the snapshot variants really opened a snapshot with a WAL over twice its size.
    i_result = workloads["latency_while_compacting"]
    rounds = report["meta"]["scale_params"]["latency_while_compacting"]["rounds"]
    variants = i_result["params"]["variants"]
    assert set(variants) == {"wal_sync", "wal_nosync", "snapshot_sync", "snapshot_nosync"}
    for variant, params in variants.items():
        suffix = "" if variant == "wal_sync" else f"_{variant}"
        assert i_result["ratios"][f"compactions{suffix}"]["median"] == rounds, variant
        assert len(i_result["ratios"][f"compaction_seconds{suffix}"]["samples"]) == rounds, variant
        assert params["compactions_with_compaction_disabled"] == 0, variant
        assert len(params["snapshot_bytes"]) == rounds, variant
        if variant.startswith("snapshot"):
            assert params["tasks_in_snapshot"] > 0, variant
            assert params["template_wal_bytes"] > 2 * params["template_snapshot_bytes"] > 0, variant
        else:
            assert params["tasks_in_snapshot"] == params["template_snapshot_bytes"] == 0, variant
        for kind in ("put", "cycle"):
            series = i_result["series"][kind]
            pairs = sum(params["pairs_per_round"])
            assert len(series[f"compaction{suffix}"]) == len(series[f"none{suffix}"]) == pairs, (variant, kind)
    # Whether SQLite's WAL grew (appends) or was overwritten in place while (b) was timed.
    growth = workloads["reserve_ack_durable"]["params"]["sqlite_wal_growth_per_commit"]
    assert isinstance(growth, float) and math.isfinite(growth) and growth >= 0
    assert workloads["reserve_ack_durable"]["params"]["fdatasync_call"] in {"fdatasync", "fsync"}


def test_every_target_is_judged(tiny_run: tuple[dict[str, Any], str]) -> None:
    report, stdout = tiny_run
    rows = report["targets"]
    assert {(row["workload"], row["figure"]) for row in rows} == EXPECTED_TARGETS
    for row in rows:
        assert isinstance(row["met"], bool)
        assert _positive(row["value"])
        assert row["figure"] in stdout
    assert "Targets" in stdout
    for name in ("ceiling_vs_sqlite", "rules_share_of_sqlite", "rules_sqlite", "rules_walqueue"):
        assert name in stdout, name


def test_markdown_renders_every_figure(tiny_run: tuple[dict[str, Any], str], tmp_path: Path) -> None:
    report, _ = tiny_run
    path = tmp_path / "run.json"
    path.write_text(json.dumps(report), encoding="utf-8")
    proc = subprocess.run(
        [sys.executable, str(BENCH), "--markdown", str(path)],
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    for names in EXPECTED_FIGURES.values():
        for name in names:
            assert f"| {name} |" in proc.stdout, name
    for name in ("rules_sqlite", "rules_walqueue"):
        assert f"| put_many_durable (c) | {name} |" in proc.stdout, name


def test_runs_from_a_checkout_without_pythonpath(tmp_path: Path) -> None:
    """`python tools/bench` finds walqueue itself (installed, or the checkout's src dirs)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.run(
        [sys.executable, str(BENCH), "--help"],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        stdin=subprocess.DEVNULL,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert "--scale" in proc.stdout


# -- the SQLite baseline keeps the queue's semantics ------------------------------------------


def _outcome(call: Any) -> Any:
    try:
        return ("ok", call())
    except (KeyConflict, bench_backends.KeyConflict):
        return ("KeyConflict",)
    except (StaleLease, bench_backends.StaleLease):
        return ("StaleLease",)
    except TypeError:
        return ("TypeError",)
    except ValueError:
        return ("ValueError",)


def _script(q: Any) -> list[Any]:
    """One scenario, run against both queues; the answers must be the same."""
    out: list[Any] = []

    def lease_view(leases: list[Any]) -> list[Any]:
        return [(x.task_id, x.worker, x.generation, x.deadline, x.attempts, x.payload) for x in leases]

    out.append(_outcome(lambda: q.put("b", {"n": 1})))
    out.append(_outcome(lambda: q.put("a", {"n": 2}, available_at=5)))
    out.append(_outcome(lambda: q.put("b", {"n": 1})))  # identical retry
    out.append(_outcome(lambda: q.put("b", {"n": 1.0})))  # same key, other identity
    out.append(_outcome(lambda: q.put("b", {"n": 1}, key="other")))  # new key, known task id
    out.append(_outcome(lambda: q.put("c", {"n": 3}, key="k", max_attempts=1)))
    out.append(_outcome(lambda: q.put("d", {"x": (1, 2)})))  # not JSON-round-trippable
    out.append(_outcome(lambda: q.put("d", {"x": float("nan")})))
    out.append(_outcome(lambda: q.put("d", {"x": 1}, available_at=True)))
    out.append(_outcome(lambda: q.put("", {})))
    out.append(_outcome(lambda: q.put_many([{"task_id": "e", "payload": {}}, {"task_id": "b", "payload": {"n": 2}}])))
    out.append(_outcome(lambda: q.put_many([{"task_id": "e", "payload": {}}, {"task_id": "b", "payload": {"n": 1}}])))
    out.append(_outcome(lambda: q.put_many([{"task_id": "f", "payload": {}, "bogus": 1}])))
    first = q.reserve("w1", now=1, lease_seconds=10, limit=10)
    out.append(lease_view(first))  # b, c, e (a is not due until 5)
    by_id = {x.task_id: x for x in first}
    out.append(_outcome(lambda: q.ack(by_id["b"], now=11)))  # deadline passed
    out.append(_outcome(lambda: q.ack(by_id["b"], now=2)))
    out.append(_outcome(lambda: q.ack(by_id["b"], now=3)))  # already acked
    out.append(_outcome(lambda: q.release(by_id["e"], now=4, delay=100)))
    second = q.reserve("w2", now=20, lease_seconds=5, limit=10)  # reaps c (dead: 1 attempt), leases a
    out.append(lease_view(second))
    out.append(_outcome(lambda: q.ack(by_id["c"], now=21)))
    third = q.reserve("w3", now=200, lease_seconds=5, limit=10)  # reaps a (ready again at 25), leases a, e
    out.append(lease_view(third))
    out.append(_outcome(lambda: q.reserve("", now=1, lease_seconds=1)))
    out.append(_outcome(lambda: q.reserve("w", now=1, lease_seconds=0)))
    return out


def _state(q: Any, ids: list[str]) -> list[Any]:
    rows = []
    for tid in ids:
        if isinstance(q, Queue):
            t = q.get(tid)
            rows.append(
                None
                if t is None
                else (
                    t.task_id,
                    t.key,
                    t.status,
                    t.payload,
                    t.available_at,
                    t.max_attempts,
                    t.attempts,
                    t.generation,
                    t.worker,
                    t.deadline,
                )
            )
        else:
            rows.append(q.get(tid))
    return rows


def test_sqlite_baseline_matches_the_queue(tmp_path: Path) -> None:
    queue = Queue(tmp_path / "wq", sync=False)
    sqlite = bench_backends.SqliteQueue(tmp_path / "q.sqlite", durable=False)
    try:
        assert _script(sqlite) == _script(queue)
        ids = ["a", "b", "c", "d", "e", "f"]
        assert _state(sqlite, ids) == _state(queue, ids)
        assert sqlite.counts() == queue.stats()["counts"]
    finally:
        queue.close()
        sqlite.close()


def test_sqlite_baseline_uses_its_indexes(tmp_path: Path) -> None:
    sqlite = bench_backends.SqliteQueue(tmp_path / "q.sqlite", durable=False)
    try:
        assert "USING INDEX tasks_ready" in sqlite.query_plan(bench_backends.SELECT_READY_SQL, (1, 1))
        assert "USING INDEX tasks_leased" in sqlite.query_plan(bench_backends.REAP_SQL, (1,))
    finally:
        sqlite.close()


def test_floor_reads_what_the_queue_writes(tmp_path: Path) -> None:
    queue = Queue(tmp_path / "wq", sync=False)
    queue.put_many([{"task_id": f"t{i}", "payload": {"i": i}} for i in range(10)])
    for _ in range(3):
        queue.ack(queue.reserve("w", now=1, lease_seconds=5)[0], now=2)
    queue.close()
    segments = sorted(str(p) for p in (tmp_path / "wq").glob("wal-*.log"))
    assert bench_backends.floor_read(segments) == 7

    floor = bench_backends.FloorLog(tmp_path / "floor.log", durable=False)
    floor.put("x", {"a": 1})
    floor.put_many([{"task_id": "y", "payload": {}}])
    floor.ack(floor.reserve("w", now=1, lease_seconds=5)[0], now=2)
    floor.close()
    assert bench_backends.floor_read([str(tmp_path / "floor.log")]) == 4


# -- workloads have names; their letters are aliases -----------------------------------------------


def test_every_workload_has_a_unique_name_and_a_unique_letter() -> None:
    names = [workload.name for workload in WORKLOADS]
    letters = [workload.letter for workload in WORKLOADS]
    assert len(set(names)) == len(names) and len(set(letters)) == len(letters)
    assert all(name.isidentifier() and len(name) > 1 for name in names)
    assert set(EXPECTED_FIGURES) == set(names)
    for workload in WORKLOADS:
        assert resolve(workload.name) is resolve(workload.letter) is workload
        assert set(workload.scales) == {"tiny", "default", "big"}, workload.name


def test_an_unknown_workload_is_a_usage_error() -> None:
    proc = subprocess.run(
        [sys.executable, str(BENCH), "--only", "put_durable,zz"],
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 2 and "unknown workload(s) ['zz']" in proc.stderr


def test_list_names_every_workload_with_its_letter() -> None:
    proc = subprocess.run(
        [sys.executable, str(BENCH), "--list"],
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    for workload in WORKLOADS:
        assert f"{workload.name}" in proc.stdout and f"({workload.letter})" in proc.stdout


def test_performance_doc_maps_every_letter_to_its_name() -> None:
    text = (REPO_ROOT / "docs" / "PERFORMANCE.md").read_text(encoding="utf-8")
    for workload in WORKLOADS:
        assert f"| {workload.letter} | `{workload.name}` |" in text, workload.name


def test_targets_markdown_has_a_column_per_run(tiny_run: tuple[dict[str, Any], str], tmp_path: Path) -> None:
    report, _ = tiny_run
    first, second = tmp_path / "one.json", tmp_path / "two.json"
    first.write_text(json.dumps(report), encoding="utf-8")
    only_a = {**report, "workloads": {"put_durable": report["workloads"]["put_durable"]}}
    second.write_text(json.dumps(only_a), encoding="utf-8")
    proc = subprocess.run(
        [sys.executable, str(BENCH), "--targets-markdown", str(first), str(second)],
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.strip().splitlines()
    assert lines[0].count("Python 3.") == 2
    rows = {tuple(cell.strip() for cell in line.strip("|").split("|")[:2]) for line in lines[2:]}
    assert rows == {(f"{BY_NAME[w].name} ({BY_NAME[w].letter})", f) for w, f in EXPECTED_TARGETS}
    put_row = next(line for line in lines if "| put_durable (a) | walqueue_vs_sqlite |" in line)
    assert "met" in put_row.split("|")[-3] and "met" in put_row.split("|")[-2]
    cycle_row = next(line for line in lines if "| cpu_per_call (d) | put_walqueue_vs_sqlite |" in line)
    assert cycle_row.split("|")[-2].strip() == ""  # the second run left that workload out


def test_the_preallocated_floor_writes_frames_into_room_it_allocated(tmp_path: Path) -> None:
    from walqueue.format.frame import SegmentEnd, scan_frames

    floor = bench_backends.PreallocatedFloorLog(tmp_path / "prealloc.log", durable=True)
    floor.put("x", {"a": 1})
    floor.put_many([{"task_id": "y", "payload": {}}])
    floor.close()
    end = SegmentEnd()
    with open(tmp_path / "prealloc.log", "rb") as file:
        frames = list(scan_frames(file, allow_zero_tail=True, end=end))
    assert [value["seq"] for _, _, value in frames] == [1, 2]
    assert end.zero_offset is not None and end.size == bench_backends.PreallocatedFloorLog.ROOM
