"""walqueue-restore: restore a replica into a new directory, verify a replica, apply retention."""

from __future__ import annotations

import argparse
import datetime
import re
import sys
import tempfile
import time

from walqueue.backup.layout import ChainError
from walqueue.backup.restore import TargetExists, execute, make_plan, prune
from walqueue.backup.settings import duration
from walqueue.backup.stores import StoreUnavailable, UsageError, open_store
from walqueue.format.cmdline import EX_USAGE, EXIT_INTERRUPTED, UsageParser, interrupted, version_line

__all__ = ["duration", "main"]

PROG = "walqueue-restore"
EXIT_OK = 0
#: --verify: the restored store fails fsck, or stops short of the replica's head.
EXIT_VERIFY_FAILED = 1
#: The replica cannot give what was asked: a gap (named), a damaged object, no snapshot early enough.
EXIT_CHAIN = 65
#: The object store did not answer (after retries): try again later.
EXIT_UNAVAILABLE = 69
#: The target exists and is not empty: a restore never overwrites.
EXIT_TARGET_EXISTS = 73
#: The new store could not be written (a missing parent, permissions, a full disk): nothing is left there.
EXIT_CANNOT_WRITE = 74

EPILOG = f"""\
examples:
  {PROG} s3://bucket/queue /srv/queue.restored
  {PROG} file:///backups/queue /srv/q --to-time 2026-12-06T01:00:00Z --dry-run
  {PROG} --verify s3://bucket/queue
  {PROG} --retain 7d s3://bucket/queue

--to-time T means: every transaction whose log object the replicator had
uploaded at or before T (by its clock, recorded in each object). T is an
ISO 8601 time (UTC unless it names a zone) or seconds since the epoch.

exit statuses:
  {EXIT_OK}   done (or, with --dry-run, the plan printed)
  {EXIT_VERIFY_FAILED}   --verify: the restored copy fails fsck or stops short of the replica's head
  {EXIT_CHAIN}  the replica cannot give it: a gap (named), a damaged object, no snapshot early enough
  {EXIT_UNAVAILABLE}  the object store did not answer; try again
  {EXIT_TARGET_EXISTS}  the target exists and is not empty: choose a new directory
  {EXIT_CANNOT_WRITE}  the new store could not be written (missing parent, permissions, disk full)
  {EX_USAGE}  usage error
  {EXIT_INTERRUPTED} interrupted by Ctrl-C
"""


def _parser() -> UsageParser:
    parser = UsageParser(prog=PROG, description="Restore a WALQueue replica into a new store directory.", epilog=EPILOG)
    parser.add_argument("url", help="the replica: file:///path or s3://bucket/prefix")
    parser.add_argument("directory", nargs="?", help="the new store's directory (must not exist, or be empty)")
    target = parser.add_mutually_exclusive_group()
    target.add_argument("--to-seq", type=_seq, metavar="N", help="restore through transaction N")
    target.add_argument("--to-time", type=_time, metavar="T", help="restore what was uploaded at or before T")
    parser.add_argument("--dry-run", action="store_true", help="print the plan, write nothing")
    parser.add_argument("--verify", action="store_true", help="restore into a temporary directory, fsck it, compare")
    parser.add_argument("--retain", type=duration, metavar="AGE", help="delete what no snapshot newer than AGE needs")
    parser.add_argument("--endpoint", help="the S3 endpoint (default: AWS_ENDPOINT_URL)")
    parser.add_argument("--region", help="the S3 region (default: AWS_REGION)")
    parser.add_argument("--version", action="version", version=version_line(PROG))
    return parser


def _seq(text: str) -> int:
    if not text.isdigit():
        raise ValueError(text)
    return int(text)


def _time(text: str) -> float:
    if re.fullmatch(r"[0-9]+(\.[0-9]+)?", text):
        return float(text)
    moment = datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=datetime.UTC)
    return moment.timestamp()


#: What each failure prints (after the program's name) and the status it exits with, in the order tried.
_FAILURES: tuple[tuple[type[Exception], int, str], ...] = (
    (ChainError, EXIT_CHAIN, "{exc}"),
    (StoreUnavailable, EXIT_UNAVAILABLE, "the object store did not answer: {exc}; try again"),
    (TargetExists, EXIT_TARGET_EXISTS, "{exc}"),
    (OSError, EXIT_CANNOT_WRITE, "cannot write the new store: {exc}; nothing was left at the target"),
)


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    modes = sum(bool(x) for x in (args.verify, args.retain is not None, args.directory is not None))
    if modes != 1:
        parser.error("give exactly one of: a DIRECTORY to restore into, --verify, --retain AGE")
    try:
        return _run(args)
    except UsageError as exc:
        parser.error(str(exc))
    except KeyboardInterrupt:
        return interrupted(PROG)
    except tuple(kind for kind, _, _ in _FAILURES) as exc:
        status, message = next((status, message) for kind, status, message in _FAILURES if isinstance(exc, kind))
        print(f"{PROG}: {message.format(exc=exc)}", file=sys.stderr)
        return status


def _run(args: argparse.Namespace) -> int:
    store = open_store(args.url, endpoint=args.endpoint, region=args.region, create=False)
    if args.retain is not None:
        deleted = prune(store, args.retain, time.time(), dry_run=args.dry_run)
        for key in deleted:
            print(("would delete " if args.dry_run else "deleted ") + key)
        return EXIT_OK
    plan = make_plan(store, to_seq=args.to_seq, to_time=args.to_time)
    if args.dry_run or args.verify:
        for line in plan.describe():
            print(line)
    if args.verify:
        return _verify(store, plan)
    if not args.dry_run:
        execute(store, plan, args.directory)
        print(f"restored {args.url} through transaction {plan.target} into {args.directory}")
    return EXIT_OK


def _verify(store: object, plan: object) -> int:
    from walqueue import Queue
    from walqueue.backup.restore import Plan
    from walqueue.format.fsck import check

    assert isinstance(plan, Plan)
    with tempfile.TemporaryDirectory(prefix="walqueue-verify-") as scratch:
        target = f"{scratch}/store"
        execute(store, plan, target)  # type: ignore[arg-type]
        report = check(target)
        if not report.sound:
            print(f"{PROG}: the restored copy fails fsck: {report.status}", file=sys.stderr)
            return EXIT_VERIFY_FAILED
        with Queue(target, create=False) as queue:
            last = queue.last_seq
    if last != plan.head:
        print(f"{PROG}: the restored copy ends at {last}, the replica's head is {plan.head}", file=sys.stderr)
        return EXIT_VERIFY_FAILED
    print(f"verified: the replica restores through transaction {last}, and fsck finds it sound")
    return EXIT_OK


if __name__ == "__main__":
    raise SystemExit(main())
