"""The shell's `put` verb: one task from the command line, stamped with its put time (DECISIONS §46).

``walqueue --socket S put TASK_ID '{"to": "ada"}'`` (or ``walqueue DIR put
...``) puts one task and prints its id. Times on the command line are
seconds since the epoch, as `redrive --available-at` takes them, and are
sent in the store's clock unit. Unless ``--put-at`` says otherwise, the
put carries now as its put time when the store records its unit (as the
clients stamp, walqueue.protocol.putclock): the task then ages from now.
Every argument is checked by the engine's rules before anything is sent,
and a bad one is a usage error (exit 64) that writes nothing.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from walqueue import KeyConflict
from walqueue.engine.clockunit import store_unit
from walqueue.engine.ops import put_op
from walqueue.format.canonical import parse_json
from walqueue.protocol.storeclock import now_in

__all__ = ["add_put_parser", "check_put", "run_put"]


def _payload(text: str) -> Any:
    try:
        return parse_json(text.encode())
    except ValueError as error:
        raise argparse.ArgumentTypeError(f"must be a JSON object, not {text[:80]!r} ({error})") from None


def _seconds(text: str) -> int:
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"must be an integer >= 0 (seconds since the epoch), not {text!r}")
    return int(text)


def add_put_parser(verbs: Any) -> None:
    """The `put` verb's arguments, on the shell's subparsers."""
    put = verbs.add_parser("put", help="put one task (stamped with now as its put time); prints its id")
    put.add_argument("task_id", metavar="TASK_ID")
    put.add_argument("payload", type=_payload, metavar="PAYLOAD", help="a JSON object")
    put.add_argument("--key", default=None, help="its idempotency key (default: the task id)")
    put.add_argument("--available-at", type=_seconds, default=0, metavar="T", help="due at T (seconds since epoch)")
    put.add_argument("--max-attempts", type=int, default=3, metavar="N")
    put.add_argument("--queue", default="default", metavar="QUEUE")
    put.add_argument("--priority", type=int, default=0, metavar="P")
    put.add_argument(
        "--put-at",
        type=_seconds,
        default=None,
        metavar="T",
        help="its put time (seconds since epoch; default: now, when the store records its clock unit; 0: none)",
    )


def _options(arguments: argparse.Namespace, units: int) -> dict[str, Any]:
    options: dict[str, Any] = {"key": arguments.key, "max_attempts": arguments.max_attempts}
    options.update(queue=arguments.queue, priority=arguments.priority)
    options["available_at"] = arguments.available_at * units
    if arguments.put_at is not None:
        options["put_at"] = arguments.put_at * units
    return options


def check_put(arguments: argparse.Namespace) -> None:
    """Every argument by `Queue.put`'s own rules (`TypeError`/`ValueError` naming it), before any connection."""
    put_op(arguments.task_id, arguments.payload, build=False, **_options(arguments, 1))


def run_put(client: Any, arguments: argparse.Namespace) -> bool:
    """Put the task through `client` (a `Client`, or the opened `Queue`); False for a conflict or a refusal."""
    recorded = dict(client.stats()).get("clock")
    options = _options(arguments, store_unit(recorded))
    if "put_at" not in options and recorded is not None:
        options["put_at"] = now_in(recorded)
    try:
        print(client.put(arguments.task_id, arguments.payload, **options), flush=True)
    except (KeyConflict, ValueError, TypeError) as error:
        print(f"walqueue: put {arguments.task_id!r} refused: {error}", file=sys.stderr)
        return False
    return True
