"""Campaign ``server-kill``: SIGKILL `walqueue-serve` under load from several
clients; after each kill the directory holds the model's state before or
after the call in flight, every answered call is durable, and a put
retried by `Client` across the restart is applied exactly once.
"""

from __future__ import annotations

import random
import threading
import time
import traceback
from pathlib import Path
from typing import Any

from harness import units

from model import Model, view
from walqueue import (
    Queue,
)

from .checks import compare_views
from .harness import Abort, Budget, Report
from .served import SERVER_CLIENTS, SERVER_KILL_DELAY, ServedQueue, served_scratch
from .workload import Expected, Op, Workload, count_lifecycle_call, expected_states, outcome

#: The kills the first unit waits for, however slow the machine (kills come every `SERVER_KILL_DELAY`, plus a restart).
FIRST_UNIT_KILLS = 4


def campaign_server_kill(seed: int, budget: float, report: Report) -> None:
    """SIGKILL the server under load from several clients; every answered call is durable, none applied twice.

    Calls go one at a time, round-robin over `SERVER_CLIENTS` clients (so the
    model knows their order), while reader threads load the server with
    concurrent `stats`/`tasks` calls and a killer thread SIGKILLs it at
    random moments, reopens the directory in this process (the state must be
    the model's before or after the call in flight, or only its reap), and
    restarts the server. A `put` in flight is retried by the client across
    the restart and must answer as the model does (applied exactly once); an
    `ack`, `release` or `reserve` in flight raises `ConnectionError`.
    """
    from walqueue.client import Client

    clock = Budget(budget, report)  # past its budget (up to the overtime) while short of the caller's targets
    with served_scratch("torture-serve-") as (root, sockets):
        for unit in units(clock.over):
            _server_kill_unit(seed, unit, root / f"u{unit}", f"{sockets}/s{unit}", clock, report, Client)


def _judge_step(
    label: str, op: Op, expected: Expected, answer: str | None, kills: list[dict[str, Any]], report: Report
) -> Model:
    """The model after one step: its answer (None: ConnectionError) and the views reopened after kills meanwhile."""
    if answer is not None:
        report.count("operations answered")
        if answer != expected.answer:
            raise Abort(f"{label}: answered {answer[:120]}, the model {expected.answer[:120]}")
        count_lifecycle_call(report, op, answer, "answered")
    if not kills:
        if answer is None:
            raise Abort(f"{label}: ConnectionError without a kill")
        return expected.after
    report.count("steps hit by a kill")
    candidates = {id(state): state for state in expected.by_seq.values()}
    for seen in kills:
        if not any(seen == view(state) for state in candidates.values()):
            report.diverge(f"{label}: after a kill the store holds a state the model never had")
            raise Abort(label)
    if answer is None:
        report.count("in flight, not retried")
        matching = [state for state in expected.by_seq.values() if view(state) == kills[-1]]
        model = matching[-1]
        report.count("in-flight applied" if model.last_seq > expected.before.last_seq else "in-flight not applied")
        return model
    if op.kind in ("put", "put_many"):
        report.count("puts retried across a restart")
    return expected.after


def _server_kill_unit(
    seed: int, unit: int, directory: Path, socket_path: str, clock: Budget, report: Report, client_class: Any
) -> None:

    where = f"--seed {seed} server-kill unit {unit}"
    rng = random.Random(f"server-kill:{seed}:{unit}")
    workload = Workload(f"server-kill-ops:{seed}:{unit}", prefix="s", weights={"compact": 0})
    server = ServedQueue(directory, socket_path)
    clients = [client_class(socket_path, timeout=60, reconnect_seconds=60) for _ in range(SERVER_CLIENTS)]
    stopping = threading.Event()
    views_after_kill: list[dict[str, Any]] = []
    kill_errors: list[str] = []
    kills_started = [0]

    def killer() -> None:
        try:
            while not stopping.wait(rng.uniform(*SERVER_KILL_DELAY)):
                kills_started[0] += 1
                server.kill()
                with Queue(directory, sync=False) as reopened:
                    views_after_kill.append(view(reopened))
                report.count("server kills")
                server.start()  # also when stopping: the clients' retries and the final check need it
        except Exception:
            kill_errors.append(traceback.format_exc(limit=5))

    def reader(number: int) -> None:
        with client_class(socket_path, timeout=60, reconnect_seconds=60) as loader:
            while not stopping.is_set():
                try:
                    loader.stats() if number % 2 else loader.tasks("ready")
                    report.count("concurrent reads")
                except (ConnectionError, OSError):
                    time.sleep(0.01)

    threads = [threading.Thread(target=killer, daemon=True)]
    threads += [threading.Thread(target=reader, args=(n,), daemon=True) for n in range(2)]
    for thread in threads:
        thread.start()
    model = Model()
    try:
        step = 0
        least_kills = FIRST_UNIT_KILLS if unit == 0 else 0  # however slow the restarts
        while step < 400 and (step < 40 or kills_started[0] < least_kills or not clock.over()):
            op = workload.next_op(model)
            expected = expected_states(model, op)
            kills_before = len(views_after_kill)
            client = clients[step % SERVER_CLIENTS]
            try:
                answer: str | None = outcome(op, client)
            except ConnectionError:
                answer = None
            settle = time.monotonic() + 60
            while kills_started[0] > len(views_after_kill) and time.monotonic() < settle:
                time.sleep(0.005)  # a kill is under way: wait for its reopened view
            kills = views_after_kill[kills_before:]
            label = f"{where} step {step} ({op.describe()})"
            model = _judge_step(label, op, expected, answer, kills, report)
            step += 1
        report.count("steps", step)
    finally:
        stopping.set()
        for thread in threads:
            thread.join(60)
        for client in clients:
            client.close()
    if kill_errors:
        raise Abort(f"{where}: the killer failed\n{kill_errors[0]}")
    if server.process is not None and server.process.poll() is None:
        with client_class(socket_path, timeout=60, reconnect_seconds=10) as final:
            if view(final) != view(model):
                report.diverge(f"{where}: the served state differs from the model at the end")
        if server.stop() != 0:
            report.diverge(f"{where}: SIGTERM did not exit 0")
    server.kill()
    with Queue(directory, sync=False) as reopened:
        if not compare_views(reopened, model, report, f"{where} (reopened at the end)"):
            raise Abort(f"{where}: aborted")
