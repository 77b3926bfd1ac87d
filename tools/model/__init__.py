"""A deliberately simple reference model of the queue's semantics (CONTRACT §2).

`Model` answers every call the way `walqueue.Queue` must, with plain dicts and
linear scans, no disk and no cleverness, so that it can be read against the
contract (docs/CONTRACT.md) sentence by sentence. Tests run the same program against a `Queue` and a
`Model` and compare results, errors and states.

The model counts transactions exactly as the contract does, so `last_seq` is
comparable too:

- a `put`/`put_many` that creates tasks is one transaction; identical retries
  (and an empty `put_many`) are none;
- `reserve` is an optional reap transaction (split only where one frame would
  exceed the 16 MiB bound) followed by an optional lease transaction;
- a successful `ack`/`release`/`extend`/`redrive`/`cancel` is one
  transaction; every failure is none.

Public API (stable; crash campaigns and the torture harness import it):

- `Model()` with `put`, `put_many`, `reserve`, `ack`, `release`, `fail`, `give_back`, `extend`,
  `redrive`, `cancel` (the lease lifecycle calls), `get`, `tasks`, `counts()`,
  `next_available_at()`, `next_deadline()` (the two lifecycle keys of
  `stats()`), `last_seq` (property), `clone()` and `reap(now)` (the
  reap half of `reserve`, for the state between its two transactions); `compact()` and
  restarts do not change the model. `copy.deepcopy(model)` works as well.
- `view(queue_or_model)`: a comparable, exact view of the whole state
  (the two "when is work due" keys of `stats()` included).
- `render(value)`: an exact, comparable text of a call's result (`Task`,
  `Lease`, lists of them, ids, `None`), where `1`, `1.0` and `True` differ.
- `directory_digest(directory)` and `read_frames(path)`: small helpers for
  tests that look at the bytes a queue wrote.

Decisions the contract leaves to the implementation, taken here as the team
documented them: ints are `int` but never `bool`, with 0 <= x < 2**63
(outside: `ValueError`, wrong type: `TypeError`); names are non-empty `str`
of at most 1,024 UTF-8 bytes; payload nesting depth is at most 64 (the
payload object itself is level 1) and payload ints at most 14,000 bits; subclasses of
str/int/float/dict/list are refused with `TypeError`; a task is refused with `ValueError`
unless len(canonical payload) + len(canonical task id) + len(canonical key) +
8192 <= 16 MiB; a `Lease` whose `task_id`/`worker`/`generation` are ill-typed
is simply stale. Where a call has several problems the model reports argument
errors first, then conflicts/staleness.

The lease lifecycle calls, as the engine implements them: `extend` checks the token's type,
`now`, then `lease_seconds` (>= 1), then ownership exactly as `ack` does; the
new deadline is ``min(now + lease_seconds, 2**63 - 1)``. `redrive` checks
`available_at`, `extra_attempts` (>= 1), then `task_id` (a name), then the
task's status (`WrongStatus` unless dead), then that the grown
`max_attempts` stays below 2**63 (`ValueError`). `cancel` checks `task_id`,
then the status (`WrongStatus` unless ready or leased). A dead task may
therefore have attempts left (a cancelled one); a redriven one keeps its
attempts, generation, identity (its original put) and key.

The last error, as the engine implements it: `release`, `fail` (a
permanent failure: dead at once, fenced like `ack`) and `cancel` take
``error={"type": str, "message": str}``, checked before anything else
(not a mapping: `TypeError`; other keys: `ValueError`; a non-str value:
`TypeError`; an empty type: `ValueError`); a cancel with an error needs
`now` (`TypeError`). The type is cut to 256 and the message to 2,048 UTF-8
bytes, each ending in ``... [cut: N bytes]`` (N: the original size), after
lone surrogates are written as their ``\\udXXX`` escapes; if the error
would not fit beside a payload close to the frame bound, to 32 and 200
bytes. The task's `last_error` is then the type, the message, its attempts
at that moment and `now`, in the same transaction. An expiry records
``LeaseExpired`` with the attempt and the old deadline as its time. Every
transition but ack (which drops it) keeps the last error otherwise.

`give_back` (an unstarted lease returned) is fenced and checked as `ack`;
the lease is undone: the task is ready with its `available_at` and last
error as they were, `attempts` and `generation` one less.

The modules, one job each: rules.py (the argument checks and bounds),
state.py (what the model holds, its transactions, the store's clock),
puts.py, leases.py (the reap and the settles), lanes.py (reserve and a
queue's settings), results.py (complete and result), reads.py (the reads,
and `Model`, which is all of them); compare.py (`render`, `view`) and
files.py (a directory's bytes, special files). Import the names below
from `model`; the modules are the package's own.
"""

from __future__ import annotations

from .compare import render, view
from .files import SPECIAL_KINDS, directory_digest, nothing_written, place_special, read_frames, wal_bodies
from .reads import Model
from .rules import MAX_FRAME_BYTES, STATUSES

__all__ = [
    "MAX_FRAME_BYTES",
    "SPECIAL_KINDS",
    "STATUSES",
    "Model",
    "directory_digest",
    "nothing_written",
    "place_special",
    "read_frames",
    "render",
    "view",
    "wal_bodies",
]
