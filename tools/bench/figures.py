"""Figures: a sample's summary, per-operation times, ratios per repetition, targets and their printed values."""

from __future__ import annotations

import statistics
from typing import Any

from .timing import Times


def summary(samples: list[float]) -> dict[str, Any]:
    median = statistics.median(samples)
    low, high = min(samples), max(samples)
    return {
        "median": median,
        "min": low,
        "max": high,
        "spread_pct": 100.0 * (high - low) / median if median else 0.0,
        "samples": samples,
    }


def figure(
    samples: list[float],
    unit: str,
    *,
    target: tuple[str, float] | None = None,
    better: str = "higher",
    note: str = "",
) -> dict[str, Any]:
    result = summary(samples)
    result["unit"] = unit
    result["better"] = better
    result["note"] = note
    if target is not None:
        op, bound = target
        value = result["median"]
        result["target"] = f"{op} {fmt_value(bound, unit)}"
        result["met"] = value >= bound if op == ">=" else value <= bound
    else:
        result["target"] = None
        result["met"] = None
    return result


def per_op(times: Times, ops: int, which: str) -> dict[str, list[float]]:
    """Seconds per operation on clock `which` ("wall" or "cpu")."""
    return {name: [t / ops for t in values] for name, values in times.on(which).items()}


def speed_ratio(per: dict[str, list[float]], mine: str, other: str) -> list[float]:
    """Per repetition: how many times faster `mine` is than `other` (their time / my time)."""
    return [b / a for a, b in zip(per[mine], per[other], strict=True)]


def time_ratio(per: dict[str, list[float]], mine: str, other: str) -> list[float]:
    """Per repetition: my time / their time (lower is better)."""
    return [a / b for a, b in zip(per[mine], per[other], strict=True)]


def backends_block(times: Times, ops: int, primary: str, unit: str = "s/op") -> dict[str, Any]:
    """Per backend: the primary clock's figure, with the other clock's summary under `other_clock`."""
    other = "cpu" if primary == "wall" else "wall"
    main, second = per_op(times, ops, primary), per_op(times, ops, other)
    block = {}
    for name, values in main.items():
        fig = figure(values, unit, better="lower")
        fig["clock"] = primary
        fig["other_clock"] = dict(summary(second[name]), clock=other)
        block[name] = fig
    return block


def fmt_value(value: float, unit: str) -> str:
    if unit.startswith("s/"):
        if value >= 1:
            return f"{value:.3f} s"
        if value >= 1e-3:
            return f"{value * 1e3:.3f} ms"
        return f"{value * 1e6:.1f} us"
    if unit in ("x", "x time"):
        return f"{value:.2f}x"
    if unit == "share":
        return f"{100 * value:.1f}%"
    if unit == "fsyncs/op":
        return f"{value:.2f} fsyncs/op"
    if unit == "compactions":
        return f"{value:.0f} compactions"
    if unit in ("tx/s", "tasks/s"):
        return f"{value:,.0f} {unit}"
    if unit == "bytes":
        return f"{value:,.0f} B"
    return f"{value:g} {unit}"


def pyplot() -> Any:
    """matplotlib's pyplot on the Agg backend, or None: a tool-only dependency, imported only to plot."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    return plt


def wall_block(samples: dict[str, list[float]], unit: str = "s/op") -> dict[str, Any]:
    """Per backend, the figure of seconds per operation measured on the wall clock only (no other clock)."""
    block = {}
    for name, values in samples.items():
        fig = figure(values, unit, better="lower")
        fig["clock"] = "wall"
        fig["other_clock"] = dict(summary(values), clock="wall")
        block[name] = fig
    return block


def information(samples: list[float], unit: str, note: str) -> dict[str, Any]:
    """A figure reported for what it tells, with no target: its note says so first, and what it tells."""
    return figure(samples, unit, note=f"information: {note}")
