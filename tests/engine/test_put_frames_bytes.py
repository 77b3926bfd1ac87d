"""The put path after its CPU was cut (DECISIONS §43): the same bytes as before, and the same ready order.

`frames_e8a61b1/put_frames.bin` is what e8a61b1 wrote for the calls of
`put_frames_calls.run` (puts and put_manys, with and without keys, times,
attempts and lanes fields, retries that write nothing): the WAL's frames,
then the snapshot of the result. Regenerate it only from a tree whose bytes
are the reference (``python3.12 tests/engine/put_frames_calls.py OUT STORE``
with that tree's packages on PYTHONPATH), never from the tree under test.
"""

from __future__ import annotations

from pathlib import Path

from put_frames_calls import make

GOLDEN = Path(__file__).parent / "frames_e8a61b1" / "put_frames.bin"


def test_puts_and_put_manys_write_the_frames_and_snapshot_of_e8a61b1(tmp_path: Path) -> None:
    written = make(tmp_path / "store")
    golden = GOLDEN.read_bytes()
    if written != golden:
        first = next((i for i, (a, b) in enumerate(zip(written, golden, strict=False)) if a != b), None)
        at = min(len(written), len(golden)) if first is None else first
        raise AssertionError(
            f"the put path wrote other bytes than e8a61b1 from offset {at} "
            f"(now {written[at : at + 80]!r}, then {golden[at : at + 80]!r}; sizes {len(written)}, {len(golden)})"
        )


def test_a_put_many_into_a_filled_default_lane_leases_in_order_and_keeps_every_index(tmp_path: Path) -> None:
    """The bulk insert of a transaction's new ready tasks: pushed into a larger heap, heapified into a smaller one."""
    from walqueue import Queue

    with Queue(tmp_path / "q", sync=False, compact_bytes=None) as queue:
        queue.put_many([{"task_id": f"b-{n:03d}", "payload": {}, "available_at": n} for n in range(50, 0, -1)])
        queue._state.check_invariants()
        queue.put_many([{"task_id": f"a-{n:03d}", "payload": {}, "available_at": 25} for n in range(3)])
        queue.put("z", {}, available_at=0)
        queue.put_many(
            [{"task_id": "c", "payload": {}, "available_at": 0}, {"task_id": "d", "payload": {}, "queue": "other"}]
        )
        queue._state.check_invariants()
        leased = [lease.task_id for lease in queue.reserve("w", now=100, lease_seconds=9, limit=60, queues=["default"])]
        expected = ["c", "z", *(f"b-{n:03d}" for n in range(1, 25)), "a-000", "a-001", "a-002", "b-025"]
        assert leased[:30] == expected
        assert len(leased) == 55
        queue._state.check_invariants()
