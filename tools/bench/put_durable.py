"""put_durable (alias a): durable single puts, against SQLite, the fsync floor and the preallocated floor."""

from __future__ import annotations

from typing import Any

from .figures import backends_block, figure, per_op, speed_ratio
from .harness import DURABLE_BACKENDS, Context, opened, warm_puts
from .inputs import PAYLOAD_BYTES, puts
from .timing import interleave, put_chunk

#: Sizes at each scale (with the run's `reps` unless set here): `ctx.scale` during the run.
SCALES: dict[str, dict[str, int]] = {
    "tiny": {"chunk": 3},
    "default": {"chunk": 12},
    "big": {"chunk": 30},
}


def run(ctx: Context) -> dict[str, Any]:
    s = ctx.scale
    k = s["chunk"]
    with opened(ctx, "a", DURABLE_BACKENDS, durable=True) as backends:
        for backend in backends.values():
            warm_puts(backend, "warm")
        inputs = [puts("a", rep * k, k) for rep in range(s["reps"])]
        times = interleave({name: put_chunk(b, inputs) for name, b in backends.items()}, s["reps"])
    per = per_op(times, k, "wall")
    return {
        "title": "durable single puts",
        "clock": "wall",
        "params": {"ops_per_chunk": k, "reps": s["reps"], "payload_bytes": PAYLOAD_BYTES},
        "backends": backends_block(times, k, "wall"),
        "ratios": {
            "walqueue_vs_sqlite": figure(speed_ratio(per, "walqueue", "sqlite"), "x", target=(">=", 1.2)),
            "walqueue_vs_floor": figure(speed_ratio(per, "walqueue", "floor"), "x", target=(">=", 0.9)),
            "walqueue_vs_prealloc": figure(speed_ratio(per, "walqueue", "prealloc"), "x", target=(">=", 0.85)),
            "prealloc_vs_floor": figure(
                speed_ratio(per, "prealloc", "floor"),
                "x",
                note="information: a frame pwritten into preallocated room and fdatasynced, against an append + fsync",
            ),
        },
    }
