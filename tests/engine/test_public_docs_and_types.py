"""Help without the contract: every public name documents itself; types a checker can use.

`help(walqueue.Queue)` must be enough: every public class, function, method
and property has a docstring of its own that refers only to files of this
repository (docs/...), never to a contract document that ships nowhere. And
`mypy --strict` must reject `q.tasks("redy")`, accept a real status, and
know the keys of `stats()`.
"""

from __future__ import annotations

import inspect
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

import walqueue
import walqueue.format
import walqueue.format.cmdline
import walqueue.format.fsck
import walqueue.format.fsck.salvage
import walqueue.format.progress
import walqueue.format.salvage_plan

REPO_ROOT = Path(__file__).resolve().parents[2]

#: Modules whose every public name is checked. The other modules of
#: walqueue.format are being reworked by the file-opening hardening; see
#: test_every_public_name_of_the_format_layer_has_a_docstring.
CHECKED_MODULES = (
    walqueue,
    walqueue.format.cmdline,
    walqueue.format.fsck,
    walqueue.format.progress,
    walqueue.format.fsck.salvage,
    walqueue.format.salvage_plan,
)


def own_members(cls: type) -> Iterator[tuple[str, Any]]:
    """Public methods and properties defined by `cls` itself (not inherited, not dunders)."""
    for name, value in vars(cls).items():
        if name.startswith("_"):
            continue
        if isinstance(value, (staticmethod, classmethod)):
            yield name, value.__func__
        elif isinstance(value, property):
            yield name, value.fget
        elif inspect.isfunction(value):
            yield name, value


#: Documents a public docstring may not send its reader to: neither is in the wheels (`help()` must suffice).
UNSHIPPED = ("SPEC", "CONTRACT §")


def undocumented(module: ModuleType) -> list[str]:
    problems: list[str] = []
    for name in module.__all__:
        value = getattr(module, name)
        if not (inspect.isclass(value) or inspect.isfunction(value)):
            continue
        doc = value.__dict__.get("__doc__") if inspect.isclass(value) else value.__doc__
        if not doc or not doc.strip():
            problems.append(f"{module.__name__}.{name}: no docstring")
        elif any(unshipped in doc for unshipped in UNSHIPPED):
            problems.append(f"{module.__name__}.{name}: refers to a document that ships nowhere")
        if inspect.isclass(value) and not issubclass(value, dict):
            for member, function in own_members(value):
                if not function.__doc__ or not function.__doc__.strip():
                    problems.append(f"{module.__name__}.{name}.{member}: no docstring")
                elif any(unshipped in function.__doc__ for unshipped in UNSHIPPED):
                    problems.append(f"{module.__name__}.{name}.{member}: refers to a document that ships nowhere")
    return problems


@pytest.mark.parametrize("module", CHECKED_MODULES, ids=lambda m: m.__name__)
def test_every_public_name_has_a_self_contained_docstring(module: ModuleType) -> None:
    assert undocumented(module) == []


def test_every_public_name_of_the_format_layer_has_a_docstring() -> None:
    assert undocumented(walqueue.format) == []


def test_docs_that_docstrings_point_to_exist() -> None:
    texts = [inspect.getdoc(walqueue.Queue) or ""] + [
        inspect.getdoc(getattr(walqueue.Queue, name)) or "" for name, _ in own_members(walqueue.Queue)
    ]
    for text in texts:
        for word in text.replace("(", " ").replace(")", " ").split():
            if word.startswith("docs/"):
                assert (REPO_ROOT / word.rstrip(".,;:")).is_file(), word


def test_the_reads_have_docstrings_with_their_errors() -> None:
    for name in ("get", "tasks", "stats", "last_seq"):
        doc = inspect.getdoc(getattr(walqueue.Queue, name))
        assert doc and "QueueClosed" in doc, name


def test_help_of_queue_is_self_contained() -> None:
    text = inspect.getdoc(walqueue.Queue) or ""
    for word in ("CorruptStore", "DirectoryLocked", "QueueClosed", "compact_bytes", "Example"):
        assert word in text, word


def test_status_and_stats_are_public_types() -> None:
    assert walqueue.Status.__args__ == ("ready", "leased", "completed", "dead")  # type: ignore[attr-defined]
    assert set(walqueue.Stats.__annotations__) == {
        "counts",
        "last_seq",
        "snapshot_seq",
        "wal_bytes",
        "segments",
        "next_available_at",
        "next_deadline",
        "clock",
    }


# -- mypy --strict on a user's code ------------------------------------------------------------

GOOD = """\
from walqueue import Queue, Stats, Task

def dead_letters(q: Queue) -> list[Task]:
    return q.tasks("dead")

def ready(q: Queue) -> int:
    stats: Stats = q.stats()
    return stats["counts"]["ready"] + stats["last_seq"]
"""

BAD_STATUS = """\
from walqueue import Queue, Task

def typo(q: Queue) -> list[Task]:
    return q.tasks("redy")
"""

BAD_STATS_KEY = """\
from walqueue import Queue

def typo(q: Queue) -> int:
    return q.stats()["last_sequence"]
"""


def run_mypy(tmp_path: Path, code: str) -> subprocess.CompletedProcess[str]:
    snippet = tmp_path / "snippet.py"
    snippet.write_text(code, encoding="utf-8")
    src_dirs = [str(REPO_ROOT / "packages" / d / "src") for d in ("walqueue-format", "walqueue-engine", "walqueue-cli")]
    env = {**os.environ, "MYPYPATH": os.pathsep.join(src_dirs)}
    config = tmp_path / "mypy.ini"  # none of the repository's settings: a user's plain --strict
    config.write_text("[mypy]\n", encoding="utf-8")
    return subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-incremental", "--namespace-packages",
         "--explicit-package-bases", "--python-version", "3.12", "--config-file", str(config), str(snippet)],
        capture_output=True, text=True, cwd=tmp_path, env=env, timeout=300, check=False,
    )  # fmt: skip


def test_mypy_strict_accepts_a_real_status_and_the_stats_keys(tmp_path: Path) -> None:
    result = run_mypy(tmp_path, GOOD)
    assert result.returncode == 0, result.stdout + result.stderr


def test_mypy_strict_rejects_a_misspelt_status(tmp_path: Path) -> None:
    result = run_mypy(tmp_path, BAD_STATUS)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "snippet.py:4: error" in result.stdout and "Literal['redy']" in result.stdout


def test_mypy_strict_rejects_an_unknown_stats_key(tmp_path: Path) -> None:
    result = run_mypy(tmp_path, BAD_STATS_KEY)
    assert result.returncode == 1, result.stdout + result.stderr
    assert '"last_sequence"' in result.stdout


# -- python -m walqueue ---------------------------------------------------------------------------


def test_python_m_walqueue_prints_the_version_and_the_commands(run_python: Any) -> None:
    result = run_python(["-m", "walqueue"])
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(f"walqueue {walqueue.__version__}:")
    assert "walqueue-fsck" in result.stdout and "python -m walqueue.cli" in result.stdout
    version = run_python(["-m", "walqueue", "--version"])
    assert version.returncode == 0 and version.stdout.strip() == f"walqueue {walqueue.__version__}"


def test_python_m_walqueue_refuses_a_directory_with_ex_usage(run_python: Any, tmp_path: Path) -> None:
    result = run_python(["-m", "walqueue", str(tmp_path / "q")])
    assert result.returncode == 64 and "unrecognized arguments" in result.stderr
    assert not (tmp_path / "q").exists()
