"""Printing a run and rendering its JSON as Markdown tables; matplotlib for the plots."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from .harness import fmt_value
from .registry import BY_LETTER, BY_NAME


def _print_backends(block: dict[str, Any], label: str = "") -> None:
    for name, fig in block.items():
        unit = fig["unit"]
        other = fig["other_clock"]
        rate = f"{1 / fig['median']:>9,.0f}/s" if fig["median"] and unit != "s/open" else " " * 11
        print(
            f"    {label + name:<22} {fig['clock']} {fmt_value(fig['median'], unit):>10}"
            f"  [{fmt_value(fig['min'], unit)} .. {fmt_value(fig['max'], unit)}, spread {fig['spread_pct']:.0f}%]"
            f" {rate}   ({other['clock']} {fmt_value(other['median'], unit)})"
        )


def _verdict(fig: dict[str, Any]) -> str:
    if fig["met"] is None:
        return "(information)"
    return f"target {fig['target']}: {'met' if fig['met'] else 'NOT MET'}"


def print_result(result: dict[str, Any]) -> None:
    clock_note = {"wall": "wall clock", "cpu": "process CPU time", None: "tracemalloc"}[result["clock"]]
    heading = f"{result['workload']} ({result['letter']}): {result['title']}"
    print(f"\n{heading}  [{clock_note}]\n    {json.dumps(result['params'])}")
    backends = result["backends"]
    if backends:
        first = next(iter(backends.values()))
        if "median" in first:
            _print_backends(backends)
        else:
            for label, block in backends.items():
                _print_backends(block, f"{label}: ")
    for name, fig in result["ratios"].items():
        unit = fig["unit"]
        spread = "" if len(fig["samples"]) == 1 else f"[{fmt_value(fig['min'], unit)} .. {fmt_value(fig['max'], unit)}]"
        print(f"  = {name:<34} {fmt_value(fig['median'], unit):>15} {spread:<32} {_verdict(fig)}")
        if fig["note"].startswith("information: "):
            print(f"      ({fig['note'].removeprefix('information: ')})")


def targets_table(results: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    rows = []
    for key, result in results.items():
        for name, fig in result["ratios"].items():
            if fig["target"] is not None:
                rows.append(
                    {
                        "workload": key,
                        "letter": result["letter"],
                        "figure": name,
                        "value": fig["median"],
                        "unit": fig["unit"],
                        "target": fig["target"],
                        "met": fig["met"],
                    }
                )
    return rows


def markdown(report: dict[str, Any]) -> str:
    """Render a run's JSON as the two Markdown tables of docs/PERFORMANCE.md: ratios, then absolutes."""
    meta = report["meta"]
    date = meta.get("date") or str(meta.get("started", "an unknown date"))[:10]
    lines = [
        f"Run of {date}, commit {meta.get('commit') or 'unknown'}, scale `{meta['scale']}`,"
        f" Python {meta['python']}, SQLite {meta['sqlite']}, {meta['cpus']} CPUs,"
        f" stores on {meta['filesystem']}, load average {_load_text(meta.get('loadavg_start'))} at the start,"
        f" {meta['seconds']:.0f} s in all.",
        "",
        "| workload | figure | median | min .. max (per repetition) | target | |",
        "|---|---|---:|---|---|---|",
    ]
    for key, result in report["workloads"].items():
        for name, fig in result["ratios"].items():
            unit = fig["unit"]
            spread = (
                "(one measurement)"
                if len(fig["samples"]) == 1
                else f"{fmt_value(fig['min'], unit)} .. {fmt_value(fig['max'], unit)}"
            )
            verdict = "" if fig["met"] is None else ("met" if fig["met"] else "**not met**")
            target = fig["target"] or "(information)"
            median = fmt_value(fig["median"], unit)
            lines.append(f"| {label(key, result)} | {name} | {median} | {spread} | {target} | {verdict} |")
    lines += [
        "",
        "Absolute figures (machine-specific; median per operation, on the workload's clock):",
        "",
        "| workload | backend | clock | median | min .. max | other clock (median) |",
        "|---|---|---|---:|---|---:|",
    ]
    for key, result in report["workloads"].items():
        backends = result["backends"]
        if not backends:
            continue
        groups = (
            {"": backends} if "median" in next(iter(backends.values())) else {f"{g}: ": b for g, b in backends.items()}
        )
        for group, block in groups.items():
            for name, fig in block.items():
                unit = fig["unit"]
                other = fig["other_clock"]
                lines.append(
                    f"| {label(key, result)} | {group}{name} | {fig['clock']} | {fmt_value(fig['median'], unit)}"
                    f" | {fmt_value(fig['min'], unit)} .. {fmt_value(fig['max'], unit)}"
                    f" | {other['clock']} {fmt_value(other['median'], unit)} |"
                )
    return "\n".join(lines)


def targets_markdown(reports: list[dict[str, Any]]) -> str:
    """One table of every target, a column per run (its date, commit, scale and Python): docs/PERFORMANCE.md §4.

    A target a run did not measure (a workload it left out) is blank in its column. With more runs
    than targets (repeated runs of one workload) the table turns: a row per run, a column per target.
    """
    columns = []
    cells: dict[tuple[str, str], dict[int, str]] = {}
    order: list[tuple[str, str]] = []
    targets: dict[tuple[str, str], str] = {}
    for index, report in enumerate(reports):
        meta = report["meta"]
        date = meta.get("date") or str(meta.get("started", "?"))[:10]
        columns.append(f"{date}, {meta.get('commit') or 'unknown'}, `{meta['scale']}`, Python {meta['python']}")
        for key, result in report["workloads"].items():
            for name, fig in result["ratios"].items():
                if fig["target"] is None:
                    continue
                row = (label(key, result), name)
                if row not in cells:
                    cells[row] = {}
                    order.append(row)
                targets[row] = fig["target"]
                value = fmt_value(fig["median"], fig["unit"])
                cells[row][index] = f"{value} met" if fig["met"] else f"**{value} not met**"
    if len(reports) > len(order):  # many runs of few targets: a row per run reads better
        lines = [
            "| run | " + " | ".join(f"{row[0]} {row[1]} {targets[row]}" for row in order) + " |",
            "|---|" + "---:|" * len(order),
        ]
        for index, column in enumerate(columns):
            lines.append(f"| {column} | " + " | ".join(cells[row].get(index, "") for row in order) + " |")
        return "\n".join(lines)
    lines = [
        "| workload | figure | target | " + " | ".join(columns) + " |",
        "|---|---|---|" + "---:|" * len(columns),
    ]
    for row in order:
        values = " | ".join(cells[row].get(index, "") for index in range(len(reports)))
        lines.append(f"| {row[0]} | {row[1]} | {targets[row]} | {values} |")
    return "\n".join(lines)


def label(key: str, result: dict[str, Any]) -> str:
    """A workload as the tables name it, `name (letter)`, also for a JSON written when keys were letters."""
    if key in BY_LETTER:
        return f"{BY_LETTER[key].name} ({key})"
    letter = result.get("letter") or (BY_NAME[key].letter if key in BY_NAME else "?")
    return f"{key} ({letter})"


def _load_text(load: list[float] | None) -> str:
    return "unknown" if not load else " / ".join(f"{x:.1f}" for x in load)


def filesystem(path: Path) -> str:
    """The mount point and file-system type that holds `path` (best effort, Linux)."""
    try:
        best = ("", "?")
        real = str(path.resolve())
        with open("/proc/mounts") as mounts:
            for line in mounts:
                fields = line.split()
                if len(fields) >= 3 and (real == fields[1] or real.startswith(fields[1].rstrip("/") + "/")):
                    if len(fields[1]) >= len(best[0]):
                        best = (fields[1], fields[2])
        return f"{best[1]} at {best[0]}"
    except OSError:
        return "unknown"


def loadavg() -> list[float] | None:
    try:
        return list(os.getloadavg())
    except OSError:
        return None
