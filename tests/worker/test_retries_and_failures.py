"""How a handler's failure decides its task's fate: the policy's delay, `Retry(delay=)`, `Permanent`, `max_attempts`.

Driven through the `Settler` with a fake clock and a seeded policy, so the
`available_at` of each retry is known exactly; the last error is what the
engine keeps (``Task.last_error``).
"""

from __future__ import annotations

import random

from worker_rig import FakeClock, Rig

from walqueue import Queue
from walqueue.worker import Permanent, Retry, RetryPolicy, Router, UnknownKind
from walqueue.worker.context import Context, Job


def test_three_failures_follow_the_seeded_backoff_schedule_exactly_then_the_task_dies(
    queue: Queue, clock: FakeClock
) -> None:
    queue.put("flaky", {}, max_attempts=3)
    rig = Rig(queue, clock, seed=11)
    expected = RetryPolicy(rng=random.Random(11))
    for attempt in (1, 2, 3):
        [run] = rig.start()
        assert run.job.attempts == attempt
        clock.advance(10)
        rig.settler.fail(run, ConnectionError(f"refused #{attempt}"))
        task = queue.get("flaky")
        assert task is not None and task.last_error is not None
        assert (task.last_error.type, task.last_error.message) == ("ConnectionError", f"refused #{attempt}")
        assert (task.last_error.attempt, task.last_error.at) == (attempt, clock.now)
        delay = expected.delay(attempt)
        assert task.available_at == clock.now + delay
        if attempt < 3:
            assert task.status == "ready"
            clock.now = task.available_at  # the retry comes due
        else:
            assert task.status == "dead"  # max_attempts decides, as the engine always did
    assert rig.counts() == {"completed": 0, "retried": 2, "dead": 1, "lost": 0, "timed_out": 0, "interrupted": 0}


def test_retry_with_a_delay_overrides_the_policy(queue: Queue, clock: FakeClock) -> None:
    queue.put("rate-limited", {})
    rig = Rig(queue, clock)
    [run] = rig.start()
    rig.settler.fail(run, Retry("429 from the API", delay=60_000))
    task = queue.get("rate-limited")
    assert task is not None and (task.status, task.available_at) == ("ready", clock.now + 60_000)
    assert task.last_error is not None
    assert (task.last_error.type, task.last_error.message) == ("Retry", "429 from the API")


def test_a_permanent_error_makes_the_task_dead_at_once_with_attempts_left(queue: Queue, clock: FakeClock) -> None:
    queue.put("bad-address", {}, max_attempts=5)
    rig = Rig(queue, clock)
    [run] = rig.start()
    rig.settler.fail(run, Permanent("no such mailbox"))
    task = queue.get("bad-address")
    assert task is not None and (task.status, task.attempts, task.max_attempts) == ("dead", 1, 5)
    assert task.last_error is not None
    assert (task.last_error.type, task.last_error.message) == ("Permanent", "no such mailbox")
    assert rig.counts()["dead"] == 1


def test_a_long_error_message_is_cut_with_a_marker(queue: Queue, clock: FakeClock) -> None:
    queue.put("noisy", {})
    rig = Rig(queue, clock)
    [run] = rig.start()
    rig.settler.fail(run, ValueError("x" * 100_000))
    task = queue.get("noisy")
    assert task is not None and task.last_error is not None
    assert len(task.last_error.message) < 2_100 and task.last_error.message.endswith("[truncated]")


def run_router(router: Router, payload: dict[str, object]) -> None:
    router(Job("t", payload, 1, None), Context(FakeClock(), None))  # type: ignore[arg-type]


def test_a_router_calls_the_function_registered_for_the_payloads_kind() -> None:
    seen: list[tuple[str, object]] = []
    router = Router({"email": lambda job, context: seen.append(("email", job.payload["to"]))})

    @router.route("sms")
    def send_sms(job: Job, context: Context) -> None:
        seen.append(("sms", job.payload["to"]))

    run_router(router, {"kind": "sms", "to": "+1"})
    run_router(router, {"kind": "email", "to": "ada@example.org"})
    assert seen == [("sms", "+1"), ("email", "ada@example.org")]
    assert router.kinds == ["email", "sms"]


def test_an_unknown_or_missing_kind_is_a_permanent_failure_naming_the_known_kinds() -> None:
    router = Router({"email": lambda job, context: None})
    cases: tuple[tuple[dict[str, object], str], ...] = (
        ({"kind": "fax"}, "no handler for kind 'fax' (known: 'email')"),
        ({}, "no str 'kind' field"),
    )
    for payload, words in cases:
        try:
            run_router(router, payload)
        except UnknownKind as error:
            assert words in str(error) and isinstance(error, Permanent)
        else:
            raise AssertionError("no UnknownKind")


def test_a_router_refuses_a_kind_registered_twice() -> None:
    router = Router({"email": lambda job, context: None})
    try:
        router.add("email", lambda job, context: None)
    except ValueError as error:
        assert "already has a handler" in str(error)
    else:
        raise AssertionError("no ValueError")


def test_an_unknown_kind_goes_to_the_dead_letters_with_that_error(queue: Queue, clock: FakeClock) -> None:
    queue.put("fax-1", {"kind": "fax"}, max_attempts=3)
    router = Router({"email": lambda job, context: None})
    rig = Rig(queue, clock)
    [run] = rig.start()
    try:
        router(run.job, run.context)
    except UnknownKind as error:
        rig.settler.fail(run, error)
    task = queue.get("fax-1")
    assert task is not None and (task.status, task.attempts) == ("dead", 1)
    assert task.last_error is not None and task.last_error.type == "UnknownKind"
    assert "no handler for kind 'fax'" in task.last_error.message
