"""tools/bench_dashboard.py and tools/dashboard_demo.py keep running (at a tiny scale; nothing here measures speed)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]


def run_tool(script: str, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """``python tools/<script> *args``, its output captured as text."""
    command = [sys.executable, str(REPO_ROOT / "tools" / script), *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout)


def bench(out: Path, *args: str, timeout: float = 280) -> dict[str, Any]:
    """The figures of one repetition of bench_dashboard.py with `args`, written to and read from `out`."""
    result = run_tool("bench_dashboard.py", *args, "--reps", "1", "--json", str(out), timeout=timeout)
    assert result.returncode == 0, result.stderr
    figures: dict[str, Any] = json.loads(out.read_text())
    return figures


@pytest.mark.timeout(300)
def test_the_paging_bench_reports_every_route_bounded(tmp_path: Path) -> None:
    figures = bench(tmp_path / "figures.json", "--tasks", "3000")
    assert {"overview", "metrics", "leases deep page", "dead deep page", "dead groups, not reused"} <= set(
        figures["routes"]
    )
    assert figures["largest_answer_bytes"] <= 256 * 1024
    assert figures["dead_page_vs_whole"] > 0


@pytest.mark.timeout(300)
def test_the_served_bench_compares_watched_and_unwatched(tmp_path: Path) -> None:
    figures = bench(tmp_path / "served.json", "--served", "--ops", "40", "--min-polls", "0")
    assert figures["puts_watched_vs_unwatched"] > 0 and figures["cycles_watched_vs_unwatched"] > 0


@pytest.mark.timeout(120)
def test_the_served_cpu_bench_reads_the_server_with_and_without_a_watcher(tmp_path: Path) -> None:
    figures = bench(tmp_path / "cpu.json", "--served-cpu", "1.5", timeout=100)
    assert len(figures["server_cpu_per_second"]["watched"]) == 1
    assert len(figures["server_cpu_per_second"]["unwatched"]) == 1


def test_the_demo_documents_itself() -> None:
    result = run_tool("dashboard_demo.py", "--help")
    assert result.returncode == 0 and "--screenshot" in result.stdout
