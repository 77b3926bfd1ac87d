"""Fixtures shared by the crash tests."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

TORTURE_PATH = Path(__file__).resolve().parents[2] / "tools" / "torture.py"


@pytest.fixture(scope="module")
def torture() -> ModuleType:
    """tools/torture.py as a module (registered in sys.modules, as its dataclasses need)."""
    spec = importlib.util.spec_from_file_location("torture", TORTURE_PATH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("torture", module)
    spec.loader.exec_module(module)
    return module
