#!/usr/bin/env python3
"""Start-up times of WALQueue's commands, from launch to their first useful act, against peers in the same run.

    python3.12 tools/startup.py                 median of 5 rounds, a table
    python3.12 tools/startup.py --json out.json --rounds 7
    python3.12 tools/startup.py --markdown before.json after.json    the table of PERFORMANCE §12.4

Each figure is the wall time from `Popen` to:

- ``bare``: a bare interpreter (``python -c pass``) exiting: the floor;
- ``serve``: ``walqueue-serve DIR --socket S`` answering its first request
  (a ``stats``) on a fresh connection;
- ``walqueue``: ``walqueue DIR`` answering one ``stats`` line and exiting;
  ``fsck``: ``walqueue-fsck DIR`` exiting;
- ``worker_4``: ``walqueue-worker DIR mod:touch --processes 4`` running its
  first task's handler (which creates a marker file), one task put beforehand
  (its children forked from the supervisor, the default); ``worker_4_spawn``:
  the same with ``--start-method spawn`` (fresh interpreters; only for a tree
  that has the option);
- ``huey_4``: huey's consumer (``huey_consumer mod.huey -w 4 -k process``,
  SqliteHuey with fsync) doing the same (skipped without huey).

A first round, not counted, compiles every module's bytecode into a cache
in the run's temporary folder (never into the tree), so each figure is a
start with its bytecode cached, as an installed package's is. The rounds
interleave the commands, so each ratio compares figures taken under the
same load; the JSON keeps the 1-minute load average around the rounds.
The markers are polled every millisecond (this tool polls; the commands
under test do not). Nothing here is a test.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LAYERS = ("walqueue-format", "walqueue-engine", "walqueue-cli")
_GIVE_UP = 60.0
_STATS = b'{"id":1,"op":"stats"}\n'

_HANDLER = "def touch(job, context):\n    open(job.payload['marker'], 'w').close()\n"
_HUEY = """
from huey import SqliteHuey
huey = SqliteHuey(name="startup", filename={db!r}, fsync=True, results=False)

@huey.task()
def touch(marker):
    open(marker, "w").close()
"""


def _env(tree: Path, extra: Path) -> dict[str, str]:
    """The commands' environment: the tree's packages first; bytecode cached in a folder of `extra`, not the tree."""
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # a start that compiles every module is no one's real start
    env["PYTHONPYCACHEPREFIX"] = str(extra / "pycache")
    paths = [str(tree / "packages" / layer / "src") for layer in LAYERS] + [str(extra)]
    env["PYTHONPATH"] = os.pathsep.join(paths)
    return env


def _wait(condition: Callable[[], bool], what: str) -> None:
    give_up = time.monotonic() + _GIVE_UP
    while not condition():
        if time.monotonic() > give_up:
            raise RuntimeError(f"startup: {what} did not happen in {_GIVE_UP:.0f} s")
        time.sleep(0.001)


def _stop(process: subprocess.Popen[bytes]) -> None:
    """Stop the command as an operator would (SIGTERM to it alone), then whatever of its session outlived it."""
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(60)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
    try:
        os.killpg(process.pid, signal.SIGKILL)  # what outlived its parent (huey's forked workers)
    except ProcessLookupError:
        pass


def run_exit(command: list[str], env: dict[str, str], request: bytes = b"") -> float:
    start = time.perf_counter()
    subprocess.run(command, env=env, input=request, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    return time.perf_counter() - start


def serve(place: Path, env: dict[str, str]) -> float:
    import socket

    store, sock = place / "serve-q", place / "serve.sock"
    shutil.rmtree(store, ignore_errors=True)
    command = [sys.executable, "-m", "walqueue.serve", str(store), "--socket", str(sock)]
    start = time.perf_counter()
    process = subprocess.Popen(
        command, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, start_new_session=True
    )
    try:
        assert process.stdout is not None and b"listening" in process.stdout.readline()
        with socket.socket(socket.AF_UNIX) as client:
            client.connect(str(sock))
            client.sendall(_STATS)
            answer = client.makefile("rb").readline()
        elapsed = time.perf_counter() - start
        assert b'"ok":true' in answer, answer
        return elapsed
    finally:
        _stop(process)


def _first_task(command: list[str], place: Path, env: dict[str, str], marker: Path, what: str) -> float:
    """Launch `command` in `place`; the seconds until its first task's handler has created `marker`."""
    start = time.perf_counter()
    process = subprocess.Popen(
        command, env=env, cwd=place, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, start_new_session=True
    )
    try:
        _wait(marker.exists, what)
        return time.perf_counter() - start
    finally:
        _stop(process)


def worker(place: Path, env: dict[str, str], start_method: str | None) -> float:
    store, marker = place / "worker-q", place / "worker.done"
    shutil.rmtree(store, ignore_errors=True)
    marker.unlink(missing_ok=True)
    put = f"from walqueue import Queue\nwith Queue({str(store)!r}) as q:\n    q.put('a', {{'marker': {str(marker)!r}}})"
    subprocess.run([sys.executable, "-c", put], env=env, check=True)
    command = [sys.executable, "-m", "walqueue.worker", str(store), "startup_handler:touch", "--processes", "4"]
    command += ["--log-level", "WARNING", "--summary", "0"]
    command += [] if start_method is None else ["--start-method", start_method]
    return _first_task(command, place, env, marker, f"walqueue-worker's first task ({start_method or 'default'})")


def huey(place: Path, env: dict[str, str]) -> float:
    db, marker = place / "huey.db", place / "huey.done"
    for path in (db, marker):
        path.unlink(missing_ok=True)
    enqueue = f"import startup_huey\nstartup_huey.touch({str(marker)!r})\n"
    subprocess.run([sys.executable, "-c", enqueue], env=env, cwd=place, check=True)
    command = [sys.executable, "-m", "huey.bin.huey_consumer", "startup_huey.huey", "-w", "4", "-k", "process", "-q"]
    return _first_task(command, place, env, marker, "huey's first task")


def _measures(place: Path, env: dict[str, str], tree: Path) -> dict[str, Callable[[], float]]:
    """What one round measures, by name, in the order the round runs them."""
    fsck_store = place / "fsck-q"
    make_store = f"from walqueue import Queue; Queue({str(fsck_store)!r}).close()"
    subprocess.run([sys.executable, "-c", make_store], env=env, check=True)
    measures: dict[str, Callable[[], float]] = {
        "bare": lambda: run_exit([sys.executable, "-c", "pass"], env),
        "serve": lambda: serve(place, env),
        "walqueue": lambda: run_exit([sys.executable, "-m", "walqueue.cli", str(fsck_store)], env, _STATS),
        "fsck": lambda: run_exit([sys.executable, "-m", "walqueue.format.fsck", str(fsck_store)], env),
        "worker_4": lambda: worker(place, env, None),
    }
    supervisor = tree / "packages" / "walqueue-cli" / "src" / "walqueue" / "worker" / "supervisor.py"
    if "START_METHODS" in supervisor.read_text():  # a tree with --start-method: the fresh interpreters too
        measures["worker_4_spawn"] = lambda: worker(place, env, "spawn")
    try:
        import huey as _  # type: ignore[import-untyped, import-not-found, unused-ignore]  # noqa: F401
    except ImportError:
        return measures
    measures["huey_4"] = lambda: huey(place, env)
    return measures


def _commit(tree: Path) -> str:
    """The tree's commit (``+`` if its working tree differs), or ``?`` outside a git checkout."""
    try:
        head = subprocess.run(["git", "-C", str(tree), "rev-parse", "--short", "HEAD"], capture_output=True, check=True)
        dirty = subprocess.run(["git", "-C", str(tree), "status", "--porcelain", "--", "packages"], capture_output=True)
    except (OSError, subprocess.CalledProcessError):
        return "?"
    return head.stdout.decode().strip() + ("+" if dirty.stdout.strip() else "")


_ROWS = {
    "bare": ("bare interpreter exit (`python -c pass`)", "", "floor"),
    "serve": ("walqueue-serve: first answer", "serve_vs_bare", "<= 8x bare"),
    "walqueue": ("walqueue DIR: one stats line answered, exit", "", ""),
    "fsck": ("walqueue-fsck DIR: exit", "", ""),
    "worker_4": ("walqueue-worker --processes 4: first task done", "worker_4_vs_huey_4", "<= 2x huey"),
    "worker_4_spawn": ("the same, `--start-method spawn`", "worker_4_spawn_vs_huey_4", ""),
    "huey_4": ("huey_consumer -w 4 -k process: first task done", "", "peer"),
}


def markdown(paths: list[Path]) -> str:
    """PERFORMANCE §12.4's table from runs' JSON files: a column per run, each median with its ratio to its peer."""
    runs = [json.loads(path.read_text()) for path in paths]
    heads = [
        f"{run.get('commit', '?')} (Python {run['python']}, load {statistics.median(run.get('load_1min', [0])):.1f})"
        for run in runs
    ]
    lines = [f"| launch to | {' | '.join(heads)} | target |", "|---|" + "---:|" * len(runs) + "---|"]
    for name, (label, ratio, target) in _ROWS.items():
        cells = []
        for run in runs:
            median = run["median_s"].get(name)
            against = run["ratios"].get(ratio)
            cell = "" if median is None else f"{median * 1000:.1f} ms"
            cells.append(cell if against is None else f"{cell} ({against:.2f}x)")
        lines.append(f"| {label} | {' | '.join(cells)} | {target} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--tree", type=Path, default=ROOT, help="measure this tree's packages/ (e.g. a git archive)")
    parser.add_argument("--commit", help="the commit of --tree when it is not a git checkout (a git archive)")
    parser.add_argument(
        "--markdown", type=Path, nargs="+", metavar="JSON", help="print the table of these runs, run nothing"
    )
    arguments = parser.parse_args(argv)
    if arguments.markdown:
        print(markdown(arguments.markdown))
        return 0
    loads: list[float] = [os.getloadavg()[0]]
    with tempfile.TemporaryDirectory(prefix="walqueue-startup-") as tmp:
        place = Path(tmp)
        env = _env(arguments.tree, place)
        (place / "startup_handler.py").write_text(_HANDLER)
        (place / "startup_huey.py").write_text(_HUEY.format(db=str(place / "huey.db")))
        measures = _measures(place, env, arguments.tree)
        for measure in measures.values():
            measure()  # the warm-up round, not counted: every command's bytecode is compiled and cached by then
        samples: dict[str, list[float]] = {name: [] for name in measures}
        for _ in range(arguments.rounds):
            for name, measure in measures.items():
                samples[name].append(measure())
            loads.append(os.getloadavg()[0])
    medians = {name: statistics.median(values) for name, values in samples.items()}
    ratios = {"serve_vs_bare": medians["serve"] / medians["bare"]}
    for name in ("worker_4", "worker_4_spawn"):
        if name in medians and "huey_4" in medians:
            ratios[f"{name}_vs_huey_4"] = medians[name] / medians["huey_4"]
    for name, value in medians.items():
        print(f"{name:14} {value * 1000:8.1f} ms   {' '.join(f'{v * 1000:.0f}' for v in samples[name])}")
    for name, ratio in ratios.items():
        print(f"{name:28} {ratio:6.2f}x")
    print(f"load average (1 min) before and after each round: {' '.join(f'{load:.1f}' for load in loads)}")
    if arguments.json:
        result = {
            "python": sys.version.split()[0],
            "tree": str(arguments.tree),
            "commit": arguments.commit or _commit(arguments.tree),
            "load_1min": loads,
            "samples_s": samples,
            "median_s": medians,
            "ratios": ratios,
        }
        arguments.json.write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
