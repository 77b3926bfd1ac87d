"""fsck stays in its layer, in parts, and shares recovery's reader; every deliberate error is a WalQueueError.

- No module of walqueue-format imports the engine, not even lazily: the
  replay (`fsck --replay`, salvage's check) uses the state machine the
  engine registers (`walqueue.format.replay`).
- Checking, cause analysis, rendering and the command line are separate
  modules; none is over 600 lines, no function over 80.
- Recovery and fsck read live segments with one reader (`LiveSegment`).
- `SalvageError`, `ReplayUnavailable` and `InvalidTransaction` derive from
  `WalQueueError` and keep their builtin bases.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest
from test_fsck import queue_store

import walqueue.format.log_rules as log_rules
from walqueue import Queue, WalQueueError
from walqueue.engine.state import InvalidTransaction
from walqueue.format.fsck import EXIT_HEALTHY, ReplayUnavailable, check
from walqueue.format.fsck.salvage import SalvageError

REPO_ROOT = Path(__file__).resolve().parents[2]
FORMAT_SRC = REPO_ROOT / "packages" / "walqueue-format" / "src"
RECOVERY = REPO_ROOT / "packages" / "walqueue-engine" / "src" / "walqueue" / "engine" / "recovery.py"


def format_modules() -> list[Path]:
    return sorted((FORMAT_SRC / "walqueue" / "format").rglob("*.py"))


def imported_names(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module is not None:
            names.add(node.module)
    return names


def test_no_module_of_the_format_layer_imports_the_engine() -> None:
    offenders = {
        str(path.relative_to(FORMAT_SRC)): sorted(n for n in imported_names(path) if n.startswith("walqueue.engine"))
        for path in format_modules()
    }
    assert {k: v for k, v in offenders.items() if v} == {}


def test_fsck_is_in_parts_each_small() -> None:
    parts = {path.stem for path in (FORMAT_SRC / "walqueue" / "format" / "fsck").glob("*.py")}
    assert {"check", "causes", "render", "cli", "report"} <= parts
    too_long: list[str] = []
    for path in [*format_modules(), RECOVERY]:
        text = path.read_text()
        if len(text.splitlines()) > 600:
            too_long.append(f"{path.name}: {len(text.splitlines())} lines")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = (node.end_lineno or node.lineno) - node.lineno + 1
                if length > 80:
                    too_long.append(f"{path.name}:{node.name}: {length} lines")
    assert too_long == []


def test_recovery_and_fsck_read_live_segments_with_one_reader(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = queue_store(tmp_path / "q")
    opened: list[str] = []
    real_init = log_rules.LiveSegment.__init__

    def spy(self: log_rules.LiveSegment, directory: object, number: int, *, newest: bool) -> None:
        real_init(self, directory, number, newest=newest)  # type: ignore[arg-type]
        opened.append(self.name)

    monkeypatch.setattr(log_rules.LiveSegment, "__init__", spy)
    assert check(store).exit_code == EXIT_HEALTHY
    by_fsck = list(opened)
    opened.clear()
    Queue(store, sync=False).close()
    assert by_fsck and opened == by_fsck


def test_the_replay_is_injected_not_imported(tmp_path: Path) -> None:
    """With the format layer alone, a registered state machine is what `check(replay=True)` uses."""
    format_only = str(FORMAT_SRC)
    queue_store(tmp_path / "q")
    code = f"""if True:
        import sys
        from walqueue.format.fsck import check, ReplayUnavailable
        try:
            check({str(tmp_path / "q")!r}, replay=True)
        except ReplayUnavailable as exc:
            print("unavailable:", exc)
        from walqueue.format.replay import StateMachine, register_state_machine

        class Fake:
            last_seq = -1
            def counts(self): return {{"fake": 1}}

        applied = []
        register_state_machine(StateMachine(
            new_state=Fake, from_records=lambda seq, records: (list(records), Fake())[1],
            apply=lambda state, tx: applied.append(tx["seq"]), invalid=ValueError))
        report = check({str(tmp_path / "q")!r}, replay=True)
        print("counts:", report.replay.counts, "applied:", applied)
        print("dead letters:", report.replay.dead_letters)  # a state machine that cannot tell: no grouping
        print("engine imported:", any(name.startswith("walqueue.engine") for name in sys.modules))
    """
    env = {**os.environ, "PYTHONPATH": format_only}
    result = subprocess.run([sys.executable, "-S", "-c", code], env=env, capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith("unavailable: --replay needs walqueue-engine")
    assert lines[1].startswith("counts: {'fake': 1} applied: [") and lines[1] != "counts: {'fake': 1} applied: []"
    assert lines[2] == "dead letters: None"
    assert lines[3] == "engine imported: False"


@pytest.mark.parametrize(
    ("error", "builtin"),
    [(SalvageError, Exception), (ReplayUnavailable, RuntimeError), (InvalidTransaction, ValueError)],
)
def test_every_deliberate_error_is_a_walqueue_error_and_keeps_its_builtin_base(
    error: type[Exception], builtin: type[Exception]
) -> None:
    assert issubclass(error, WalQueueError) and issubclass(error, builtin)
