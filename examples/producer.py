"""A producer with idempotent retries.

    python examples/producer.py DIRECTORY

A producer that cannot tell whether its last `put` reached the queue (the
answer was lost, the process died right after the write) sends the very same
request again. Same `task_id`, `key`, `payload`, `available_at` and
`max_attempts`: the queue returns the task id and writes nothing, whatever
became of the task in between (a completed or dead task is never created
again). The same key with anything else is a `KeyConflict`.

What this script does, on a new directory:

1. puts three e-mail tasks, each under a key derived from the order number;
   the answer to the second one is "lost" (simulated) and the put is retried:
   the retry returns the same task id and `last_seq` does not move;
2. puts three invoice tasks in one all-or-nothing `put_many`, then sends the
   whole batch again: nothing is written;
3. shows two conflicts: the key of order 1001 with another payload, and a new
   key with a task id that exists.

It leaves 6 ready tasks at sequence 4. Running it again writes nothing: every
put is then an identical retry. Exits 0.
"""

from __future__ import annotations

import sys
from pathlib import Path

try:
    from walqueue import KeyConflict, Queue
except ImportError:  # not installed: run from a checkout
    for _name in [name for name in sys.modules if name == "walqueue" or name.startswith("walqueue.")]:
        del sys.modules[_name]
    _packages = Path(__file__).resolve().parent.parent / "packages"
    sys.path[:0] = [str(_packages / dist / "src") for dist in ("walqueue-format", "walqueue-engine", "walqueue-cli")]
    from walqueue import KeyConflict, Queue

ORDERS = {
    1001: "ada@example.org",
    1002: "bob@example.org",
    1003: "eve@example.org",
}


class LostAnswer(Exception):
    """Stands for a timeout or a crash between the put and the producer noting its success."""


def put_with_retries(
    queue: Queue,
    task_id: str,
    payload: dict[str, object],
    *,
    key: str,
    lose_first_answer: bool = False,
    tries: int = 3,
) -> str:
    """Put a task, retrying the identical request until an answer comes back."""
    for attempt in range(1, tries + 1):
        before = queue.last_seq
        try:
            result = queue.put(task_id, payload, key=key)
            if lose_first_answer and attempt == 1:
                raise LostAnswer("the answer was lost on its way back")
        except LostAnswer as lost:
            print(f"  {task_id}: attempt {attempt}: {lost}; last_seq is now {queue.last_seq}; retrying")
            continue
        wrote = "1 transaction" if queue.last_seq > before else "nothing (an identical retry)"
        print(f"  {task_id}: attempt {attempt}: ok, wrote {wrote}; last_seq {queue.last_seq}")
        return result
    raise RuntimeError(f"{task_id}: no answer after {tries} tries")


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(f"usage: {argv[0]} DIRECTORY", file=sys.stderr)
        return 2
    with Queue(argv[1]) as queue:
        print(f"opened {argv[1]}: last_seq {queue.last_seq}")

        print("1. e-mails, one put each, keyed by order:")
        for order, address in ORDERS.items():
            put_with_retries(
                queue,
                f"email-{order}",
                {"order": order, "to": address, "template": "order-confirmed"},
                key=f"order:{order}:confirmation-email",
                lose_first_answer=order == 1002,
            )

        print("2. invoices, one put_many (all or nothing), sent twice:")
        batch = [
            {"task_id": f"invoice-{order}", "key": f"order:{order}:invoice", "payload": {"order": order}}
            for order in ORDERS
        ]
        for sending in ("first", "again"):
            before = queue.last_seq
            task_ids = queue.put_many(batch)
            wrote = "1 transaction" if queue.last_seq > before else "nothing"
            print(f"  {sending}: {task_ids}, wrote {wrote}; last_seq {queue.last_seq}")

        print("3. conflicts (nothing is written):")
        try:
            queue.put(
                "email-1001",
                {"order": 1001, "to": "mallory@example.org", "template": "order-confirmed"},
                key="order:1001:confirmation-email",
            )
        except KeyConflict as conflict:
            print(f"  same key, other payload: KeyConflict: {conflict}")
        try:
            queue.put("email-1001", {"order": 1001}, key="order:1001:reminder")
        except KeyConflict as conflict:
            print(f"  new key, existing task id: KeyConflict: {conflict}")

        stats = queue.stats()
        print(f"done: counts {stats['counts']}, last_seq {stats['last_seq']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
