"""The consumer process: `python -m walqueue.cli DIRECTORY` (script `walqueue`).

This module only moves bytes and picks exit codes; what a line means and what
its answer says is `walqueue.protocol.requests`. It is meant to be driven as a
co-process through pipes, so it reads with `readline` on the binary stream
(no read-ahead waits for more input than one line) and flushes every answer
before reading the next request.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence
from typing import BinaryIO

from walqueue import CorruptStore, DirectoryLocked, Queue
from walqueue.cli import shell
from walqueue.engine.validate import MAX_NAME_BYTES, MAX_PAYLOAD_DEPTH
from walqueue.format.cmdline import (
    EX_USAGE,
    EXIT_CANNOT_OPEN,
    EXIT_FATAL,
    EXIT_INTERRUPTED,
    EXIT_OK,
    UsageParser,
    interrupted,
    silence_stdout,
    version_line,
)
from walqueue.protocol.calltable import CALLS
from walqueue.protocol.requests import (
    MAX_DEPTH,
    MAX_LINE_BYTES,
    QueueLike,
    encode_answer,
    request_lines,
    respond,
)

EXIT_USAGE = EX_USAGE

_DESCRIPTION = """\
Serve a WALQueue directory over JSON lines: one request per line on stdin,
one answer per line on stdout, flushed at once, in order. The queue is opened
with sync=True (every transaction is fsynced before it is answered).
`walqueue --socket PATH` speaks the same lines to a queue that walqueue-serve
owns, and has operator verbs: dead [--group G] [--limit N] [--format
text|json|ids], redrive [--available-at T] [--extra-attempts N] TASK_ID...,
cancel TASK_ID..., stats, metrics (see `walqueue --socket PATH --help`).
`walqueue DIRECTORY VERB ...` runs the same verbs on DIRECTORY (through its
walqueue-serve when one owns it).
"""


def _op_table() -> str:
    """The ops, their arguments (optional ones with ``?``) and answer fields: derived from the table of calls."""
    rows = [("op", "arguments", "answer field")]
    rows += [(call.name, call.usage(), call.answer.field or "-") for call in CALLS.values()]
    width = [max(len(row[column]) for row in rows) + 2 for column in range(2)]
    lines = []
    for index, (name, usage, answer) in enumerate(rows):
        lines.append(f"  {name:<{width[0]}}{usage:<{width[1]}}{answer}".rstrip())
        if index:
            lines.append(f"  {'':<{width[0]}}{CALLS[name].summary}")
    return "\n".join(lines)


_EPILOG = f"""\
requests:
  A request is a JSON object with "op", the Python API's argument names, and
  an optional "id" that is echoed in the answer, whatever JSON value it is.

{_op_table()}

  A lease object needs only "task_id", "worker" and "generation"; "deadline",
  "attempts" and "payload" may be left out (they are type-checked if sent).
  stats holds counts, last_seq, snapshot_seq, wal_bytes, segments,
  next_available_at and next_deadline (null when no task is ready / leased).
  wait answers committed=true once another client commits a transaction;
  this consumer is its queue's only client, so here it sleeps the timeout
  out and answers false (walqueue-serve wakes it for real).

  Every value follows the Python API's own rules: times and counters are
  integers in [0, 2**63) (1.0 and true are not integers); a payload is a
  JSON object nested at most {MAX_PAYLOAD_DEPTH} levels deep; a task id, key or worker
  is a non-empty string of at most {MAX_NAME_BYTES} UTF-8 bytes. Unknown fields,
  duplicate fields, numbers out of the range of a double and lines nested
  deeper than {MAX_DEPTH} levels are refused. Blank lines are skipped.

answers:
  success  {{"ok": true, ...fields}}
  failure  {{"ok": false, "error": NAME, "message": TEXT}}
    BadRequest   not JSON, not an object, unknown op, missing, unknown or
                 ill-typed argument; nothing was changed
    KeyConflict  the key or task id is taken by another request; nothing changed
    StaleLease   the lease no longer owns its task; nothing changed
    WrongStatus  redrive of a task that is not dead, cancel of one that is not
                 ready or leased, or of an unknown task; nothing changed
    Fatal        an I/O error poisoned the queue (or another unexpected failure
                 left its state in doubt); the consumer exits with 1
  After BadRequest, KeyConflict, StaleLease and WrongStatus the consumer reads
  the next line.

example session (> is stdin, < is stdout; L stands for the lease object
{{"task_id":"t1","worker":"w","generation":1,"deadline":130,"attempts":1,"payload":{{"n":1}}}}
that answer 2 returned, sent back as it came):
  > {{"op": "put", "task_id": "t1", "payload": {{"n": 1}}, "id": 1}}
  < {{"id":1,"ok":true,"task_id":"t1"}}
  > {{"op": "reserve", "worker": "w", "now": 100, "lease_seconds": 30, "id": 2}}
  < {{"id":2,"ok":true,"leases":[L]}}
  > {{"op": "ack", "lease": L, "now": 110, "id": 3}}
  < {{"id":3,"ok":true}}
  > {{"op": "ack", "lease": L, "now": 111, "id": "again"}}
  < {{"id":"again","ok":false,"error":"StaleLease","message":"..."}}
  > [1, 2]
  < {{"ok":false,"error":"BadRequest","message":"a request must be a JSON object, not an array"}}

exit status:
  0    end of input (the queue is closed cleanly)
  1    a Fatal answer was written, or stdout was closed by the reader
  2    DIRECTORY could not be opened (corrupt, locked by another owner, or not
       a directory); reported on stderr before any request is read
  {EX_USAGE}   usage error: an unknown option, a missing or extra argument
  {EXIT_INTERRUPTED}  interrupted by Ctrl-C (SIGINT); the queue is closed, every answered
       request is durable, and no traceback is printed
"""


def _argument_parser() -> argparse.ArgumentParser:
    parser = UsageParser(
        prog="walqueue",
        description=_DESCRIPTION,
        epilog=_EPILOG,
    )
    parser.add_argument(
        "directory", metavar="DIRECTORY", help="the queue directory (created if missing, unless --no-create)"
    )
    parser.add_argument(
        "--no-create",
        dest="create",
        action="store_false",
        help="refuse a missing DIRECTORY (exit 2, nothing created) instead of creating an empty queue",
    )
    parser.add_argument("--version", action="version", version=version_line("walqueue"))
    return parser


def serve(queue: QueueLike, requests: BinaryIO, answers: BinaryIO, *, line_limit: int = MAX_LINE_BYTES) -> int:
    """Answer every non-blank line of `requests` until end of input or a fatal error.

    A line longer than `line_limit` bytes is answered `BadRequest` as soon as
    that many bytes of it were read; the rest of it is discarded unread.
    `wait` sleeps its timeout out and answers committed=false: this consumer
    is the queue's only client, so nothing else can commit meanwhile.
    """
    for line in request_lines(requests, answers, line_limit):
        reply = respond(line, queue)
        answers.write(encode_answer(reply.answer))
        answers.flush()
        if reply.fatal:
            return EXIT_FATAL
    return EXIT_OK


class _StderrWarnings(logging.Handler):
    """WARNING and above of the `walqueue` logger on the current stderr, as walqueue-serve logs them.

    Opening cuts a torn tail with a WARNING; the library logs nowhere by
    default (a NullHandler), so without this the consumer cut it silently.
    """

    def emit(self, record: logging.LogRecord) -> None:
        try:
            print(f"walqueue: {record.levelname}: {record.getMessage()}", file=sys.stderr, flush=True)
        except (OSError, ValueError):
            pass


def _log_warnings() -> None:
    logger = logging.getLogger("walqueue")
    if not any(not isinstance(handler, logging.NullHandler) for handler in logger.handlers):
        logger.addHandler(_StderrWarnings(logging.WARNING))


def main(argv: Sequence[str] | None = None) -> int:
    """Run the consumer; returns the exit status instead of exiting."""
    given = sys.argv[1:] if argv is None else list(argv)
    if shell.wants_shell(given):
        return shell.main(argv)  # a queue another process serves: walqueue --socket PATH --help
    if shell.wants_directory_verb(given):
        return shell.main(given[1:], directory=given[0])  # walqueue DIR stats: the shell's verbs on DIR
    arguments = _argument_parser().parse_args(argv)
    _log_warnings()
    try:
        queue = Queue(arguments.directory, sync=True, create=arguments.create)
    except KeyboardInterrupt:
        return interrupted("walqueue")
    except (CorruptStore, DirectoryLocked, OSError) as error:
        # OSError: e.g. DIRECTORY is a regular file, or cannot be created.
        print(f"walqueue: cannot open {arguments.directory}: {type(error).__name__}: {error}", file=sys.stderr)
        return EXIT_CANNOT_OPEN
    try:
        return serve(queue, sys.stdin.buffer, sys.stdout.buffer)
    except KeyboardInterrupt:
        # Ctrl-C: every answered request is already durable; close and stop quietly.
        return interrupted("walqueue")
    except BrokenPipeError:
        # The reader went away: nobody can receive answers any more. Stop
        # quietly; the queue is closed below and nothing is lost, since
        # every answered transaction was already durable.
        silence_stdout()
        print("walqueue: stdout was closed; stopping", file=sys.stderr)
        return EXIT_FATAL
    finally:
        queue.close()


if __name__ == "__main__":
    raise SystemExit(main())
