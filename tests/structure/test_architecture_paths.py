"""docs/ARCHITECTURE.md draws the request path and the worker path one module per hop, and every module exists.

Each line of the two drawings names at most one module (the hop's), as a
path below ``walqueue/`` (``serve/eventloop.py``) or, in the worker's, below
``walqueue/worker/``; a module that is renamed or removed fails here rather
than leaving the map to mislead.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
WALQUEUE = REPO_ROOT / "packages" / "walqueue-cli" / "src" / "walqueue"
ENGINE = REPO_ROOT / "packages" / "walqueue-engine" / "src" / "walqueue"
MODULE = re.compile(r"\b[\w/]+\.py\b")

#: The section's heading -> the package its bare module names are in.
PATHS = {
    "## The path of one request through walqueue-serve": WALQUEUE,
    "## The path of one task through a worker": WALQUEUE / "worker",
}


def drawing_lines(heading: str) -> list[str]:
    """The lines of the code blocks in the section under `heading`."""
    text = (REPO_ROOT / "docs" / "ARCHITECTURE.md").read_text(encoding="utf-8")
    section = text.split(heading + "\n", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"^```\n(.*?)^```", section, re.DOTALL | re.MULTILINE)
    assert blocks, f"no drawing under {heading!r}"
    return [line for block in blocks for line in block.splitlines()]


@pytest.mark.parametrize("heading", sorted(PATHS))
def test_each_hop_names_one_module_and_it_exists(heading: str) -> None:
    lines = drawing_lines(heading)
    crowded = [line.strip() for line in lines if len(MODULE.findall(line)) > 1]
    assert crowded == []
    named = [name for line in lines for name in MODULE.findall(line)]
    assert len(named) >= 10, named
    missing = [
        name
        for name in named
        if not (PATHS[heading] / name).is_file() and not (WALQUEUE / name).is_file() and not (ENGINE / name).is_file()
    ]
    assert missing == []
