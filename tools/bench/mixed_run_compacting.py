"""mixed_run_compacting (alias p): a long mixed run of durable calls on a large state, compacting or not.

Issue target (i) at its full size: with 1,000,000 tasks, over a 2-minute
run of durable puts and reserve+ack cycles during which the state is
compacted again and again, the longest put is at most 20 ms (Python 3.12)
and the put p99 at most 2x the p99 of the same run with compaction
disabled; once for a store opened from its WAL alone, once for a store
opened from a snapshot and the WAL after it.

How a run compacts: automatic compaction is due once the live WAL exceeds
twice the last snapshot, so a million-task store compacts once, then not
for hundreds of megabytes. The run is therefore made of windows, as in
latency_while_compacting (whose pieces it uses): each opens a fresh copy of
a template whose live WAL is over the threshold, so its first durable call
starts a background snapshot of the whole state, and the window lasts until
that snapshot is published. Windows follow each other until they add up to
`seconds` of compacting; after each, a window as long on one store opened
with compaction disabled. Only the windows are timed: copying and opening
the copies are not (reopen and lanes measure opening).
"""

from __future__ import annotations

import shutil
import sys
from typing import Any

from .harness import Context, figure
from .latency_while_compacting import PERCENTILES, _measure, _percentile, _Rounds, _template

#: Sizes at each scale: `ctx.scale` during the run. `seconds`: the compacting windows' least total.
SCALES: dict[str, dict[str, int]] = {
    "tiny": {"tasks": 2_000, "seconds": 1, "min_pairs": 20},
    "default": {"tasks": 100_000, "seconds": 20, "min_pairs": 100},
    "big": {"tasks": 1_000_000, "seconds": 120, "min_pairs": 500},
}
#: The targets of (i), for the durable (sync) run.
LONGEST_PUT_SECONDS = 0.020
P99_OVER_NONE = 2.0
ORIGINS = ("wal", "snapshot")


def _run_origin(ctx: Context, origin: str) -> tuple[_Rounds, dict[str, int]]:
    """Windows on copies of one template until `seconds` of compacting, each followed by one without (durable)."""
    s = ctx.scale
    template, sizes = _template(ctx, s["tasks"], origin)
    measured = _measure(ctx, template, 1, s["min_pairs"], True, s["seconds"])
    shutil.rmtree(template.parent)
    return measured, sizes


def _figures(measured: _Rounds, origin: str) -> dict[str, Any]:
    sfx = "" if origin == "wal" else f"_{origin}"
    what = f"store opened from its {'WAL alone' if origin == 'wal' else 'snapshot and WAL'}, sync=True"
    ratios: dict[str, Any] = {}
    p99: dict[str, dict[str, float]] = {}
    for kind, modes in measured.lat.items():
        p99[kind] = {}
        for mode, samples in modes.items():
            samples.sort()
            for name, fraction in PERCENTILES:
                value = _percentile(samples, fraction)
                if name == "p99":
                    p99[kind][mode] = value
                target = ("<=", LONGEST_PUT_SECONDS) if (kind, mode, name) == ("put", "compaction", "max") else None
                ratios[f"{kind}_{name}_{mode}{sfx}"] = figure(
                    [value], "s/op", target=target, better="lower", note="" if target else f"information; {what}"
                )
        ratios[f"{kind}_p99_compaction_over_none{sfx}"] = figure(
            [p99[kind]["compaction"] / p99[kind]["none"]],
            "x time",
            target=("<=", P99_OVER_NONE) if kind == "put" else None,
            better="lower",
            note="" if kind == "put" else f"information; {what}",
        )
    ratios[f"compacting_seconds{sfx}"] = figure(
        [sum(measured.compaction_seconds)], "s", note=f"information: the compacting windows' total; {what}"
    )
    ratios[f"compactions{sfx}"] = figure(
        [float(len(measured.compaction_seconds))], "compactions", note=f"information: published in the run; {what}"
    )
    return ratios


def run(ctx: Context) -> dict[str, Any]:
    ratios: dict[str, Any] = {}
    variants: dict[str, Any] = {}
    for origin in ORIGINS:
        measured, sizes = _run_origin(ctx, origin)
        ratios |= _figures(measured, origin)
        variants[origin] = {
            **sizes,
            "pairs_per_window": measured.pairs_per_round,
            "compaction_seconds": [round(x, 3) for x in measured.compaction_seconds],
            "slowest_puts_while_compacting": sorted(measured.slowest["put"], reverse=True)[:10],
            "collector": {mode: collector.summary() for mode, collector in measured.collector.items()},
        }
    return {
        "clock": "wall",
        "title": f"a mixed run of durable calls with {ctx.scale['tasks']:,} tasks, compacting again and again or not",
        "params": {
            **ctx.scale,
            "python": sys.version.split()[0],
            "window": "alternating durable put and reserve+ack, one thread; a fresh copy compacts in each window",
            "variants": variants,
        },
        "backends": {},
        "ratios": ratios,
    }
