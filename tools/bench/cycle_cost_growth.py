"""cycle_cost_growth (alias f): how the cost of a reserve+ack cycle grows with the number of ready tasks."""

from __future__ import annotations

import gc
from typing import Any

from .figures import backends_block, figure, per_op, time_ratio
from .harness import Context, fill, open_backend, warm_cycles
from .timing import cycle_chunk, interleave

#: Sizes at each scale (with the run's `reps` unless set here): `ctx.scale` during the run.
SCALES: dict[str, dict[str, int]] = {
    "tiny": {"small": 100, "large": 2000, "chunk": 20},
    "default": {"small": 1000, "large": 20_000, "chunk": 60},
    "big": {"small": 10_000, "large": 200_000, "chunk": 500},
}


def run(ctx: Context) -> dict[str, Any]:
    s = ctx.scale
    small, large, k, reps = s["small"], s["large"], s["chunk"], s["reps"]
    if k * (reps + 1) >= small:
        raise SystemExit(f"scale error: cycle_cost_growth would drain the small queue ({k} x {reps + 1} >= {small})")
    opened: dict[str, Any] = {}
    try:
        for name in ("walqueue", "sqlite"):
            for size in (small, large):
                backend = open_backend(name, ctx.dir(f"f-{name}-{size}"), durable=False)
                opened[f"{name}_{size}"] = backend
                fill(backend, "f", size)
                warm_cycles(backend, k)
                ctx.log(f"cycle_cost_growth: {name} filled with {size} tasks")
        # All four stores are alive at once (that is what lets the chunks interleave). Freezing
        # them keeps the cyclic GC's full passes, which visit every live object in the process,
        # from charging the large store's objects to the small store's chunks.
        gc.collect()
        gc.freeze()
        times = interleave({name: cycle_chunk(b, k) for name, b in opened.items()}, reps)
    finally:
        gc.unfreeze()
        for backend in opened.values():
            backend.close()
    per = per_op(times, k, "cpu")
    return {
        "clock": "cpu",
        "title": f"cost growth: reserve+ack with {large:,} ready tasks / with {small:,}",
        "params": {
            "small": small,
            "large": large,
            "cycles_per_chunk": k,
            "reps": reps,
            "gc": "filled stores frozen (gc.freeze)",
        },
        "backends": backends_block(times, k, "cpu", "s/cycle"),
        "ratios": {
            "walqueue_growth": figure(
                time_ratio(per, f"walqueue_{large}", f"walqueue_{small}"),
                "x time",
                target=("<=", 1.1),
                better="lower",
            ),
            "sqlite_growth": figure(
                time_ratio(per, f"sqlite_{large}", f"sqlite_{small}"), "x time", better="lower", note="information"
            ),
        },
    }
