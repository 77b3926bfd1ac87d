"""cpu_per_call (alias d): with sync off, CPU time per single put and per reserve+ack cycle."""

from __future__ import annotations

from typing import Any

from .figures import backends_block, figure, per_op, speed_ratio
from .harness import BACKENDS, Context, fill, open_backend, warm_cycles, warm_puts
from .inputs import puts
from .timing import cycle_chunk, interleave, put_chunk

#: Sizes at each scale (with the run's `reps` unless set here): `ctx.scale` during the run.
SCALES: dict[str, dict[str, int]] = {
    "tiny": {"put_chunk": 50, "cycle_chunk": 30},
    "default": {"put_chunk": 300, "cycle_chunk": 200},
    "big": {"put_chunk": 3000, "cycle_chunk": 2000},
}


def run(ctx: Context) -> dict[str, Any]:
    s = ctx.scale
    kp, kc, reps = s["put_chunk"], s["cycle_chunk"], s["reps"]
    opened = {name: open_backend(name, ctx.dir(f"d-{name}"), durable=False) for name in BACKENDS}
    try:
        for backend in opened.values():
            warm_puts(backend, "warm", 50)
        put_inputs = [puts("d", rep * kp, kp) for rep in range(reps)]

        put_times = interleave({name: put_chunk(b, put_inputs) for name, b in opened.items()}, reps)
        # The cycles lease the earliest ready tasks: the warm-up and the puts above, then these.
        for backend in opened.values():
            fill(backend, "dfill", kc * reps + 50)
            warm_cycles(backend, 50)
        cycle_times = interleave({name: cycle_chunk(b, kc) for name, b in opened.items()}, reps)
    finally:
        for backend in opened.values():
            backend.close()
    put_per = per_op(put_times, kp, "cpu")
    cycle_per = per_op(cycle_times, kc, "cpu")
    return {
        "title": "sync off: CPU per single put and per reserve+ack cycle",
        "clock": "cpu",
        "params": {"puts_per_chunk": kp, "cycles_per_chunk": kc, "reps": reps},
        "backends": {
            "put": backends_block(put_times, kp, "cpu"),
            "cycle": backends_block(cycle_times, kc, "cpu", "s/cycle"),
        },
        "ratios": {
            "put_walqueue_vs_sqlite": figure(speed_ratio(put_per, "walqueue", "sqlite"), "x", target=(">=", 1.5)),
            "cycle_walqueue_vs_sqlite": figure(speed_ratio(cycle_per, "walqueue", "sqlite"), "x", target=(">=", 2.0)),
            "put_walqueue_vs_floor": figure(speed_ratio(put_per, "walqueue", "floor"), "x", note="information"),
            "cycle_walqueue_vs_floor": figure(speed_ratio(cycle_per, "walqueue", "floor"), "x", note="information"),
        },
    }
