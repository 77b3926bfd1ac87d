"""WALQueue against SQLite and the fsync floor: one process, interleaved, ratios per repetition.

    python tools/bench                          default scale (about 5 minutes on 2 cores)
    python tools/bench --scale big              the big figures (10-15 minutes)
    python tools/bench --scale tiny             every workload in seconds (the smoke test)
    python tools/bench --json out.json          also write every figure as JSON
    python tools/bench --only put_durable,d     run some workloads only (names or letters)
    python tools/bench --dir /some/disk         where the stores go (default: the system temp dir)
    python tools/bench --list                   the workloads, their letters and what they measure

(or ``python -m bench ...`` with tools/ on sys.path). Each workload is one
module of this package, named for what it measures; `registry.WORKLOADS`
lists them in order with the letter each had before they had names (the CLI
accepts both). Adding a workload is a module (its `SCALES` and its `run`) and
one row in the registry.

Backends (`backends.py` has the two baselines):
  walqueue  the real `walqueue.Queue`; sync=True for durable workloads, sync=False for CPU ones.
  sqlite    the standard library's sqlite3 implementing the same semantics (WAL journal,
            synchronous=FULL when durable, OFF otherwise).
  floor     one frame per commit (length, canonical JSON, SHA-256) + os.write (+ os.fsync):
            the least any WAL queue can do. In group_commit_threads, shared by threads under
            one lock: one writer, one fsync per operation (a queue without group commit).
In reserve_ack_durable only, three more timed members that store nothing, two writes and
syncs per cycle:
  sync_append_fsync       append + fsync, as every append-only log (the floor, walqueue)
  sync_append_fdatasync   append + fdatasync
  sync_inplace_fdatasync  overwrite in place + fdatasync, as SQLite's WAL at its working size
In put_many_durable only, two more timed members that store nothing:
  rules_sqlite    the baseline's validation, canonical JSON and identity hash of every item
                  (what SqliteQueue.put_many does before its executemany).
  rules_walqueue  walqueue's own `put_ops_from_mappings` of the items (what
                  Queue.put_many does before planning and writing).
and one more walqueue, walqueue_keys_unsorted, whose payloads have their keys in reverse
order (none in canonical order already: the same work without the key-order shortcut).

Method: every backend is set up and warmed up first; then each repetition runs
one timed chunk per backend, the order rotating (A B C, B C A, C A B, ...), so
that a shared machine's drift hits every backend alike. A ratio is computed
within each repetition, from chunks that ran seconds apart, and the median of
those per-repetition ratios is reported, with their min..max. Absolute times
are machine-specific; ratios are the figures to compare. Nothing here is a
test: targets are printed as met / NOT MET, never asserted.

Importing this package makes `walqueue` importable (from an install if there
is one, else from this checkout's three src directories), so every module of
it may import walqueue at its top.
"""

from __future__ import annotations

from harness import ROOT, setup_path

__all__ = ["ROOT"]

setup_path()
