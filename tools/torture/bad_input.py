"""Campaign ``bad-input``: seeded fuzzing of every API call and every CLI line with
hostile values: only the documented exceptions (or CLI answers), the
model's answer for every call that succeeds, and not one byte written by
a call that fails.
"""

from __future__ import annotations

import json
import random
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from harness import scratch, tmpfs, units
from processes import child_environment

from model import Model, directory_digest, view
from walqueue import (
    Lease,
    Queue,
    Task,
)

from .checks import compare_views
from .harness import Abort, Budget, Report, guarded
from .hostile import (
    BAD_CALLS_FIRST_UNIT,
    BAD_CALLS_PER_UNIT,
    CLI_LINES_PER_UNIT,
    ERROR_MESSAGE_BYTES,
    ERROR_TYPE_BYTES,
    FRAME_BOUND,
    RECORD_MARGIN,
    RECORDED_HOSTILE_ERRORS,
    VIEW_EVERY,
    Call,
    HostileCalls,
    attempt,
    is_plain,
    nested,
    short,
)
from .workload import LIFECYCLE_KINDS, Op, Workload, count_lifecycle_call, expected_states, outcome, token_for


def campaign_bad_input(seed: int, budget: float, report: Report) -> None:
    """Hostile API calls and CLI lines: documented errors only, the model's answers, and no stray bytes."""
    clock = Budget(budget, report)  # past its budget (up to the overtime) while short of the caller's targets
    report.counts.update({"API calls": 0, "CLI lines": 0, "refused": 0})
    with scratch("walqueue-input-", tmpfs()) as root:
        with guarded(report, f"--seed {seed} bad-input frame bound"):
            _frame_bound_checks(root / "bound", report)
        for unit in units(clock.over):
            with guarded(report, f"bad-input unit {unit}"):
                _bad_input_unit(seed, unit, root / f"u{unit}", clock, report)


def _frame_bound_checks(directory: Path, report: Report) -> None:
    """The largest task that fits is accepted, one byte more is refused, and so is a put_many too big to frame."""
    limit = FRAME_BOUND - RECORD_MARGIN - len(b'"big"') * 2 - len(b'{"s":""}')
    model = Model()
    with Queue(directory, sync=False) as queue:
        calls = [
            Call("put at the bound", lambda t: t.put("big", {"s": "x" * limit}), []),
            Call("put one byte over", lambda t: t.put("big2", {"s": "x" * (limit + 1)}, key="big"), []),
            Call(
                "put_many over the frame",
                lambda t: t.put_many([{"task_id": f"m{i}", "payload": {"s": "x" * (limit // 2)}} for i in range(3)]),
                [],
            ),
        ]
        for call in calls:
            before = directory_digest(directory)
            got, _ = attempt(call, queue)
            want, _ = attempt(call, model)
            report.count("API calls")
            if got != want:
                report.diverge(f"bad-input {call.description}: queue {got}, model {want}")
            if got != "ok" and directory_digest(directory) != before:
                report.diverge(f"bad-input {call.description}: refused, but the directory changed")
        if view(queue) != view(model):
            report.diverge("bad-input frame bound: state differs from the model")


def foreign_tokens(directory: Path) -> list[Lease]:
    """Valid tokens of another queue, some with the same task ids and workers as ours."""
    with Queue(directory, sync=False) as other:
        other.put_many([{"task_id": f"b{i}", "payload": {"other": i}} for i in range(1, 6)])
        leases = other.reserve("w1", now=0, lease_seconds=1000, limit=3)
        leases += other.reserve("w2", now=0, lease_seconds=5, limit=2)
    return leases


def _bad_input_unit(seed: int, unit: int, directory: Path, clock: Budget, report: Report) -> None:
    rng = random.Random(f"bad-input:{seed}:{unit}")
    foreign = foreign_tokens(directory.with_name(directory.name + "-other"))
    hostile = HostileCalls(rng, foreign)
    workload = Workload(f"bad-input-ops:{seed}:{unit}", prefix="v")
    model = Model()
    where = f"--seed {seed} bad-input unit {unit}"
    with Queue(directory, sync=False) as queue:
        if unit == 0:  # however slow the machine, hostile errors recorded by a release and a fail
            model = _record_hostile_errors(queue, model, workload, directory, report, where)
        for index in range(BAD_CALLS_PER_UNIT):
            if index >= (BAD_CALLS_FIRST_UNIT if unit == 0 else 50) and clock.over():
                break
            if rng.random() < 0.3:
                model = _applied(workload.next_op(model), queue, model, report, f"{where} call {index}")
                continue
            call = hostile.next_call(model, workload.now)
            model = _judge_call(call, queue, model, directory, report, f"{where} call {index} {call.description}")
            if index % VIEW_EVERY == 0 and not compare_views(queue, model, report, f"{where} call {index}"):
                raise Abort(f"{where}: aborted")
        if not compare_views(queue, model, report, f"{where} (API)"):
            raise Abort(f"{where}: aborted")
    _cli_phase(rng, directory, model, foreign, report, where)


def _applied(op: Op, queue: Queue, model: Model, report: Report, where: str) -> Model:
    """`op` made on the queue, answered as the model answers it; the model after it."""
    expected = expected_states(model, op)
    if outcome(op, queue) != expected.answer:
        raise Abort(f"{where} ({op.describe()}): answer differs from the model's")
    count_lifecycle_call(report, op, expected.answer, "applied")
    return expected.after


def _record_hostile_errors(
    queue: Queue, model: Model, workload: Workload, directory: Path, report: Report, where: str
) -> Model:
    """Two tasks leased, one released and one failed with an error of `RECORDED_HOSTILE_ERRORS`: recorded, and cut."""
    for _ in range(2):
        model = _applied(Op("put", {"spec": {**workload.new_spec(), "available_at": 0}}), queue, model, report, where)
    reserve = {"worker": "w-hostile", "now": workload.now, "lease_seconds": 1000, "limit": 2, "queues": None}
    model = _applied(Op("reserve", reserve), queue, model, report, where)
    leases = [token_for(task) for task in model.tasks("leased") if task.worker == "w-hostile"]
    release, fail = ((lease, error, workload.now) for lease, error in zip(leases, RECORDED_HOSTILE_ERRORS, strict=True))
    calls = (
        Call(
            f"release {short(release[:2])}",
            lambda t: t.release(release[0], now=release[2], error=release[1]),
            [],
            (release[1],),
        ),
        Call(f"fail {short(fail[:2])}", lambda t: t.fail(fail[0], now=fail[2], error=fail[1]), [], (fail[1],)),
    )
    for call in calls:
        model = _judge_call(call, queue, model, directory, report, f"{where} {call.description}")
    return model


def _judge_call(call: Call, queue: Queue, model: Model, directory: Path, report: Report, where: str) -> Model:
    """Run one hostile call on the queue and on a clone of the model; return the model to go on with."""
    before = directory_digest(directory)
    got, error = attempt(call, queue)
    report.count("API calls")
    kind = call.description.split(" ", 1)[0]
    if kind in LIFECYCLE_KINDS:
        report.count(f"hostile {kind} {'applied' if got == 'ok' else 'refused'}")
    if call.error is not None and call.error[0] is not None:
        _count_error_argument(call.error[0], got, report)
    if got == "undocumented":
        raise Abort(f"{where}: raised {type(error).__name__}: {str(error)[:200]}")
    if got != "ok":
        report.count("refused")
        if directory_digest(directory) != before:
            report.diverge(f"{where}: refused with {got}, but the directory changed")
    candidate = model.clone()
    want, model_error = attempt(call, candidate)
    if want == "undocumented":
        raise Abort(f"{where}: the model raised {type(model_error).__name__}: {model_error}")
    if got == "ok":
        if want != "ok" or error != model_error:
            raise Abort(f"{where}: the queue answered {str(error)[:120]}, the model {want} {str(model_error)[:120]}")
        return candidate
    if got == "argument" and want == "ok":
        if all(is_plain(argument) for argument in call.arguments):
            report.diverge(f"{where}: refused ({error}), but the model accepts it")
        else:
            report.count("stricter than the model")
        return model
    if got != want:
        report.diverge(f"{where}: the queue raised {got}, the model {want}")
    return model


def _count_error_argument(error: Any, got: str, report: Report) -> None:
    """Count a call given an error: recorded (and whether the engine had to cut it), or refused."""
    if got != "ok":
        report.count("hostile error refused" if got == "argument" else "hostile error on a refused call")
        return
    report.count("hostile error recorded")
    try:
        sizes = [len(str(error[name]).encode("utf-8", "surrogatepass")) for name in ("type", "message")]
    except Exception:  # noqa: BLE001 - an exotic mapping: recorded, its size unknown here
        return
    if sizes[0] > ERROR_TYPE_BYTES or sizes[1] > ERROR_MESSAGE_BYTES:
        report.count("hostile error cut")


# -- the CLI --------------------------------------------------------------------------


_JSON_VALUES: tuple[Any, ...] = (
    None, True, False, 0, -1, 1, 2**63 - 1, 2**63, 2**64, -(2**63), 10**400, 1.0, 1e308, 1.5, -0.0,
    float("nan"), float("inf"), "", "x", "x" * 1025, "é" * 513, "\ud800", "\x00", [], {}, [1], {"a": 1},
)  # fmt: skip
_RAW_LINES: tuple[bytes, ...] = (
    b"\xff\xfe", b"\xc0\xaf", b"\xed\xa0\x80", b'{"op":"put"', b"[]", b"null", b'"str"', b"1", b"{}", b'{"op":1}',
    b'{"op":"get","op":"get","task_id":"a"}', b'\xef\xbb\xbf{"op":"stats"}', b'{"op":"stats"} trailing',
    b'{"op":"stats"}\x0c', b'{"op":"get","task_id":"\xff"}', b'{"op":"get","task_id":"\\ud800"}',
    b'{"op":"stats","id":NaN}', b'{"op":"reserve","worker":"w","now":1e400,"lease_seconds":1}',
    b'{"op":"put","task_id":"t","payload":{"a":1,"a":2}}', b"   ", b"\t", b"\r", b'{"op":"tasks","status":null}',
    b'{"op":"reserve","worker":"w","now":0,"lease_seconds":1,"limit":1.0}',
    b'{"op":"put","task_id":"t","payload":{},"max_attempts":true}',
    b'{"op":"cancel","task_id":"c1","error":{"type":"E","message":"m"}}',
    b'{"op":"fail","lease":{"task_id":"c1","worker":"w1","generation":1},"now":1,"error":{"type":"E","type":"F","message":""}}',
)  # fmt: skip
#: The `error` of a release, fail or cancel line: valid, cut by the engine, or refused.
_JSON_ERRORS: tuple[Any, ...] = (
    None, {"type": "ValueError", "message": "bad input"}, {"type": "E", "message": ""},
    {"type": "T" * 300, "message": "é" * 1500}, {"type": "E", "message": "x" * 5000},
    {"type": "E\ud800", "message": "\udcff"}, {"type": "", "message": "m"}, {"type": "E"}, {},
    {"type": "E", "message": "m", "attempt": 1}, {"type": 1, "message": "m"},
    {"type": "E", "message": None}, {"type": "E", "message": {"m": 1}}, "E: m", ["E", "m"], 1, True,
)  # fmt: skip


def _cli_request(rng: random.Random, model: Model, foreign: list[Lease], serial: int) -> dict[str, Any]:
    op = rng.choice(
        ["put", "put", "put_many", "reserve", "ack", "release", "extend", "redrive", "cancel", "fail"]
        + ["get", "tasks", "stats", "compact", "ack_many", "give_back"]
    )
    request: dict[str, Any] = {"op": op}
    if op == "put":
        request.update({"task_id": f"c{serial}", "payload": {"n": serial}})
    elif op == "put_many":
        request["tasks"] = [{"task_id": f"c{serial}.{i}", "payload": {}} for i in range(rng.randrange(3))]
    elif op == "reserve":
        request.update({"worker": "w1", "now": 10 + serial, "lease_seconds": rng.choice([1, 100])})
    elif op in ("ack", "release", "extend", "fail", "give_back"):
        leased = model.tasks("leased")
        token = token_for(rng.choice(leased)) if leased and rng.random() < 0.7 else rng.choice(foreign)
        lease = token.to_dict()
        if rng.random() < 0.3:  # only the three fields that identify the holder
            lease = {name: lease[name] for name in ("task_id", "worker", "generation")}
        request.update({"lease": lease, "now": 10 + serial})
        if op == "extend":
            request["lease_seconds"] = rng.choice([1, 50])
        if op in ("release", "fail") and rng.random() < 0.6:
            request["error"] = rng.choice(_JSON_ERRORS)
    elif op == "ack_many":
        leased = model.tasks("leased")
        tokens = [token_for(task) for task in leased[: rng.randrange(4)]]
        if rng.random() < 0.3:
            tokens.append(rng.choice(foreign))  # one stale token: the whole call is refused
        if tokens and rng.random() < 0.15:
            tokens.append(tokens[0])  # listed twice: refused
        request.update({"leases": [token.to_dict() for token in tokens], "now": 10 + serial})
    elif op in ("redrive", "cancel"):
        known = [task.task_id for task in model.tasks()]
        request["task_id"] = rng.choice([*known, "nope"]) if known else "nope"
        if op == "redrive":
            request["available_at"] = rng.choice([0, 10 + serial])
            if rng.random() < 0.5:
                request["extra_attempts"] = rng.choice([1, 2])
        elif rng.random() < 0.6:  # a cancel's reason needs its time: sometimes it comes without one
            request["error"] = rng.choice(_JSON_ERRORS)
            if rng.random() < 0.8:
                request["now"] = 10 + serial
    elif op == "get":
        request["task_id"] = rng.choice(["c1", "b1", "nope"])
    elif op == "tasks" and rng.random() < 0.5:
        request["status"] = rng.choice(["ready", "leased", "dead"])
    for _ in range(rng.choice([0, 1, 1, 2])):
        _spoil(rng, request)
    if rng.random() < 0.5:
        request["id"] = rng.choice((*_JSON_VALUES, serial, nested(300, "list")))
    return request


def _spoil(rng: random.Random, request: dict[str, Any]) -> None:
    """Replace, add, remove or deepen one field of a request."""
    targets = [name for name in request if name != "op"]
    action = rng.random()
    if action < 0.5 and targets:
        name = rng.choice(targets)
        if name == "lease" and isinstance(request["lease"], dict) and rng.random() < 0.5:
            lease = dict(request["lease"])
            field_name = rng.choice([*lease, "extra"])
            lease[field_name] = rng.choice(_JSON_VALUES)
            if rng.random() < 0.3:
                lease.pop(rng.choice(list(lease)))
            request["lease"] = lease
        else:
            request[name] = rng.choice(_JSON_VALUES)
    elif action < 0.65 and targets:
        del request[rng.choice(targets)]
    elif action < 0.8:
        request[rng.choice(["extra", "Op", "payload", "now"])] = rng.choice(_JSON_VALUES)
    elif action < 0.9:
        request["op"] = rng.choice(["PUT", "nope", 1, None, "", "put "])
    else:
        request["payload"] = rng.choice([nested(255, "list"), nested(300, "dict"), {"d": [1] * 1000}])


def cli_line(rng: random.Random, model: Model, foreign: list[Lease], serial: int) -> bytes:
    """One hostile request line (never containing a newline)."""
    shape = rng.random()
    if shape < 0.15:
        line = rng.choice(_RAW_LINES)
    elif shape < 0.2:
        line = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 40)))
    else:
        request = _cli_request(rng, model, foreign, serial)
        text = json.dumps(request, ensure_ascii=rng.random() < 0.5, allow_nan=True)
        line = text.encode("utf-8", "surrogatepass")
        if rng.random() < 0.15:
            damaged = bytearray(line)
            position = rng.randrange(len(damaged))
            damaged[position : position + 1] = rng.choice([b"\xff", b"", b"\x00", b"}", b'"', b"\x80\x80"])
            line = bytes(damaged)
    return line.replace(b"\n", b" ")


def _cli_phase(
    rng: random.Random, directory: Path, model: Model, foreign: list[Lease], report: Report, where: str
) -> None:
    """Hostile lines in-process (one by one, bytes checked) and then through a real consumer process."""
    from walqueue.protocol.requests import encode_answer, is_blank, respond

    process_dir = directory.with_name(directory.name + "-cli")
    shutil.copytree(directory, process_dir)
    lines: list[bytes] = []
    answers: list[dict[str, Any]] = []
    allowed_errors = {"BadRequest", "KeyConflict", "StaleLease", "WrongStatus"}
    with Queue(directory, sync=False) as queue:
        for serial in range(CLI_LINES_PER_UNIT):
            line = cli_line(rng, model, foreign, serial)
            lines.append(line)
            if is_blank(line):
                continue
            before = directory_digest(directory)
            reply = respond(line, queue)
            report.count("CLI lines")
            answer = reply.answer
            label = f"{where} CLI line {serial} {short(line)}"
            encoded = encode_answer(answer)
            if encoded.count(b"\n") != 1 or not encoded.endswith(b"\n") or json.loads(encoded) is None:
                report.diverge(f"{label}: answer is not one JSON line")
            if reply.fatal or (not answer.get("ok") and answer.get("error") not in allowed_errors):
                raise Abort(f"{label}: answered {answer}")
            if not answer["ok"]:
                report.count("refused")
                if directory_digest(directory) != before:
                    report.diverge(f"{label}: refused ({answer['error']}), but the directory changed")
            answers.append(json.loads(encoded))
            model = mirror(queue)
    _compare_with_process(lines, answers, process_dir, report, where)


def mirror(queue: Queue) -> Model:
    """A stand-in with `tasks()` for the line generator: the queue's own state (the CLI is not modelled)."""

    class Snapshot:
        def __init__(self, tasks: list[Task]) -> None:
            self._tasks = tasks

        def tasks(self, status: str | None = None) -> list[Task]:
            return [t for t in self._tasks if status is None or t.status == status]

    return Snapshot(queue.tasks())  # type: ignore[return-value]


def _compare_with_process(
    lines: list[bytes], answers: list[dict[str, Any]], directory: Path, report: Report, where: str
) -> None:
    """The real consumer, fed every line at once, answers each exactly as `respond` did in-process."""
    env = child_environment()
    completed = subprocess.run(
        [sys.executable, "-m", "walqueue.cli", str(directory)],
        input=b"\n".join(lines) + b"\n",
        capture_output=True,
        env=env,
        timeout=300,
        check=False,
    )
    if completed.returncode != 0:
        report.diverge(f"{where}: the consumer exited {completed.returncode}: {completed.stderr[-500:]!r}")
        return
    got = [json.loads(line) for line in completed.stdout.splitlines()]
    if len(got) != len(answers):
        report.diverge(f"{where}: the consumer answered {len(got)} lines, in-process {len(answers)}")
        return
    for index, (process_answer, own) in enumerate(zip(got, answers, strict=True)):
        process_answer.pop("message", None)
        own.pop("message", None)
        if process_answer != own:
            report.diverge(f"{where}: consumer answer {index} {short(process_answer)} != {short(own)}")
            return
    report.count("consumer lines agreed", len(got))
    shutil.rmtree(directory, ignore_errors=True)
