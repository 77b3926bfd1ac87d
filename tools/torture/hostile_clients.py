"""Campaign ``hostile-clients``: the bad-input campaign's lines over the socket, some
split into small writes, among junk connections: every answer is the
in-process protocol's.
"""

from __future__ import annotations

import json
import random
import shutil
import time
from collections.abc import Callable
from typing import Any

from harness import seeded, units

from model import view
from walqueue import (
    Lease,
    Queue,
)

from .bad_input import cli_line, foreign_tokens, mirror
from .harness import Report
from .hostile import short
from .served import HOSTILE_LINES_PER_UNIT, ServedQueue, served_scratch


def campaign_hostile_clients(seed: int, budget: float, report: Report) -> None:
    """The CLI's bad-input corpus over the socket: each answer is the in-process protocol's, none harms another.

    Hostile lines (the generator of the bad-input campaign) go to a server
    over several connections, some split into many small writes; between
    them, junk connections send random bytes or half a line and hang up.
    Each answer must equal `respond(line)` on a copy of the store in this
    process (messages aside), and the served state must equal the copy's.
    """
    from walqueue.protocol.requests import is_blank, respond

    deadline = time.monotonic() + budget
    with served_scratch("torture-hostile-") as (root, sockets):
        for unit in units(lambda: time.monotonic() >= deadline):
            rng = seeded("hostile-clients", seed, unit)
            where = f"--seed {seed} hostile-clients unit {unit}"
            served_dir, local_dir = root / f"served{unit}", root / f"local{unit}"
            foreign = foreign_tokens(root / f"other{unit}")
            with Queue(served_dir, sync=False) as seeding:
                seeding.put_many([{"task_id": f"b{i}", "payload": {"n": i}} for i in range(1, 4)])
                seeding.reserve("w1", now=0, lease_seconds=1000)
            shutil.copytree(served_dir, local_dir)
            server = ServedQueue(served_dir, f"{sockets}/s{unit}")
            try:
                with Queue(local_dir, sync=False) as local:
                    _hostile_unit(rng, server.socket_path, local, foreign, is_blank, respond, report, where)
                    expected = view(local)
                if server.stop() != 0:
                    report.diverge(f"{where}: SIGTERM did not exit 0")
                with Queue(served_dir, sync=False) as reopened:
                    if view(reopened) != expected:
                        report.diverge(f"{where}: the served state differs from the in-process one")
            finally:
                server.kill()


def _hostile_unit(
    rng: random.Random,
    socket_path: str,
    local: Queue,
    foreign: list[Lease],
    is_blank: Callable[[bytes], bool],
    respond: Callable[..., Any],
    report: Report,
    where: str,
) -> None:
    import socket

    def connect() -> tuple[socket.socket, Any]:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(60)
        sock.connect(socket_path)
        return sock, sock.makefile("rb")

    connections = [connect() for _ in range(3)]
    for serial in range(HOSTILE_LINES_PER_UNIT):
        if rng.random() < 0.1:  # a junk connection: random bytes or half a line, then gone
            junk, _ = connect()
            junk.sendall(bytes(rng.randrange(256) for _ in range(rng.randrange(1, 200))).replace(b"\n", b""))
            junk.close()
            report.count("junk connections")
        line = cli_line(rng, mirror(local), foreign, serial)
        if is_blank(line):
            continue
        sock, answers = rng.choice(connections)
        data = line + b"\n"
        if rng.random() < 0.3:
            cuts = sorted(rng.sample(range(1, len(data)), min(len(data) - 1, 4))) if len(data) > 1 else []
            for start, end in zip([0, *cuts], [*cuts, len(data)], strict=True):
                sock.sendall(data[start:end])
        else:
            sock.sendall(data)
        raw = answers.readline()
        report.count("socket lines")
        if not raw.endswith(b"\n"):
            report.diverge(f"{where} line {serial} {short(line)}: the connection closed without an answer")
            return
        got = json.loads(raw)
        own = json.loads(json.dumps(respond(line, local).answer))
        got.pop("message", None)
        own.pop("message", None)
        if got != own:
            report.diverge(f"{where} line {serial} {short(line)}: served {short(got)}, in-process {short(own)}")
            return
        if not got.get("ok"):
            report.count("refused")
        report.count("socket lines agreed")
    for sock, answers in connections:
        answers.close()
        sock.close()
