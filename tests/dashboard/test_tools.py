"""tools/bench_dashboard.py and tools/dashboard_demo.py keep running (at a tiny scale; nothing here measures speed)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.timeout(300)
def test_the_paging_bench_reports_every_route_bounded(tmp_path: Path) -> None:
    out = tmp_path / "figures.json"
    result = subprocess.run(
        [
            sys.executable,
            str(REPO_ROOT / "tools" / "bench_dashboard.py"),
            "--tasks",
            "3000",
            "--reps",
            "1",
            "--json",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=280,
    )
    assert result.returncode == 0, result.stderr
    figures = json.loads(out.read_text())
    assert {"overview", "metrics", "leases deep page", "dead deep page", "dead groups, not reused"} <= set(
        figures["routes"]
    )
    assert figures["largest_answer_bytes"] <= 256 * 1024
    assert figures["dead_page_vs_whole"] > 0


@pytest.mark.timeout(300)
def test_the_served_bench_compares_watched_and_unwatched(tmp_path: Path) -> None:
    out = tmp_path / "served.json"
    result = subprocess.run(
        [
            sys.executable,
            str(REPO_ROOT / "tools" / "bench_dashboard.py"),
            "--served",
            "--ops",
            "40",
            "--min-polls",
            "0",
            "--reps",
            "1",
            "--json",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=280,
    )
    assert result.returncode == 0, result.stderr
    figures = json.loads(out.read_text())
    assert figures["puts_watched_vs_unwatched"] > 0 and figures["cycles_watched_vs_unwatched"] > 0


@pytest.mark.timeout(120)
def test_the_served_cpu_bench_reads_the_server_with_and_without_a_watcher(tmp_path: Path) -> None:
    out = tmp_path / "cpu.json"
    result = subprocess.run(
        [
            sys.executable,
            str(REPO_ROOT / "tools" / "bench_dashboard.py"),
            "--served-cpu",
            "1.5",
            "--reps",
            "1",
            "--json",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=100,
    )
    assert result.returncode == 0, result.stderr
    figures = json.loads(out.read_text())
    assert len(figures["server_cpu_per_second"]["watched"]) == 1
    assert len(figures["server_cpu_per_second"]["unwatched"]) == 1


def test_the_demo_documents_itself() -> None:
    result = subprocess.run(
        [sys.executable, str(REPO_ROOT / "tools" / "dashboard_demo.py"), "--help"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0 and "--screenshot" in result.stdout
