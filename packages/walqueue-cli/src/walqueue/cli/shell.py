"""`walqueue --socket PATH [VERB ...]`: a shell for a queue that walqueue-serve owns.

Why: while walqueue-serve owns a directory, ``walqueue DIR`` gets
`DirectoryLocked`, and an operator has no way in. With ``--socket`` the
consumer speaks the very same JSON lines to the running server instead
(each line sent as it is, each answer written back as it came), and a few
verbs do the usual chores from a shell script:

  dead [--group G] [--limit N] [--format text|json|ids]
        the dead letters with their last errors (text: one tab-separated line each)
  redrive [--available-at T] [--extra-attempts N] TASK_ID... | -
  cancel TASK_ID... | -        (``-``: the ids are read from stdin, one a line)
  stats                        the server's stats() as one JSON object
  metrics                      the server's metrics() as one JSON object (counters, gauges, histograms)
  backup status                the replicator's state as one JSON object (walqueue-serve --replicate)
  queues                       every queue: settings, counts by status, oldest ready time (JSON)
  pause QUEUE / resume QUEUE   stop a queue's leases (it still takes puts) / start them again
  limit QUEUE [--concurrency N|none] [--rate N/W|none]
                               a queue's limits (none: no limit; an omitted one is unchanged)
  put TASK_ID PAYLOAD [--key K] [--available-at T] [--put-at T] ...
                               one task, stamped with now as its put time (cli/shellput.py)

so that ``walqueue --socket S dead --group G --format ids | walqueue --socket S redrive -``
redrives one error group. The same verbs work on a directory, ``walqueue DIR
stats``: on the opened queue when nobody owns it (never creating it), and
through the owner's socket when a walqueue-serve owns it (its owner note in
LOCK names the socket), so that both forms behave alike.
"""

from __future__ import annotations

import argparse
import enum
import json
import math
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, BinaryIO, TextIO

from walqueue import QueueClosed, WrongStatus
from walqueue.cli.shellput import add_put_parser, check_put, run_put
from walqueue.engine.validate import check_queue_name
from walqueue.format import cmdline
from walqueue.format.cmdline import EX_USAGE, EXIT_INTERRUPTED, UsageParser, interrupted, silence_stdout, version_line
from walqueue.protocol.requests import request_lines

if TYPE_CHECKING:  # the socket is imported for --socket only: `walqueue DIR` never opens one
    import socket

__all__ = ["VERBS", "ShellExit", "main", "wants_directory_verb", "wants_shell"]

#: The operator verbs; also taken after a directory (``walqueue DIR stats``), with the same behaviour.
VERBS = ("dead", "redrive", "cancel", "stats", "metrics", "queues", "pause", "resume", "limit", "put")


class ShellExit(enum.IntEnum):
    """The shell's exit statuses, one table: the code returns them and ``--help`` prints them from here.

    The shell opens no queue, so its table is its own (2 and 3 are about its
    connection, not `EXIT_CANNOT_OPEN`); 0 and 1 are the shared `EXIT_OK` and
    `EXIT_FATAL` of `walqueue.format.cmdline`. `SOME_REFUSED` is 1 too, an
    alias of `FATAL` (the verb tells the two apart: only the relay can meet a
    Fatal answer). A usage error exits with the shared `EX_USAGE` (64) and
    Ctrl-C with `EXIT_INTERRUPTED` (130). Being ints, the members are what
    `main` returns and what a calling shell sees.
    """

    #: Done (relay: the end of the input).
    OK = cmdline.EXIT_OK
    #: relay: a Fatal answer was relayed (the server's queue was poisoned).
    FATAL = cmdline.EXIT_FATAL
    #: redrive/cancel: at least one task was refused (WrongStatus, a bad id); the others were done.
    SOME_REFUSED = 1
    #: The server could not be reached (no socket, nobody listening, permission denied).
    CANNOT_CONNECT = 2
    #: The connection was lost, or the server answered something this shell cannot read.
    CONNECTION_LOST = 3
    #: Its reader closed stdout (``walqueue ... dead | head -1``): stopped quietly, as a Unix tool killed
    #: by SIGPIPE ends (128 + 13), so that ``set -o pipefail`` sees it as it sees ``yes | head -1``.
    OUTPUT_CLOSED = 141
    #: backup status: the server replicates nowhere (started without --replicate).
    NO_REPLICA = 4
    #: backup status: the backup is broken or stopped (the status is printed all the same).
    BACKUP_BROKEN = 5


_EPILOG = f"""\
without a verb, the shell relays JSON lines: each request line read from
stdin goes to the server as it is, and its answer comes back on stdout (the
protocol of `walqueue DIRECTORY --help`, served by the process that owns
the directory).

dead --format: text (default) prints "TASK_ID<TAB>ATTEMPTS<TAB>ERROR" per
line (ERROR is "-" when none was recorded); json prints one JSON object a
line (task_id, attempts, max_attempts, payload_excerpt, last_error, group);
ids prints the task ids alone, ready to be piped into redrive - or cancel -.

exit status:
  {ShellExit.OK:<5}done (relay: end of input)
  {ShellExit.FATAL:<5}relay: a Fatal answer was relayed;
       redrive/cancel: at least one task was refused (reported on stderr),
       every other one was done; put: the put was refused (a key conflict)
  {ShellExit.CANNOT_CONNECT:<5}the server could not be reached at PATH (is walqueue-serve running?)
  {ShellExit.CONNECTION_LOST:<5}the connection was lost, or the server's answer could not be read
  {ShellExit.NO_REPLICA:<5}backup status: the server replicates nowhere (no --replicate)
  {ShellExit.BACKUP_BROKEN:<5}backup status: the backup is broken or stopped (its status is printed)
  {EX_USAGE:<5}usage error
  {EXIT_INTERRUPTED:<5}interrupted by Ctrl-C
  {ShellExit.OUTPUT_CLOSED:<5}stdout was closed by its reader (`| head -1`): stopped quietly, as
       a Unix tool killed by SIGPIPE (128 + 13)
"""


def wants_shell(argv: Sequence[str]) -> bool:
    """Whether this command line is for the shell (it names ``--socket``) rather than a directory."""
    return any(arg == "--socket" or arg.startswith("--socket=") for arg in argv)


class _Unreachable(Exception):
    """The server cannot be reached."""


class _Lost(Exception):
    """The connection broke, or an answer made no sense."""


class _OutputClosed(Exception):
    """Whoever read stdout went away: not the server's fault, and nothing to report."""


def _write(out: TextIO | BinaryIO, data: Any, *, flush: bool = False) -> None:
    """Write to stdout; a closed pipe becomes `_OutputClosed` (never a lost connection)."""
    try:
        out.write(data)
        if flush:
            out.flush()
    except BrokenPipeError:
        raise _OutputClosed from None


def _finite_seconds(text: str) -> float:
    """An argparse type: a finite number of seconds > 0 (``-1``, ``nan`` and ``inf`` are usage errors)."""
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"expected a finite number of seconds > 0, not {text!r}")
    return value


def _limit(text: str) -> int:
    """An argparse type: a whole number >= 0."""
    if not (text.isascii() and text.isdigit()):
        raise argparse.ArgumentTypeError(f"expected a whole number >= 0, not {text!r}")
    return int(text)


def _parser(on_directory: bool = False) -> argparse.ArgumentParser:
    parser = UsageParser(
        prog="walqueue DIRECTORY" if on_directory else "walqueue",
        description="Talk to a queue served by walqueue-serve, over its Unix socket"
        + (" (or to DIRECTORY itself: the same verbs, through its server if one owns it)." if on_directory else "."),
        epilog=_EPILOG,
    )
    if not on_directory:
        parser.add_argument("--socket", required=True, metavar="PATH", help="the socket walqueue-serve listens on")
    else:
        parser.set_defaults(socket=None)
    parser.add_argument(
        "--timeout",
        type=_finite_seconds,
        default=60.0,
        metavar="SECONDS",
        help="how long a verb's call may take (default 60)",
    )
    parser.add_argument("--version", action="version", version=version_line("walqueue"))
    verbs = parser.add_subparsers(dest="verb", metavar="VERB", required=on_directory)
    dead = verbs.add_parser("dead", help="list the dead letters with their last errors")
    dead.add_argument("--group", help="only this error group (its id, as the dashboard shows it)")
    dead.add_argument("--limit", type=_limit, default=None, help="at most this many (default: all)")
    dead.add_argument("--format", choices=("text", "json", "ids"), default="text")
    redrive = verbs.add_parser("redrive", help="make dead tasks ready again")
    redrive.add_argument(
        "--available-at",
        type=int,
        default=None,
        metavar="T",
        help="when they become due, in seconds since the epoch (default: now); sent in the store's clock unit",
    )
    redrive.add_argument("--extra-attempts", type=int, default=1, metavar="N")
    redrive.add_argument("task_ids", nargs="+", metavar="TASK_ID", help="task ids, or - to read them from stdin")
    cancel = verbs.add_parser("cancel", help="make ready or leased tasks dead")
    cancel.add_argument("task_ids", nargs="+", metavar="TASK_ID", help="task ids, or - to read them from stdin")
    verbs.add_parser("stats", help="print the server's stats() as JSON")
    verbs.add_parser("metrics", help="print the server's metrics() as JSON")
    backup = verbs.add_parser("backup", help="the continuous backup: `backup status` prints its state as JSON")
    backup.add_argument("action", choices=["status"])
    verbs.add_parser("queues", help="print every queue's settings and counts as JSON")
    add_put_parser(verbs)
    for verb, what in (("pause", "stop a queue's leases (it still takes puts)"), ("resume", "lease again")):
        verbs.add_parser(verb, help=what).add_argument("queue", metavar="QUEUE")
    limit = verbs.add_parser("limit", help="set or clear a queue's concurrency and rate limits")
    limit.add_argument("queue", metavar="QUEUE")
    limit.add_argument(
        "--concurrency", type=_concurrency, default=_NOT_GIVEN, metavar="N|none", help="at most N leased at once"
    )
    limit.add_argument(
        "--rate", type=_rate, default=_NOT_GIVEN, metavar="N/W|none", help="at most N leases per W time units"
    )
    return parser


_NOT_GIVEN: Any = object()


def _concurrency(text: str) -> int | None:
    if text == "none":
        return None
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"must be an integer >= 1 or none, not {text!r}")
    return int(text)


def _rate(text: str) -> list[int] | None:
    if text == "none":
        return None
    n, slash, window = text.partition("/")
    if not (slash and n.isdigit() and window.isdigit() and int(n) >= 1 and int(window) >= 1):
        raise argparse.ArgumentTypeError(f"must be N/W (two integers >= 1, e.g. 10/1) or none, not {text!r}")
    return [int(n), int(window)]


def _settings(arguments: argparse.Namespace) -> dict[str, Any]:
    """The configure_queue call of a pause, resume or limit verb (its queue name checked as the engine does)."""
    if arguments.verb in ("pause", "resume"):
        return {"paused": arguments.verb == "pause"}
    settings = {name: value for name, value in (("concurrency", arguments.concurrency), ("rate", arguments.rate))}
    return {name: value for name, value in settings.items() if value is not _NOT_GIVEN}


def _connect(path: str) -> socket.socket:
    import socket

    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(path)
    except OSError as error:
        sock.close()
        raise _Unreachable(f"cannot reach walqueue-serve at {path}: {error.strerror or error}") from None
    return sock


def relay(sock: socket.socket, requests: BinaryIO, answers: BinaryIO) -> int:
    """Send each non-blank line of `requests` and write its answer line; stop after a Fatal answer."""
    incoming = sock.makefile("rb")
    for line in request_lines(requests, answers):
        try:
            sock.sendall(bytes(line) if line.endswith(b"\n") else bytes(line) + b"\n")
            answer = incoming.readline()
        except OSError as error:
            raise _Lost(f"the connection to the server broke: {error}") from None
        if not answer.endswith(b"\n"):
            raise _Lost("the server closed the connection before answering")
        _write(answers, answer, flush=True)
        if _is_fatal(answer):
            return ShellExit.FATAL
    return ShellExit.OK


def _is_fatal(answer: bytes) -> bool:
    try:
        value = json.loads(answer)
    except ValueError:
        raise _Lost("the server's answer is not JSON") from None
    return isinstance(value, dict) and value.get("error") == "Fatal"


def _ids(task_ids: Sequence[str], stdin: TextIO) -> Iterable[str]:
    for task_id in task_ids:
        if task_id == "-":
            yield from (line.rstrip("\n") for line in stdin if line.strip())
        else:
            yield task_id


def _change(client: Any, verb: str, arguments: argparse.Namespace, stdin: TextIO) -> int:
    refused = 0
    from walqueue.protocol.storeclock import now_in, store_units

    available_at = getattr(arguments, "available_at", None)
    if verb == "redrive":  # the store's unit (walqueue.engine.clockunit), never seconds by assumption
        units = store_units(client)
        available_at = now_in(units) if available_at is None else available_at * units
    for task_id in _ids(arguments.task_ids, stdin):
        try:
            if verb == "redrive":
                client.redrive(task_id, available_at=available_at, extra_attempts=arguments.extra_attempts)
            else:
                client.cancel(task_id)
        except (WrongStatus, ValueError, TypeError) as error:
            refused += 1
            print(f"walqueue: {verb} {task_id!r} refused: {error}", file=sys.stderr)
    return ShellExit.SOME_REFUSED if refused else ShellExit.OK


def _dead(client: Any, arguments: argparse.Namespace, out: TextIO) -> int:
    from walqueue.dashboard.source import Source, error_of, group_id, task_view

    source = Source(client)
    now = source.now(time.time())
    after: str | None = None
    left = arguments.limit
    while left is None or left > 0:
        page = source.page("dead", after, 500)
        for task in page.tasks:
            if arguments.group is not None and group_id(error_of(task)) != arguments.group:
                continue
            _print_dead(task_view(task, now), arguments.format, out)
            if left is not None:
                left -= 1
                if left == 0:
                    break
        if page.next_after is None:
            break
        after = page.next_after
    return ShellExit.OK


def _print_dead(view: dict[str, Any], form: str, out: TextIO) -> None:
    if form == "ids":
        _write(out, view["task_id"] + "\n")
    elif form == "json":
        keys = ("task_id", "attempts", "max_attempts", "payload_excerpt", "last_error", "group")
        _write(out, json.dumps({key: view[key] for key in keys}, ensure_ascii=False) + "\n")
    else:
        error = view["last_error"]
        text = "-" if error is None else f"{error.get('type', '')}: {error.get('message', '')}"
        flat = " ".join(text.split())  # one line per task, whatever the message holds
        _write(out, f"{view['task_id']}\t{view['attempts']}\t{flat}\n")


def _read(path: str, op: str, timeout: float) -> Any:
    """One read call sent as its JSON line (``stats``, ``metrics``), and its answer's field of the same name."""
    with _connect(path) as sock:
        sock.settimeout(timeout)
        try:
            sock.sendall(json.dumps({"op": op}).encode() + b"\n")
            line = sock.makefile("rb").readline()
        except OSError as error:
            raise _Lost(f"the connection to the server broke: {error}") from None
    try:
        answer = json.loads(line)
    except ValueError:
        raise _Lost("the server closed the connection before answering") from None
    if not isinstance(answer, dict) or answer.get("ok") is not True or op not in answer:
        message = answer.get("message") if isinstance(answer, dict) else None
        raise _Lost(f"the server refused {op}: {message or answer!r} (a server without it?)")
    return answer[op]


def _backup_status(metrics: Any, out: TextIO) -> int:
    replica = metrics.get("replica") if isinstance(metrics, dict) else None
    if replica is None:
        print("walqueue: this server replicates nowhere (start walqueue-serve with --replicate URL)", file=sys.stderr)
        return ShellExit.NO_REPLICA
    _write(out, json.dumps(replica, sort_keys=True) + "\n", flush=True)
    return ShellExit.BACKUP_BROKEN if replica.get("state") in ("broken", "stopped") else ShellExit.OK


def _run_verb(client: Any, arguments: argparse.Namespace, read: Callable[[str], Any]) -> int:
    """One verb over `client` (a `Client`, or a `Queue` for ``walqueue DIR VERB``); `read` answers stats/metrics."""
    if arguments.verb in ("redrive", "cancel"):
        return _change(client, arguments.verb, arguments, sys.stdin)
    if arguments.verb == "put":
        return ShellExit.OK if run_put(client, arguments) else ShellExit.SOME_REFUSED
    if arguments.verb == "backup":
        return _backup_status(read("metrics"), sys.stdout)
    if arguments.verb in ("pause", "resume", "limit"):
        client.configure_queue(arguments.queue, **_settings(arguments))
        return ShellExit.OK
    if arguments.verb == "dead":
        status = _dead(client, arguments, sys.stdout)
        _write(sys.stdout, "", flush=True)
        return status
    _write(sys.stdout, json.dumps(read(arguments.verb), sort_keys=True) + "\n", flush=True)
    return ShellExit.OK


def _verb(arguments: argparse.Namespace) -> int:
    from walqueue.client import Client

    _connect(arguments.socket).close()  # unreachable: say so now, as exit 2, before any change
    with Client(arguments.socket, timeout=arguments.timeout, reconnect_seconds=0) as client:
        try:
            return _run_verb(client, arguments, lambda op: _read(arguments.socket, op, arguments.timeout))
        except (ConnectionError, TimeoutError, QueueClosed) as error:
            raise _Lost(str(error)) from None


def _read_queue(queue: Any, op: str) -> Any:
    """A read call answered by the protocol over an opened queue: the very JSON walqueue-serve would send."""
    from walqueue.protocol.requests import respond

    return respond(json.dumps({"op": op}), queue).answer[op]


def _directory_verb(directory: str, arguments: argparse.Namespace) -> int:
    """``walqueue DIR VERB``: the verb on the opened directory, or through its walqueue-serve if one owns it."""
    from walqueue import CorruptStore, DirectoryLocked, Queue

    try:
        queue = Queue(directory, sync=True, create=False)
    except DirectoryLocked as error:
        if error.socket_path is None:
            raise _Unreachable(
                f"cannot open {directory}: {error} (stop its owner, or use its server's --socket)"
            ) from None
        arguments.socket = error.socket_path  # a walqueue-serve owns it: the same verb through its socket
        return _verb(arguments)
    except (CorruptStore, OSError) as error:
        raise _Unreachable(f"cannot open {directory}: {type(error).__name__}: {error}") from None
    with queue:
        return _run_verb(queue, arguments, lambda op: _read_queue(queue, op))


def wants_directory_verb(argv: Sequence[str]) -> bool:
    """Whether this command line is ``walqueue DIR VERB ...`` (a verb on a directory, not the line consumer)."""
    return len(argv) >= 2 and not argv[0].startswith("-") and argv[1] in VERBS


def main(argv: Sequence[str] | None = None, *, directory: str | None = None) -> int:
    """Run the shell (on ``--socket PATH``, or on `directory`: ``walqueue DIR VERB``); returns the exit status."""
    parser = _parser(directory is not None)
    arguments = parser.parse_args(argv)
    if arguments.verb in ("pause", "resume", "limit"):
        try:
            check_queue_name(arguments.queue, "QUEUE")
        except (TypeError, ValueError) as error:
            parser.error(str(error))  # exit 64, before any connection
        if arguments.verb == "limit" and arguments.concurrency is _NOT_GIVEN and arguments.rate is _NOT_GIVEN:
            parser.error("limit needs --concurrency, --rate or both")
    if arguments.verb == "put":
        try:
            check_put(arguments)
        except (TypeError, ValueError) as error:
            parser.error(str(error))  # exit 64, before any connection
    if arguments.socket is not None:
        from walqueue.protocol.exchange import socket_address

        arguments.socket = socket_address(arguments.socket)  # once: a later chdir must not move it
    try:
        if directory is not None:
            return _directory_verb(directory, arguments)
        if arguments.verb is None:
            assert arguments.socket is not None  # required without a directory
            with _connect(arguments.socket) as sock:
                return relay(sock, sys.stdin.buffer, sys.stdout.buffer)
        return _verb(arguments)
    except KeyboardInterrupt:
        return interrupted("walqueue")
    except _Unreachable as error:
        print(f"walqueue: {error}", file=sys.stderr)
        return ShellExit.CANNOT_CONNECT
    except _Lost as error:
        print(f"walqueue: {error}; check walqueue-serve's log, then retry", file=sys.stderr)
        return ShellExit.CONNECTION_LOST
    except _OutputClosed:
        silence_stdout()
        return ShellExit.OUTPUT_CLOSED
