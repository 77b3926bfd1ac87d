"""One op-kind table: counters, events and the format's names are read from each `OpKind` row, named nowhere else.

Adding an op kind is its row in `state.OP_KINDS` (with its `counter` and
`event` when it has them), its transition and its planner; `metrics`,
`events` and the server's loop then need no edit, which these tests hold
by looking for a kind's or a call's name anywhere in their code.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import walqueue.engine.events as events
import walqueue.engine.metrics as metrics
import walqueue.engine.transitions as transitions
import walqueue.serve.eventloop as eventloop
from walqueue.engine.opkinds import _kind
from walqueue.engine.optable import Field
from walqueue.engine.state import OP_KINDS
from walqueue.format.transaction import OP_NAMES
from walqueue.protocol.calltable import CALLS


def _string_constants(module: object) -> set[str]:
    path = Path(getattr(module, "__file__", ""))
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
        and node.body
        and isinstance(node.body[0], ast.Expr)
    }
    looked_up = {  # `events._event_of("put")`: a name constant read from its row, not a second spelling
        id(argument)
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "_event_of"
        for argument in node.args
    }
    keys = {id(key) for node in ast.walk(tree) if isinstance(node, ast.Dict) for key in node.keys}  # field names
    ignored = docstrings | looked_up | keys
    return {
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in ignored
    }


def test_the_format_accepts_exactly_the_declared_kinds() -> None:
    assert frozenset(OP_KINDS) == OP_NAMES


def test_the_counters_of_op_kinds_are_the_rows_counters_in_table_order() -> None:
    declared = [kind.counter for kind in OP_KINDS.values() if kind.counter is not None]
    assert list(metrics.COUNTERS[: len(declared)]) == declared
    assert len(set(metrics.COUNTERS)) == len(metrics.COUNTERS)


def test_the_event_names_are_the_rows_events() -> None:
    declared = {kind.event for kind in OP_KINDS.values() if kind.event is not None}
    assert set(events.EVENTS) == declared


def test_metrics_and_events_name_no_op_kind() -> None:
    for module in (metrics, events):
        assert _string_constants(module) & set(OP_KINDS) == set(), module.__name__


def test_the_servers_loop_names_no_call() -> None:
    assert _string_constants(eventloop) & set(CALLS) == set()


def test_a_kind_declared_without_counter_or_event_counts_and_logs_nothing() -> None:
    error = OP_KINDS["error"]
    assert error.counter is None and error.event is None
    assert "error" not in metrics.COUNTERS


def test_every_kind_runs_the_transition_named_for_it() -> None:
    assert all(kind.transition is getattr(transitions, name) for name, kind in OP_KINDS.items())


def test_a_row_whose_transition_is_missing_is_refused_by_name() -> None:
    with pytest.raises(ImportError, match=r"op kind 'grant' has no transition: .*transitions\.grant"):
        _kind("grant", (("max_attempts", Field.POSITIVE_INT),), "ready")
