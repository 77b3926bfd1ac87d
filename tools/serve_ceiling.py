#!/usr/bin/env python3
"""How fast could eight processes put through one server on this machine? The ceiling of bench (j)'s 3x target.

    python tools/serve_ceiling.py                  3 rounds of 2,400 durable puts per configuration
    python tools/serve_ceiling.py --puts 4800 --rounds 5

Bench (j) compares walqueue-serve with `Client` in 8 processes against
SQLite in 8 processes. When the ratio falls short, this splits the gap in
the same minutes, with the same payloads, each configuration in turn in
every round:

- ``sqlite_8``: bench (j)'s SQLite peer (WAL, synchronous=FULL), 8 processes;
- ``serve_8_client``: walqueue-serve, 8 processes calling `Client.put` (bench (j));
- ``serve_8_raw``: walqueue-serve, 8 processes writing pre-built request
  lines to the socket and reading the answer line (no client library: what
  the server alone allows);
- ``minimal_8_raw``: the same raw clients against a minimal group-commit
  loop in the spirit of the issue's throwaway experiment: each turn reads
  every complete line of every ready connection, writes one length- and
  SHA-256-framed canonical JSON record per request to a file, runs one
  fsync, then answers. No validation, no state, no recovery: an upper bound
  for any server in Python on this machine, not a queue.

Printed: puts/s per configuration and round, the median ratio of each to
``sqlite_8``, requests per fsync where known, and the CPU of the server and
of the clients per put. One line of JSON at the end (``--json FILE`` writes
it too). Nothing here is a test and no figure is a target.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import multiprocessing
import os
import selectors
import shutil
import socket
import statistics
import struct
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench.harness import payload, run_forked  # noqa: E402  # the bench's own payloads and process runner
from bench.server_processes import _Served, open_for_processes  # noqa: E402

from walqueue.client import Client  # noqa: E402

PROCESSES = 8


# -- the minimal loop: group commit and nothing else ------------------------------------------


def _minimal_loop(socket_path: str, log_path: str, ready: Any, stop: Any, turns_out: Any) -> None:
    """Serve put lines until `stop` is set: per turn, every ready line, their frames, one fsync, the answers."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(socket_path)
    listener.listen(64)
    listener.setblocking(False)
    selector = selectors.DefaultSelector()
    selector.register(listener, selectors.EVENT_READ, None)
    log = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    buffers: dict[socket.socket, bytes] = {}
    turns = requests = 0
    ready.set()
    while not stop.is_set():
        frames: list[bytes] = []
        answers: list[tuple[socket.socket, bytes]] = []
        for key, _ in selector.select(0.05):
            if key.data is None:
                connection, _ = listener.accept()
                connection.setblocking(False)
                selector.register(connection, selectors.EVENT_READ, connection)
                buffers[connection] = b""
                continue
            connection = key.data
            data = connection.recv(65536)
            if not data:
                selector.unregister(connection)
                connection.close()
                del buffers[connection]
                continue
            *lines, buffers[connection] = (buffers[connection] + data).split(b"\n")
            for line in lines:
                request = json.loads(line)
                body = json.dumps(
                    {"op": "put", "task": request["task_id"], "payload": request["payload"]},
                    sort_keys=True,
                    separators=(",", ":"),
                    ensure_ascii=False,
                ).encode()
                frames.append(struct.pack(">I", len(body)) + hashlib.sha256(body).digest() + body)
                answers.append((connection, b'{"ok":true,"task_id":%s}\n' % json.dumps(request["task_id"]).encode()))
        if frames:
            os.write(log, b"".join(frames))
            os.fsync(log)
            turns += 1
            requests += len(frames)
            for connection, answer in answers:
                connection.sendall(answer)
    turns_out.put((turns, requests))
    os.close(log)


# -- the clients ---------------------------------------------------------------------------


def _raw_client(socket_path: str, prefix: str, count: int, barrier: Any, results: Any) -> None:
    """Puts as pre-built lines on a bare socket: the least CPU a client can spend per put."""
    lines = [
        json.dumps({"op": "put", "task_id": f"{prefix}-{i}", "payload": payload(i)}).encode() + b"\n"
        for i in range(count)
    ]
    connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    connection.connect(socket_path)
    barrier.wait()
    cpu, start = os.times(), time.perf_counter()
    pending = b""
    for line in lines:
        connection.sendall(line)
        while b"\n" not in pending:
            pending += connection.recv(65536)
        answer, pending = pending.split(b"\n", 1)
        if b'"ok":true' not in answer:
            raise RuntimeError(f"refused: {answer[:200]!r}")
    end, spent = time.perf_counter(), os.times()
    results.put((start, end, spent.user + spent.system - cpu.user - cpu.system))
    connection.close()


def _library_client(kind: str, target: str, prefix: str, count: int, barrier: Any, results: Any) -> None:
    """Puts through `Client` or SQLite, as bench (j)'s processes make them."""
    backend = open_for_processes(kind, target)
    payloads = [payload(i) for i in range(count)]
    barrier.wait()
    cpu, start = os.times(), time.perf_counter()
    for i in range(count):
        backend.put(f"{prefix}-{i}", payloads[i])
    end, spent = time.perf_counter(), os.times()
    results.put((start, end, spent.user + spent.system - cpu.user - cpu.system))
    backend.close()


def _run(client: Callable[..., None], args: tuple[Any, ...], puts: int) -> tuple[float, float]:
    """(puts/s, the clients' CPU seconds) for `puts` split over 8 forked processes."""
    spans = run_forked(client, args, PROCESSES, puts // PROCESSES)
    seconds = max(span[1] for span in spans) - min(span[0] for span in spans)
    return puts / seconds, sum(span[2] for span in spans)


def _process_cpu(pid: int) -> tuple[float, float]:
    """The user and system CPU seconds of process `pid` so far (/proc/PID/stat)."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / ticks, int(fields[12]) / ticks


def _server_figures(before: tuple[float, float], after: tuple[float, float], puts: int) -> dict[str, float]:
    user, system = after[0] - before[0], after[1] - before[1]
    return {
        "server_cpu_us": (user + system) / puts * 1e6,
        "server_user_us": user / puts * 1e6,
        "server_system_us": system / puts * 1e6,
    }


def one_round(place: Path, puts: int) -> dict[str, dict[str, float]]:
    figures: dict[str, dict[str, float]] = {}

    target = str(place / "sqlite.db")
    open_for_processes("sqlite", target).close()  # its tables before 8 processes race to make them
    rate, client_cpu = _run(_library_client, ("sqlite", target), puts)
    figures["sqlite_8"] = {"puts_per_s": rate, "clients_cpu_us": client_cpu / puts * 1e6}

    for name, client in (("serve_8_client", "client"), ("serve_8_raw", "raw")):
        served = _Served(place / name)
        try:
            with Client(served.socket_path) as probe:
                fsyncs_before = probe.metrics()["counters"]["fsyncs"]
                before = _process_cpu(served.process.pid)
                if client == "client":
                    rate, client_cpu = _run(_library_client, ("serve", served.socket_path), puts)
                else:
                    rate, client_cpu = _run(_raw_client, (served.socket_path,), puts)
                after = _process_cpu(served.process.pid)
                fsyncs = probe.metrics()["counters"]["fsyncs"] - fsyncs_before
        finally:
            served.stop()
        figures[name] = {
            "puts_per_s": rate,
            **_server_figures(before, after, puts),
            "clients_cpu_us": client_cpu / puts * 1e6,
            "puts_per_fsync": puts / max(fsyncs, 1),
        }

    socket_dir = tempfile.mkdtemp(prefix="wq-ceiling-", dir="/tmp")
    context = multiprocessing.get_context("fork")
    ready, stop, turns_out = context.Event(), context.Event(), context.Queue()
    loop = context.Process(
        target=_minimal_loop, args=(f"{socket_dir}/s", str(place / "minimal.log"), ready, stop, turns_out)
    )
    loop.start()
    try:
        ready.wait(30)
        assert loop.pid is not None
        before = _process_cpu(loop.pid)
        rate, client_cpu = _run(_raw_client, (f"{socket_dir}/s",), puts)
        after = _process_cpu(loop.pid)
        stop.set()
        turns, requests = turns_out.get(timeout=30)
    finally:
        stop.set()
        loop.join(30)
        shutil.rmtree(socket_dir, ignore_errors=True)
    figures["minimal_8_raw"] = {
        "puts_per_s": rate,
        **_server_figures(before, after, puts),
        "clients_cpu_us": client_cpu / puts * 1e6,
        "puts_per_fsync": requests / max(turns, 1),
    }
    return figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--puts", type=int, default=2400, help="durable puts per configuration and round")
    parser.add_argument("--rounds", type=int, default=3, help="rounds (each runs every configuration once)")
    parser.add_argument("--json", type=Path, help="also write the summary to this file")
    options = parser.parse_args(argv)
    rounds: list[dict[str, dict[str, float]]] = []
    load = os.getloadavg()
    for number in range(options.rounds):
        place = Path(tempfile.mkdtemp(prefix="wq-ceiling-"))
        try:
            figures = one_round(place, options.puts)
        finally:
            shutil.rmtree(place, ignore_errors=True)
        rounds.append(figures)
        text = ", ".join(f"{name} {values['puts_per_s']:,.0f}/s" for name, values in figures.items())
        print(f"round {number + 1}: {text}", flush=True)
    summary: dict[str, Any] = {"load_at_start": load, "puts": options.puts, "rounds": rounds, "medians": {}}
    for name in rounds[0]:
        medians = {key: statistics.median(r[name][key] for r in rounds) for key in rounds[0][name]}
        medians["vs_sqlite_8"] = statistics.median(r[name]["puts_per_s"] / r["sqlite_8"]["puts_per_s"] for r in rounds)
        summary["medians"][name] = medians
        shown = ", ".join(f"{key} {value:,.2f}" for key, value in medians.items())
        print(f"{name}: {shown}")
    line = json.dumps(summary)
    print(line)
    if options.json:
        options.json.write_text(line + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
