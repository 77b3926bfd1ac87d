"""Campaign ``kill``: a child process (forked by the zygote of
`kill_child`) opens the store and runs a seeded workload with
``sync=True``, reporting ``begin i`` before and ``done i <digest>`` after
each call; the parent SIGKILLs it at random moments (also while it
recovers), reopens, and requires the model's replay of the done
operations, with the one in-flight operation applied, not applied, or (a
reserve) only reaped. Every other life runs 4 or 16 threads on one
queue (group commit, some with background compactions), replayed in
the log order of the frames each thread wrote.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import random
import select
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from processes import child_environment

from model import Model, view
from walqueue.format.current import read_current

from .checks import reopened_view, view_difference
from .harness import Abort, Budget, Report, remove
from .kill_child import (
    CHILD_BOOTSTRAP,
    CHILD_TIMEOUT,
    KILL_COMPACT_BYTES,
    KILL_MAX_DELAY,
    KILL_THREAD_STEPS,
    KILLS_PER_UNIT,
    STARTUP_KILL_PROBABILITY,
    ThreadOps,
    answer_of,
    forced_steps,
    kill_life_options,
    kill_workload,
)
from .workload import Expected, Op, count_lifecycle_call, expected_states, outcome, reap_only, text_digest


@dataclass
class ChildLife:
    """What the parent learned from one killed child: its lines, in order."""

    ready: bool = False
    begun: list[tuple[int, str]] = field(default_factory=list)
    done: dict[int, str] = field(default_factory=dict)
    #: Threaded lives: each thread's acknowledged calls (index -> digest), and the log's frames (seq, thread).
    thread_done: dict[str, dict[int, str]] = field(default_factory=dict)
    frames: list[tuple[int, str]] = field(default_factory=list)
    #: Threaded lives: the index of the call (of the frame's thread) that wrote each reported frame (seq -> index).
    frame_calls: dict[int, int] = field(default_factory=dict)
    pid: int | None = None
    returncode: int | None = None


class Zygote:
    """The parent's side of `kill_zygote`: spawn a victim, wait for a line, kill, collect everything."""

    def __init__(self, env: dict[str, str], errors: IO[bytes]) -> None:
        command = [sys.executable, "-S", "-c", CHILD_BOOTSTRAP, "--kill-zygote"]
        self.process = subprocess.Popen(
            command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=errors, env=env, bufsize=0
        )
        self.errors = errors
        self._buffer = b""

    def spawn(
        self, directory: Path, seed: int, unit: int, epoch: int, threads: int = 1, compact_bytes: int | None = None
    ) -> ChildLife:
        assert self.process.stdin is not None
        compact = "none" if compact_bytes is None else str(compact_bytes)
        self.process.stdin.write(f"{directory} {seed} {unit} {epoch} {threads} {compact}\n".encode())
        life = ChildLife()
        self.read_until(life, lambda lived: lived.pid is not None)
        return life

    def read_until(self, life: ChildLife, enough: Callable[[ChildLife], bool]) -> None:
        """Read and record lines until `enough(life)` (or the victim's end, or a hung zygote)."""
        assert self.process.stdout is not None
        fd = self.process.stdout.fileno()
        limit = time.monotonic() + CHILD_TIMEOUT
        while not enough(life) and life.returncode is None:
            while b"\n" in self._buffer and not enough(life) and life.returncode is None:
                line, self._buffer = self._buffer.split(b"\n", 1)
                self._record(life, line.decode())
            if enough(life) or life.returncode is not None:
                return
            ready, _, _ = select.select([fd], [], [], max(0.0, limit - time.monotonic()))
            chunk = os.read(fd, 65536) if ready else b""
            if not chunk:
                raise Abort(f"the kill zygote hung or died:\n{self.stderr_tail()}")
            self._buffer += chunk

    @staticmethod
    def _record(life: ChildLife, line: str) -> None:
        if line == "ready":
            life.ready = True
            return
        word, first, rest = (line.split(" ", 2) + [""])[:3]
        if word == "child":
            life.pid = int(first)
        elif word == "exit":
            life.returncode = int(rest)
        elif word == "begin":
            life.begun.append((int(first), rest))
        elif word == "done" and first.startswith("T"):
            index, digest = rest.split()
            life.thread_done.setdefault(first, {})[int(index)] = digest
        elif word == "done":
            life.done[int(first)] = rest
        elif word == "frame":
            thread, call = rest.split()
            life.frames.append((int(first), thread))
            life.frame_calls[int(first)] = int(call)
        else:
            raise Abort(f"the victim wrote {line!r}")

    def kill(self, life: ChildLife) -> None:
        assert life.pid is not None
        if life.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(life.pid, signal.SIGKILL)
        self.read_until(life, lambda lived: lived.returncode is not None)

    def stderr_tail(self) -> str:
        self.errors.seek(0)
        return self.errors.read().decode("utf-8", "replace")[-2000:]

    def close(self) -> None:
        if self.process.stdin is not None:
            self.process.stdin.close()
        try:
            self.process.wait(timeout=CHILD_TIMEOUT)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def campaign_kill(seed: int, budget: float, report: Report) -> None:
    """SIGKILL a child running a seeded workload at random moments; reopen and compare after each kill."""
    clock = Budget(budget, report)
    report.counts.update({"kills": 0, "operations done": 0, "in flight": 0})

    with tempfile.TemporaryDirectory(prefix="walqueue-kill-") as tmp, tempfile.TemporaryFile() as errors:
        zygote = Zygote(child_environment(), errors)
        try:
            for unit in itertools.count():
                if unit and clock.over():
                    break
                try:
                    _kill_unit(seed, unit, Path(tmp) / f"u{unit}", clock.over, zygote, report)
                except Abort as exc:
                    report.diverge(str(exc))
                    if zygote.process.poll() is not None:
                        break
                except Exception:
                    report.diverge(f"kill unit {unit}: unexpected exception\n{traceback.format_exc(limit=6)}")
        finally:
            zygote.close()


def _kill_unit(seed: int, unit: int, directory: Path, over: Callable[[], bool], zygote: Zygote, report: Report) -> None:
    rng = random.Random(f"kill-timing:{seed}:{unit}")
    model = Model()
    try:
        for epoch in range(KILLS_PER_UNIT):
            if (unit or epoch >= 5) and over():
                break
            threads, compact_bytes = kill_life_options(seed, unit, epoch)
            where = f"--seed {seed} kill unit {unit} epoch {epoch} ({threads} threads, compact_bytes={compact_bytes})"
            life = zygote.spawn(directory, seed, unit, epoch, threads, compact_bytes)
            if forced := forced_steps(unit, epoch):  # every kind of call acknowledged first, however slow
                zygote.read_until(life, lambda lived: forced - 1 in lived.done)
                time.sleep(rng.uniform(0.0, KILL_MAX_DELAY))
            elif rng.random() < STARTUP_KILL_PROBABILITY:
                time.sleep(rng.uniform(0.0, 0.02))  # may land while it opens and recovers
            else:
                zygote.read_until(life, lambda lived: lived.ready)
                time.sleep(rng.uniform(0.0, KILL_MAX_DELAY))
            zygote.kill(life)
            report.count("kills")
            if life.returncode not in (-signal.SIGKILL, 0):
                raise Abort(f"{where}: the child died by itself (status {life.returncode}):\n{zygote.stderr_tail()}")
            report.count(f"lives with {threads} thread{'s' if threads > 1 else ''}")
            _count_unpublished_snapshot(directory, report)
            if threads == 1:
                model = check_life(directory, seed, unit, epoch, life, model, report, where)
            else:
                model = _check_threaded_life(directory, seed, unit, epoch, threads, life, model, report, where)
    finally:
        remove(directory)


def check_life(
    directory: Path, seed: int, unit: int, epoch: int, life: ChildLife, model: Model, report: Report, where: str
) -> Model:
    """Replay the child's reported calls in the model; the reopened store must match (CONTRACT §4 rules 6, 7)."""
    workload = kill_workload(seed, unit, epoch)
    in_flight: tuple[Op, Expected] | None = None
    for position, (index, description) in enumerate(life.begun):
        if index != position:
            raise Abort(f"{where}: the child reported call {index} at position {position}")
        op = workload.next_op(model)
        if op.describe() != description:
            raise Abort(f"{where} call {index}: child ran {description!r}, the replay {op.describe()!r}")
        if index in life.done:
            # Certain: replay it on the model itself (cloning is for the uncertain one only).
            answer = outcome(op, model)
            if life.done[index] != text_digest(answer):
                raise Abort(f"{where} call {index} ({description}): answer differs from the model's")
            report.count("operations done")
            count_lifecycle_call(report, op, answer, "acknowledged")
        else:
            if position != len(life.begun) - 1:
                raise Abort(f"{where}: call {index} began but never finished, and another one began")
            in_flight = (op, expected_states(model, op))
    if in_flight is None:
        candidates = [model]  # every call it began, it finished: nothing is uncertain
    else:
        # before the call, after it, or (a reserve) after its reap only
        candidates = sorted(in_flight[1].by_seq.values(), key=lambda m: m.last_seq)
    if not directory.exists():
        # Killed before `Queue` created its directory: only a first life,
        # killed while starting, can leave none. Nothing was written, fsck
        # (which never creates anything) rightly finds no store to read, and
        # the next life starts from nothing, as the model does.
        if life.ready or life.begun or model.last_seq:
            raise Abort(f"{where}: no directory after a life that had opened it")
        report.count("killed before creating the directory")
        return model
    got = reopened_view(directory, report, where, sync=True, compact_bytes=KILL_COMPACT_BYTES)
    for candidate in candidates:
        if view(candidate) == got:
            _count_resolution(report, life, in_flight, candidate)
            return candidate
    flight = "nothing" if in_flight is None else in_flight[0].describe()
    raise Abort(
        f"{where}: reopened state matches no allowed state (in flight: {flight}): "
        f"{view_difference(got, view(candidates[-1]))}"
    )


def _count_unpublished_snapshot(directory: Path, report: Report) -> None:
    """Count the kills that left a snapshot CURRENT does not name (a background snapshot was being written)."""
    if not directory.is_dir():
        return
    try:
        current = read_current(directory)
    except Exception:  # noqa: BLE001 - opening will judge it
        return
    named = None if current is None else current.snapshot
    if any(p.name.startswith("snapshot-") and p.name != named for p in directory.iterdir()):
        report.count("killed with a snapshot unpublished")


class _ThreadReplay:
    """The parent's copy of one thread of a threaded life: its calls, rebuilt from the model's answers."""

    def __init__(self, ops: ThreadOps, done: dict[int, str], wrote: set[int]) -> None:
        self.ops = ops
        self.done = done
        #: The calls the log names as the writers of frames (replayed there, never placed as writing nothing).
        self.wrote = wrote
        self.index = 0
        self._head: Op | None = None

    def head(self) -> Op | None:
        if self._head is None and self.index < KILL_THREAD_STEPS:
            self._head = self.ops.next_op()
        return self._head

    @property
    def acknowledged(self) -> bool:
        return self.index in self.done

    def consume(self, value: Any) -> None:
        assert self._head is not None
        self.ops.feed(self._head, value)
        self._head = None
        self.index += 1


def _place_without_writing(replay: _ThreadReplay, model: Model) -> int:
    """Place the thread's next acknowledged calls that write nothing and answer as reported at `model`'s state."""
    placed = 0
    while replay.acknowledged:
        if replay.index in replay.wrote:
            # Its frames are in the log. Its answer may fit an earlier state where it writes nothing:
            # an empty reserve that reaped when it ran reaps nothing before a shorter lease or a new one.
            return placed
        op = replay.head()
        assert op is not None
        digest = replay.done[replay.index]
        if op.kind in ("put", "put_many"):
            specs = [op.args["spec"]] if op.kind == "put" else op.args["items"]
            if any(model.get(spec["task_id"]) is None for spec in specs):
                return placed  # a new task: this call writes
            text, value = answer_of(op, model)  # identical retries: nothing changes
        elif op.kind in ("get", "tasks"):
            text, value = answer_of(op, model)
        else:
            if op.kind == "reserve" and digest != text_digest("ok []"):
                return placed  # it leased something: it wrote
            if op.kind in ("ack", "release", "fail", "give_back", "redrive", "cancel") and digest == text_digest(
                "ok null"
            ):
                return placed
            trial = model.clone()
            text, value = answer_of(op, trial)
            if trial.last_seq != model.last_seq:
                return placed
        if text_digest(text) != digest:
            return placed  # not at this state; perhaps at a later one
        replay.consume(value)
        placed += 1
    return placed


def _check_threaded_life(
    directory: Path,
    seed: int,
    unit: int,
    epoch: int,
    threads: int,
    life: ChildLife,
    model: Model,
    report: Report,
    where: str,
) -> Model:
    """Replay a threaded life in the model in log order; every acknowledged call must be there, answered alike.

    The frames' lines give the log order and each frame's thread and call. A
    call that wrote is replayed where its frames are, on the model itself,
    and must write exactly those frames; an acknowledged call that wrote
    nothing (a read, a retry, a stale token, an empty reserve) is placed at
    the earliest state, between its thread's neighbours, where the model
    gives its answer without writing. At the end every acknowledged call
    must be placed and the reopened store must equal the model: nothing
    lost, nothing applied twice, and the order one that the model can reach.
    """
    if not directory.exists():
        if life.ready or life.frames or life.thread_done or model.last_seq:
            raise Abort(f"{where}: no directory after a life that had opened it")
        report.count("killed before creating the directory")
        return model
    got = reopened_view(directory, report, where, sync=True, compact_bytes=KILL_COMPACT_BYTES)
    start = model.last_seq
    log = _log_owners(life, start, got["last_seq"], where)
    replays = {}
    for name in (f"T{n}" for n in range(threads)):
        writers = {owner[1] for owner in log if owner is not None and owner[0] == name}
        replays[name] = _ThreadReplay(ThreadOps(seed, unit, epoch, name), life.thread_done.get(name, {}), writers)
    position = 0
    while position < len(log):
        for replay in replays.values():
            _place_without_writing(replay, model)
        owner = log[position]
        if owner is None:
            break  # the last frames, written just before the kill, without their lines
        current = replays.get(owner[0])
        if current is None or current.head() is None:
            raise Abort(f"{where}: frame {start + position + 1} is from {owner}, which has no call left")
        model, wrote = _replay_logged_call(current, owner[0], log, position, start, model, report, where)
        position += wrote
    if position < len(log):  # frames without lines: the call in flight of one of the threads
        model = _resolve_unreported_tail(replays, model, got, report, where)
    for name, replay in replays.items():
        _place_without_writing(replay, model)
        if replay.acknowledged:
            op = replay.head()
            assert op is not None
            raise Abort(
                f"{where}: {name}'s acknowledged call {replay.index} ({op.describe()}) is not in the reopened "
                "store, or no state the model passed through gives its answer"
            )
    if view(model) != got:
        raise Abort(f"{where}: the reopened store differs from the model's replay: {view_difference(got, view(model))}")
    return model


def _log_owners(life: ChildLife, start: int, end: int, where: str) -> list[tuple[str, int] | None]:
    """The (thread, call) that wrote each frame after `start`, up to the reopened store's `end` (None: no line)."""
    owners = {seq: (thread, life.frame_calls[seq]) for seq, thread in life.frames}
    if sorted(owners) != list(range(start + 1, start + 1 + len(owners))):
        raise Abort(f"{where}: the frames reported are not consecutive from {start + 1}")
    if owners and max(owners) > end:
        raise Abort(f"{where}: frame {max(owners)} was written before the kill, the reopened store ends at {end}")
    return [owners.get(seq) for seq in range(start + 1, end + 1)]


def _replay_logged_call(
    replay: _ThreadReplay,
    owner: str,
    log: list[tuple[str, int] | None],
    position: int,
    start: int,
    model: Model,
    report: Report,
    where: str,
) -> tuple[Model, int]:
    """Apply `owner`'s next call, whose frames start at `position` of the log; the model and its frame count."""
    op = replay.head()
    assert op is not None
    label = f"{where} {owner} call {replay.index} ({op.describe()}) at frame {start + position + 1}"
    if log[position] != (owner, replay.index):
        raise Abort(f"{label}: the log says {log[position]} wrote it; no state before gives this call's answer")
    before = model.clone() if not replay.acknowledged else None
    text, value = answer_of(op, model)
    wrote = model.last_seq - (start + position)
    span = log[position : position + wrote]
    if wrote == 0:
        raise Abort(f"{label}: the model writes nothing here")
    if any(who not in ((owner, replay.index), None) for who in span) or (replay.acknowledged and None in span):
        raise Abort(f"{label}: the model writes {wrote} frames, the log has (thread, call) {span}")
    if replay.acknowledged:
        if text_digest(text) != replay.done[replay.index]:
            raise Abort(f"{label}: answered differently from the model")
        report.count("threaded operations done")
        count_lifecycle_call(report, op, text, "threaded acknowledged")
    else:
        report.count("threaded in flight applied")
        if len(span) < wrote:  # the log ends inside the call: a reserve, reaped only
            if op.kind != "reserve" or before is None or len(span) != 1:
                raise Abort(f"{label}: {len(span)} of its {wrote} frames in the log")
            model = reap_only(before, op.args["now"])
            report.count("threaded in flight reaped only")
    replay.consume(value)
    return model, wrote


def _resolve_unreported_tail(
    replays: dict[str, _ThreadReplay], model: Model, got: dict[str, Any], report: Report, where: str
) -> Model:
    """The last frames lack their lines: one thread's call in flight wrote them; find which, by the state."""
    for replay in replays.values():
        op = replay.head()
        if op is None or replay.acknowledged:
            continue
        trial = model.clone()
        answer_of(op, trial)
        candidates = [trial]
        if op.kind == "reserve":
            candidates.append(reap_only(model, op.args["now"]))
        for candidate in candidates:
            if candidate.last_seq == got["last_seq"] and view(candidate) == got:
                report.count("threaded in flight applied, unreported")
                replay.consume(None)
                return candidate
    raise Abort(f"{where}: frames up to {got['last_seq']} lack their lines and no call in flight wrote them")


def _count_resolution(report: Report, life: ChildLife, in_flight: tuple[Op, Expected] | None, state: Model) -> None:
    if not life.ready:
        report.count("killed while opening")
    if in_flight is None:
        return
    report.count("in flight")
    _, expected = in_flight
    if state.last_seq == expected.before.last_seq:
        report.count("in-flight not applied")
    elif state.last_seq == expected.after.last_seq:
        report.count("in-flight applied")
    else:
        report.count("in-flight reaped only")
