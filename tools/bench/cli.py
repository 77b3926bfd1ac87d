"""The command line: run the selected workloads, print them, write the JSON."""

from __future__ import annotations

import argparse
import json
import os
import platform
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from harness import command_line, scratch

from . import ROOT
from .harness import Context, fmt_value
from .registry import WORKLOADS, Workload, resolve
from .report import filesystem, loadavg, markdown, print_result, targets_markdown, targets_table
from .scales import SCALE_REPS

_DESCRIPTION = "WALQueue against SQLite and the fsync floor: one process, interleaved, ratios per repetition."


def parser() -> argparse.ArgumentParser:
    """The options; one --plot-LETTER / --plot-NAME pair per workload that draws a plot."""
    parser = command_line("bench", _DESCRIPTION)
    parser.add_argument("--scale", choices=sorted(SCALE_REPS), default="default")
    parser.add_argument("--json", metavar="FILE", help="write every figure to FILE as JSON")
    parser.add_argument(
        "--only",
        metavar="LIST",
        help="comma-separated workloads, by name or letter: " + ", ".join(f"{w.name} ({w.letter})" for w in WORKLOADS),
    )
    parser.add_argument("--list", action="store_true", help="list the workloads, their letters and what they measure")
    parser.add_argument("--dir", metavar="DIR", help="parent directory of the stores (default: system temp dir)")
    parser.add_argument("--keep", action="store_true", help="keep the stores after the run")
    parser.add_argument("-q", "--quiet", action="store_true", help="no progress lines on stderr")
    parser.add_argument("--markdown", metavar="JSON", help="print the tables of an earlier run's JSON and exit")
    parser.add_argument(
        "--targets-markdown",
        metavar="JSON",
        nargs="+",
        help="print one table of every target, a column per earlier run's JSON, and exit",
    )
    for workload in WORKLOADS:
        if workload.plot is not None:
            parser.add_argument(
                f"--plot-{workload.letter}",
                f"--plot-{workload.name.replace('_', '-')}",
                dest=f"plot_{workload.name}",
                metavar="PNG",
                help=f"draw {workload.name}'s figures into PNG (needs matplotlib)",
            )
    return parser


def _selected(args: argparse.Namespace, parser: argparse.ArgumentParser) -> list[Workload]:
    if not args.only:
        return list(WORKLOADS)
    words = [word.strip() for word in args.only.split(",") if word.strip()]
    unknown = []
    chosen: list[Workload] = []
    for word in words:
        try:
            chosen.append(resolve(word))
        except KeyError:
            unknown.append(word)
    if unknown:
        parser.error(f"unknown workload(s) {unknown}")
    return chosen


def _commit() -> str | None:
    """The checkout's commit (with "+dirty" when the tree differs from it), or None outside a git checkout."""
    try:
        head = subprocess.run(
            ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True, timeout=10
        )
        dirty = subprocess.run(
            ["git", "-C", str(ROOT), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            timeout=10,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    if head.returncode != 0:
        return None
    return head.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")


def _meta(scale: str, root: Path) -> dict[str, Any]:
    import walqueue

    return {
        "scale": scale,
        "scale_params": {"reps": SCALE_REPS[scale], **{w.name: w.scales[scale] for w in WORKLOADS}},
        "python": sys.version.split()[0],
        "implementation": platform.python_implementation(),
        "sqlite": sqlite3.sqlite_version,
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "filesystem": filesystem(root),
        "walqueue_from": os.path.dirname(walqueue.__file__),
        "commit": _commit(),
        "date": time.strftime("%Y-%m-%d", time.gmtime()),
        "loadavg_start": loadavg(),
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }


def _run(selected: list[Workload], args: argparse.Namespace, ctx: Context) -> dict[str, dict[str, Any]]:
    results: dict[str, dict[str, Any]] = {}
    for workload in selected:
        ctx.scale = {"reps": SCALE_REPS[args.scale], **workload.scales[args.scale]}
        started = time.perf_counter()
        result = workload.run(ctx)
        result["seconds"] = time.perf_counter() - started
        result["workload"], result["letter"] = workload.name, workload.letter
        results[workload.name] = result
        print_result(result)
        png = getattr(args, f"plot_{workload.name}", None)
        if workload.plot is not None and png:
            print(workload.plot(result, png))
        sys.stdout.flush()
    return results


def _run_all(
    selected: list[Workload], args: argparse.Namespace, root: Path
) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """The run's metadata and every selected workload's result, their stores under `root`."""
    meta = _meta(args.scale, root)
    print(
        f"walqueue bench: scale {args.scale}, Python {meta['python']}, SQLite {meta['sqlite']}, "
        f"{meta['cpus']} CPUs, stores on {meta['filesystem']}, load {meta['loadavg_start']}, commit {meta['commit']}"
    )
    if "tmpfs" in meta["filesystem"]:
        print("  warning: the stores are on tmpfs: fsync costs nothing there, durable figures mean little")
    ctx = Context(root, {}, verbose=not args.quiet)
    started = time.perf_counter()
    results = _run(selected, args, ctx)
    meta["seconds"] = time.perf_counter() - started
    meta["loadavg_end"] = loadavg()
    return meta, results


def main(argv: list[str] | None = None) -> int:
    options = parser()
    args = options.parse_args(argv)
    if args.list:
        for workload in WORKLOADS:
            print(f"{workload.name:<26} ({workload.letter})  {workload.summary}")
        return 0
    if args.targets_markdown:
        reports = []
        for path in args.targets_markdown:
            with open(path, encoding="utf-8") as file:
                reports.append(json.load(file))
        print(targets_markdown(reports))
        return 0
    if args.markdown:
        with open(args.markdown, encoding="utf-8") as file:
            print(markdown(json.load(file)))
        return 0
    selected = _selected(args, options)
    with scratch("walqueue-bench-", args.dir, keep=args.keep) as root:
        meta, results = _run_all(selected, args, root)
        if args.keep:
            print(f"\nstores kept in {root}")
    targets = targets_table(results)
    print(f"\nTargets (medians of per-repetition ratios; {meta['seconds']:.0f} s in all):")
    for row in targets:
        print(
            f"  {row['workload'] + ' (' + row['letter'] + ')':<30} {row['figure']:<34}"
            f" {fmt_value(row['value'], row['unit']):>16}   {row['target']:<12} {'met' if row['met'] else 'NOT MET'}"
        )
    if args.json:
        with open(args.json, "w", encoding="utf-8") as out:
            json.dump({"meta": meta, "workloads": results, "targets": targets}, out, indent=2)
            out.write("\n")
    return 0
