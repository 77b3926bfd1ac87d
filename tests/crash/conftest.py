"""Shared by the crash tests: tools/ on sys.path, so the torture package imports as `torture`.

The campaigns and the OS-fault injector live in tools/torture/ (a package,
never installed); the tests import its modules by name.
"""

from __future__ import annotations

import sys
from pathlib import Path

TOOLS_DIR = Path(__file__).resolve().parents[2] / "tools"
TORTURE_DIR = TOOLS_DIR / "torture"

if str(TOOLS_DIR) not in sys.path:
    sys.path.insert(0, str(TOOLS_DIR))
