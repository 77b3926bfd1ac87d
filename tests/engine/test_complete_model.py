"""`complete` against the reference model: it equals the ack and then the puts, in one transaction."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from model import Model
from walqueue import KeyConflict, Queue, StaleLease

ids = st.sampled_from(["a", "b", "c", "a/1", "a/2", "b/1"])
puts = st.lists(
    st.fixed_dictionaries(
        {"task_id": ids, "payload": st.fixed_dictionaries({"n": st.integers(0, 2)})},
        optional={"max_attempts": st.integers(1, 3)},
    ),
    max_size=3,
)
results = st.none() | st.integers() | st.lists(st.text(max_size=3), max_size=2)


def _run(target: Any, setup: list[str], acked: bool, now: int, result: Any, items: list[dict[str, Any]]) -> Any:
    for task_id in setup:
        target.put(task_id, {"n": 0})
    [lease, *_] = target.reserve("w", now=1, lease_seconds=100, limit=len(setup))
    if acked:
        target.ack(lease, now=2)
    try:
        target.complete(lease, now=now, result=result, result_ttl=10, puts=items)
    except (KeyConflict, StaleLease) as error:
        outcome: Any = type(error).__name__
    else:
        outcome = "ok"
    tasks = [(t.task_id, t.status, t.payload, t.max_attempts) for t in target.tasks()]
    return outcome, tasks, target.last_seq, target.result(lease.task_id)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    setup=st.lists(st.sampled_from(["a", "b"]), min_size=1, max_size=2, unique=True),
    acked=st.booleans(),
    now=st.integers(3, 200),
    result=results,
    items=puts,
)
def test_complete_gives_the_models_answers_and_state(
    tmp_path_factory: Any, setup: list[str], acked: bool, now: int, result: Any, items: list[dict[str, Any]]
) -> None:
    directory: Path = tmp_path_factory.mktemp("q")
    with Queue(directory / "q", sync=False) as queue:
        assert _run(queue, setup, acked, now, result, items) == _run(Model(), setup, acked, now, result, items)


@settings(max_examples=150, deadline=None)
@given(setup=st.lists(st.sampled_from(["a", "b"]), min_size=1, max_size=2, unique=True), items=puts)
def test_complete_in_the_model_equals_an_ack_then_the_puts(setup: list[str], items: list[dict[str, Any]]) -> None:
    completed, separately = Model(), Model()
    leases = []
    for model in (completed, separately):
        for task_id in setup:
            model.put(task_id, {"n": 0})
        leases.append(model.reserve("w", now=1, lease_seconds=100)[0])
    try:
        separately.clone().put_many(items)  # would these puts alone be refused?
        refused = False
    except KeyConflict:
        refused = True
    try:
        completed.complete(leases[0], now=5, puts=items)
    except KeyConflict:
        assert refused or any(item["task_id"] == leases[0].task_id for item in items)
        return
    separately.ack(leases[1], now=5)
    separately.put_many(items)
    assert completed.tasks() == separately.tasks()
    assert completed.last_seq == separately.last_seq - (1 if separately.last_seq > completed.last_seq else 0)
