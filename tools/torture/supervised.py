"""A unit of the campaigns that run `walqueue-worker --processes` and kill its processes under load (workers, chains).

What both do the same way: the unit and its store, starting the supervisor
in its own session, asking its server a question while it may be away,
killing (or stopping) one of its processes at random, the loop that does so
until the work is done, and the clean stop at the end.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from processes import child_environment, children

from .harness import Report

#: Of the kills, the share aimed at the server (when the supervisor has one running).
SERVER_KILL_SHARE = 0.3
#: Of the server kills, the share that first freeze it (SIGSTOP) for a while, so that calls are in flight at the kill.
FROZEN_SHARE = 0.5
FROZEN_SECONDS = (0.05, 0.3)


@dataclass
class Unit:
    """One run of `walqueue-worker --processes` and what the campaign did to it."""

    directory: Path
    rng: random.Random
    report: Report
    where: str
    killed: set[int] = field(default_factory=set)
    stopped: set[int] = field(default_factory=set)  # the worker processes that got (or sent themselves) the stop

    @property
    def store(self) -> Path:
        return self.directory / "q"


@contextlib.contextmanager
def supervisor(
    unit: Unit, handler: str, options: list[str], log: Path | None = None
) -> Iterator[subprocess.Popen[bytes]]:
    """``walqueue-worker STORE HANDLER OPTIONS`` in the unit's directory and its own session; killed (group) after.

    `log`: where its stderr (and its children's, the worker processes' log lines) goes; by default nowhere.
    """
    command = [sys.executable, "-m", "walqueue.worker", str(unit.store), handler, *options]
    with open(log or os.devnull, "ab") as stderr:
        process = subprocess.Popen(
            command,
            cwd=unit.directory,
            env=child_environment(),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            start_new_session=True,
        )
    try:
        yield process
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def ask_server[T](unit: Unit, question: Callable[[Any], T]) -> T | None:
    """`question(client)` of the unit's server; None while it is away (being killed or restarted)."""
    from walqueue.client import Client

    try:
        with Client(unit.store / "worker.sock", timeout=5, reconnect_seconds=0.5) as client:
            return question(client)
    except Exception:  # noqa: BLE001 - the server is being killed or restarted: ask again later
        return None


def kill_one(unit: Unit, process: subprocess.Popen[bytes], stop_share: float = 0.0) -> None:
    """SIGKILL the server or a worker process at random, or (`stop_share` of the time) SIGTERM a worker."""
    found = children(process.pid)
    servers = [pid for pid, kind in found if kind == "server"]
    workers = [pid for pid, kind in found if kind == "worker"]
    number = signal.SIGKILL
    roll = unit.rng.random()
    if servers and roll < SERVER_KILL_SHARE:
        target, what = servers[0], "server kills"
    elif workers and roll < SERVER_KILL_SHARE + stop_share:  # a clean stop mid-load: its leases go back unstarted
        target, what, number = unit.rng.choice(workers), "worker stops", signal.SIGTERM
    elif workers:
        target, what = unit.rng.choice(workers), "worker kills"
    else:
        return
    try:
        if what == "server kills" and unit.rng.random() < FROZEN_SHARE:
            _freeze(target, unit.rng.uniform(*FROZEN_SECONDS))
            what = "server kills after a freeze"
        os.kill(target, number)
    except ProcessLookupError:
        return
    (unit.stopped if number == signal.SIGTERM else unit.killed).add(target)
    unit.report.count(what)


def _freeze(pid: int, seconds: float) -> None:
    """SIGSTOP `pid` for `seconds`: the calls sent meanwhile wait unanswered, and the kill that follows loses them all.

    A kill alone rarely lands between a call's arrival and its answer; after
    a freeze every worker's calls in flight do, completions among them.
    """
    os.kill(pid, signal.SIGSTOP)
    time.sleep(seconds)


def kill_until(
    unit: Unit,
    process: subprocess.Popen[bytes],
    done: Callable[[], bool],
    *,
    seconds: float,
    pauses: tuple[float, float],
    kill_share: float,
    stop_share: float = 0.0,
) -> bool:
    """Kill now and then (`kill_share` of the `pauses`) until `done()`; False (a divergence) if it never is.

    The supervisor must live through it all, and the work be done within `seconds`.
    """
    give_up = time.monotonic() + seconds
    while not done():
        if process.poll() is not None:
            unit.report.diverge(f"{unit.where}: the supervisor exited {process.returncode} under load")
            return False
        if time.monotonic() > give_up:
            unit.report.diverge(f"{unit.where}: the work is still not done after {seconds:.0f} s")
            return False
        time.sleep(unit.rng.uniform(*pauses))
        if unit.rng.random() < kill_share:
            kill_one(unit, process, stop_share)
    return True


def terminate(unit: Unit, process: subprocess.Popen[bytes]) -> None:
    """SIGTERM, the clean stop: the supervisor must exit 0 within 30 s."""
    process.send_signal(signal.SIGTERM)
    if (status := process.wait(30)) != 0:
        unit.report.diverge(f"{unit.where}: the supervisor exited {status} after SIGTERM")
