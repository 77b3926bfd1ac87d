"""Campaign ``environment``: what an ordinary process does around a queue, between
and inside calls: ``chdir`` under a queue opened by a relative path,
a repointed symlink it was opened through (decoy stores under both
names), forks whose children try every call (also a fork inside a write,
from the hook), signal handlers that ``close()`` the queue mid-call (from
the hook, and from a CPU-time timer with no hook at all), FIFOs,
directories and symlinks at every name compaction creates and every
name opening reads, and LOCK deleted or replaced under the owner. Each
life is compared with the model on reopen, every step runs under a
watchdog (a hang is a divergence), and a canary tree beside the store
must be byte-identical at the end.
"""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from harness import scratch, tmpfs, units

from model import SPECIAL_KINDS, Model, directory_digest, place_special, view
from walqueue import (
    CorruptStore,
    DirectoryLocked,
    Lease,
    Queue,
    QueueClosed,
)
from walqueue.format.names import CURRENT_TMP_NAME, LOCK_NAME, snapshot_name

from .checks import view_difference
from .harness import Abort, Budget, Report, remove
from .workload import Expected, Workload, count_lifecycle_call, expected_states, outcome

#: What the environment campaign does between and inside calls.
ENV_EVENTS = (
    "chdir",
    "repoint",
    "fork",
    "fork-in-hook",
    "signal-close",
    "timer-close",
    "obstacle",
    "special-file",
    "lock",
)
ENV_WEIGHTS = (3, 2, 2, 1, 2, 2, 2, 2, 1)
#: Seconds any one step may take before it counts as a hang.
ENV_STEP_TIMEOUT = 20.0
#: The names an obstacle is put under while the queue is open (the first three are created by compaction).
ENV_OBSTACLE_KINDS = ("fifo", "directory", "outside-file", "dev-zero", "dangling")
ENV_SPECIAL_KINDS = SPECIAL_KINDS


class Hang(Exception):
    """A step of the environment campaign outlived `ENV_STEP_TIMEOUT`."""


@contextlib.contextmanager
def watchdog(seconds: float) -> Iterator[None]:
    """Raise `Hang` in this thread if the block runs longer than `seconds` (SIGALRM interrupts a blocked call)."""

    def expire(signum: int, frame: Any) -> None:
        raise Hang(f"no answer within {seconds:g} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


class EnvHook:
    """The hook of an environment life: silent until armed, then forks or signals at one phase call."""

    def __init__(self) -> None:
        self.action: str | None = None
        self.at = 0
        self.calls = 0
        self.children: list[int] = []

    def arm(self, action: str, at: int) -> None:
        self.action, self.at, self.calls = action, at, 0

    def __call__(self, phase: str) -> None:
        if self.action is None or phase.startswith("recover."):
            return
        self.calls += 1
        if self.calls - 1 != self.at:
            return
        action, self.action = self.action, None
        if action == "signal":
            os.kill(os.getpid(), signal.SIGUSR1)
        elif action == "fork":
            pid = os.fork()
            if pid == 0:
                # The child returns into the write it interrupted; it must be stopped there.
                # The caller of the step sees the exception in the child and exits it.
                return
            self.children.append(pid)


def _remove_entry(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif path.is_symlink() or path.exists():
        path.unlink()


def _wait_child(pid: int, seconds: float) -> int | None:
    """The exit status of child `pid`, or None (after killing it) if it outlived `seconds`."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.005)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    return None


#: What a forked child tries on its inherited queue: each must be QueueClosed (close() must be silent).
CHILD_PROBES: tuple[tuple[str, Callable[[Queue], Any]], ...] = (
    ("put", lambda q: q.put("child-put", {})),
    ("put_many", lambda q: q.put_many([{"task_id": "child-many", "payload": {}}])),
    ("reserve", lambda q: q.reserve("child", now=2**40, lease_seconds=1)),
    ("ack", lambda q: q.ack(Lease("t", "w", 1, 0, 0, {}), now=0)),
    ("release", lambda q: q.release(Lease("t", "w", 1, 0, 0, {}), now=0)),
    ("extend", lambda q: q.extend(Lease("t", "w", 1), now=0, lease_seconds=1)),
    ("redrive", lambda q: q.redrive("t", available_at=0)),
    ("cancel", lambda q: q.cancel("t")),
    ("wait", lambda q: q.wait(0)),
    ("compact", lambda q: q.compact()),
    ("get", lambda q: q.get("t")),
    ("tasks", lambda q: q.tasks()),
    ("stats", lambda q: q.stats()),
    ("last_seq", lambda q: q.last_seq),
)


def _child_tries_everything(queue: Queue) -> int:
    """In a forked child: 0 if every call is refused with QueueClosed and close() is silent."""
    for _, probe in CHILD_PROBES:
        try:
            probe(queue)
        except QueueClosed:
            continue
        except BaseException:
            return 3
        return 2
    try:
        queue.close()
    except BaseException:
        return 4
    return 0


class EnvLife:
    """One store in the environment campaign: the queue, the model, the canary tree beside it."""

    def __init__(self, seed: int, unit: int, root: Path, report: Report) -> None:
        self.rng = random.Random(f"{seed}-environment-{unit}")
        self.where = f"--seed {seed} environment unit {unit}"
        self.report = report
        self.home = root / "home"
        self.store = self.home / "q"
        #: Another name of the store: the queue is sometimes opened through it, and it is repointed.
        self.link = self.home / "link"
        self.canary = root / "canary"
        self.outside = self.canary / "outside.txt"
        self.home.mkdir(parents=True)
        (self.canary / "sub").mkdir(parents=True)
        self.outside.write_text("canary: never written")
        # Decoys under the same relative name: a queue that followed its path
        # string after a chdir would write into one of them.
        for decoy in (self.canary / "q", self.canary / "sub" / "q"):
            with Queue(decoy, sync=False, compact_bytes=None) as queue:
                queue.put("decoy", {"n": 1})
        self.canary_digest = directory_digest(self.canary)
        self.root_names = sorted(os.listdir(root))
        self.root = root
        self.with_hook = self.rng.random() < 0.6
        self.hook = EnvHook()
        self.compact_bytes = self.rng.choice([None, 400, 2_000])
        self.model = Model()
        self.workload = Workload(f"{seed}-environment-{unit}")
        self.queue: Queue | None = None
        self.closed_by_signal = False

    # -- opening ----------------------------------------------------------------

    def open(self, relative: bool) -> Queue:
        """Open the store (by a relative path from `home` when `relative`, maybe through the link)."""
        os.chdir(self.home)
        path: str | Path = "q" if relative else self.store
        if self.store.is_dir():
            if self.link.is_symlink():
                self.link.unlink()
            self.link.symlink_to("q")
            if relative and self.rng.random() < 0.5:
                path = "link"
        queue = Queue(path, sync=False, compact_bytes=self.compact_bytes, hook=self.hook if self.with_hook else None)
        self.queue = queue
        return queue

    def reopen_and_compare(self, allowed: list[Model], what: str) -> None:
        """Close whatever is open, reopen by a relative path, and require one of the `allowed` states."""
        if self.queue is not None:
            self.queue.close()
        queue = self.open(relative=True)
        got = view(queue)
        for candidate in allowed:
            if got == view(candidate):
                self.model = candidate.clone()
                return
        self.report.diverge(f"{self.where} after {what}: {view_difference(got, view(allowed[-1]))}")
        raise Abort("the state diverged")

    # -- events -------------------------------------------------------------------

    def step(self, number: int) -> None:
        rng = self.rng
        where = f"{self.where} step {number}"
        event = rng.choices(ENV_EVENTS, weights=ENV_WEIGHTS)[0] if rng.random() < 0.45 else "op"
        if event in ("fork-in-hook", "signal-close") and not self.with_hook:
            event = "timer-close" if event == "signal-close" else "fork"
        self.report.count(f"{event}s" if event != "op" else "operations")
        getattr(self, "_" + event.replace("-", "_"))(where)

    def _op(self, where: str) -> None:
        assert self.queue is not None
        op = self.workload.next_op(self.model)
        expected = expected_states(self.model, op)
        answer = outcome(op, self.queue)
        if answer != expected.answer:
            self.report.diverge(f"{where}: {op.describe()} answered {answer[:120]}, model {expected.answer[:120]}")
            raise Abort("the answer diverged")
        count_lifecycle_call(self.report, op, answer, "applied")
        self.model = expected.after

    def _chdir(self, where: str) -> None:
        os.chdir(self.rng.choice([self.canary, self.canary / "sub", self.root, self.home, self.store]))
        self._op(where)

    def _repoint(self, where: str) -> None:
        """Repoint the link to the store at a decoy store; whatever the queue was opened through, it stays put."""
        if self.link.is_symlink():
            self.link.unlink()
        self.link.symlink_to(self.canary / "q")
        self._op(where)
        assert self.queue is not None
        self.queue.compact()
        self.model.compact()
        self._op(where)

    def _fork(self, where: str) -> None:
        assert self.queue is not None
        queue = self.queue
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child
            status = 5
            try:
                status = _child_tries_everything(queue)
            finally:
                os._exit(status)
        waited = _wait_child(pid, ENV_STEP_TIMEOUT)
        if waited != 0:
            self.report.diverge(f"{where}: a forked child's inherited queue {'hung' if waited is None else waited}")
        else:
            self.report.count("child calls refused", len(CHILD_PROBES))
        self._op(where)

    def _fork_in_hook(self, where: str) -> None:
        """Fork inside a write (at a random phase): the child must be stopped, the parent's call complete."""
        assert self.queue is not None
        self.hook.arm("fork", self.rng.randrange(4))
        parent = os.getpid()
        try:
            self._op(where)
        except BaseException as exc:
            if os.getpid() != parent:  # pragma: no cover - the child, stopped inside the write
                os._exit(0 if isinstance(exc, QueueClosed) else 6)
            raise
        if os.getpid() != parent:  # pragma: no cover - a child that was not stopped
            os._exit(7)
        self.hook.action = None
        for pid in self.hook.children:
            status = _wait_child(pid, ENV_STEP_TIMEOUT)
            if status != 0:
                self.report.diverge(f"{where}: a child forked in the hook went on writing ({status})")
            else:
                self.report.count("children stopped in a write")
        self.hook.children.clear()

    def _close_by_signal(
        self, where: str, signum: signal.Signals, arm: Callable[[], object], disarm: Callable[[], object]
    ) -> None:
        """Run ops until a signal handler's close() ends the life; every reopen state must be explainable."""
        assert self.queue is not None
        queue = self.queue
        previous = signal.signal(signum, lambda s, f: queue.close())
        interrupted: Expected | None = None
        try:
            arm()
            for _ in range(50):
                op = self.workload.next_op(self.model)
                expected = expected_states(self.model, op)
                try:
                    answer = outcome(op, queue)
                except QueueClosed:
                    interrupted = expected
                    break
                if answer != expected.answer:
                    self.report.diverge(f"{where}: {op.describe()} answered {answer[:100]} under a signal")
                    raise Abort("the answer diverged")
                self.model = expected.after
        finally:
            disarm()
            signal.signal(signum, previous)
        self.report.count("closed by a handler" if interrupted is not None else "handler never closed")
        allowed = [self.model] if interrupted is None else list(interrupted.by_seq.values())
        if interrupted is None:
            queue.close()  # no handler closed it (or one did after the last call): reopening needs the lock
        self.queue = None
        self.reopen_and_compare(allowed, f"{where} (close from a signal handler)")

    def _signal_close(self, where: str) -> None:
        at = self.rng.randrange(6)
        self._close_by_signal(
            where, signal.SIGUSR1, lambda: self.hook.arm("signal", at), lambda: setattr(self.hook, "action", None)
        )

    def _timer_close(self, where: str) -> None:
        delay = self.rng.uniform(1e-5, 3e-3)
        self._close_by_signal(
            where,
            signal.SIGVTALRM,
            lambda: signal.setitimer(signal.ITIMER_VIRTUAL, delay),
            lambda: signal.setitimer(signal.ITIMER_VIRTUAL, 0),
        )

    def _obstacle(self, where: str) -> None:
        """Something in the way of a file compaction creates: refused or removed, never written through."""
        assert self.queue is not None
        queue = self.queue
        if not self.with_hook:
            # A background snapshot could publish the very name an obstacle is put
            # under (an operator racing a live compaction): let it finish first.
            queue.compact()
        stats = queue.stats()
        names = [CURRENT_TMP_NAME, snapshot_name(stats["last_seq"]), snapshot_name(stats["last_seq"] + 10**6)]
        name = self.rng.choice(names)
        kind = self.rng.choice(ENV_OBSTACLE_KINDS)
        path = self.store / name
        if stats["last_seq"] == stats["snapshot_seq"] and name == snapshot_name(stats["last_seq"]):
            return  # the published snapshot's own name: not an obstacle, the store's file
        place_special(path, kind, self.outside)
        self.report.count("obstacles placed")
        try:
            queue.compact()
        except FileExistsError:
            self.report.count("obstacles refused")
        if path.is_symlink() or (path.exists() and not path.is_file()):
            _remove_entry(path)  # still the obstacle (a regular file there is the snapshot compaction wrote)
        self._op(where)

    def _special_file(self, where: str) -> None:
        """Close, put a special file where the store has (or could have) a file opening reads, reopen."""
        assert self.queue is not None
        self.queue.close()
        self.queue = None
        names = sorted(p.name for p in self.store.iterdir())
        candidates = [n for n in names if n == "CURRENT" or n.startswith(("snapshot-", "wal-")) or n == LOCK_NAME]
        candidates.append("CURRENT")
        name = self.rng.choice(candidates)
        kind = self.rng.choice(ENV_SPECIAL_KINDS)
        path = self.store / name
        saved = self.root / "saved"
        had = path.exists() and not path.is_symlink()
        if had:
            shutil.move(path, saved)
        place_special(path, kind, self.outside)
        from walqueue.format.fsck import EXIT_CORRUPT, check

        verdict = check(self.store, replay=True)
        try:
            Queue(self.store, sync=False, compact_bytes=None).close()
        except CorruptStore as exc:
            if verdict.exit_code != EXIT_CORRUPT:
                self.report.diverge(f"{where}: {name} as {kind}: opening refused it, fsck exit {verdict.exit_code}")
            elif exc.path is None or os.path.basename(exc.path) != name:
                self.report.diverge(f"{where}: {name} as {kind}: CorruptStore names {exc.path}")
            else:
                self.report.count("special files refused")
        else:
            if verdict.exit_code == EXIT_CORRUPT:
                self.report.diverge(f"{where}: {name} as {kind}: opening succeeded, fsck says corrupt")
            else:
                self.report.count("special files ignored")  # an orphan snapshot's name, say
        _remove_entry(path)
        if had:
            shutil.move(saved, path)
        self.reopen_and_compare([self.model], f"{where} ({name} as {kind}, then restored)")

    def _lock(self, where: str) -> None:
        """Delete or replace LOCK under the live owner: a second opener is still refused."""
        lock = self.store / LOCK_NAME
        if lock.exists():
            lock.unlink()
        if self.rng.random() < 0.5:
            lock.write_bytes(b"")
        try:
            Queue(self.store, sync=False, compact_bytes=None).close()
        except DirectoryLocked:
            self.report.count("second owners refused")
        else:
            self.report.diverge(f"{where}: a second Queue opened while the first owns the directory")
        self._op(where)

    # -- the end of a life -----------------------------------------------------------

    def finish(self) -> None:
        if self.queue is not None:
            self.queue.close()
        self.reopen_and_compare([self.model], f"{self.where} (final reopen)")
        if self.queue is not None:
            self.queue.close()
        if directory_digest(self.canary) != self.canary_digest or not self.outside.exists():
            self.report.diverge(f"{self.where}: the canary tree beside the store was written")
        stray = sorted(set(os.listdir(self.root)) - set(self.root_names) - {"saved"})
        if stray:
            self.report.diverge(f"{self.where}: files appeared beside the store: {stray}")
        self.report.count("canaries intact")


def campaign_environment(seed: int, budget: float, report: Report) -> None:
    """chdir, forks, signal handlers that close, special files and LOCK games, between and inside calls."""
    clock = Budget(budget, report)  # past its budget (up to the overtime) while short of the caller's targets
    cwd = os.getcwd()
    with scratch("walqueue-env-", tmpfs()) as root:
        for unit in units(clock.over, least=2):
            life = EnvLife(seed, unit, root / f"u{unit}", report)
            report.count("lives")
            try:
                with watchdog(ENV_STEP_TIMEOUT):
                    life.open(relative=True)
                for number in range(40):
                    with watchdog(ENV_STEP_TIMEOUT):
                        life.step(number)
                with watchdog(ENV_STEP_TIMEOUT):
                    life.finish()
            except Abort:
                pass
            except Hang as exc:
                report.diverge(f"{life.where}: a hang: {exc}")
            finally:
                if life.queue is not None:
                    life.queue.close()
                os.chdir(cwd)
                remove(root / f"u{unit}")
