"""put_many_durable (alias c): durable put_many of 1,000 tasks; the validation alone beside it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from walqueue.engine.ops import put_ops_from_mappings

from .backends import put_row_from_mapping as sqlite_put_row_from_mapping
from .figures import backends_block, figure, per_op, speed_ratio, time_ratio
from .harness import BACKENDS, Context, open_backend
from .inputs import put_items, put_items_keys_reversed
from .timing import Chunk, Clock, clock, interleave, since

#: Sizes at each scale (with the run's `reps` unless set here): `ctx.scale` during the run.
SCALES: dict[str, dict[str, int]] = {
    "tiny": {"batch": 100, "chunk": 1},
    "default": {"batch": 1000, "chunk": 1},
    "big": {"batch": 1000, "chunk": 4},
}


class _RulesOnly:
    """A member that stores nothing: `put_many` only validates its items with `rules` and drops the result."""

    def __init__(self, rules: Callable[[list[dict[str, Any]]], list[Any]]) -> None:
        self._rules = rules

    def put_many(self, tasks: list[dict[str, Any]]) -> None:
        rows = self._rules(tasks)  # built and freed as the real put_many does
        del rows

    def close(self) -> None:
        pass


#: The put_many_durable members that only validate: the baseline's rules, walqueue's own (as each put_many does).
RULES: dict[str, Callable[[list[dict[str, Any]]], list[Any]]] = {
    "rules_sqlite": lambda items: [sqlite_put_row_from_mapping(item) for item in items],
    "rules_walqueue": put_ops_from_mappings,
}
#: A walqueue member whose payloads have their keys in reverse order: none is in canonical order already.
UNSORTED = "walqueue_keys_unsorted"


def run(ctx: Context) -> dict[str, Any]:
    s = ctx.scale
    batch, calls = s["batch"], s["chunk"]
    opened = {name: open_backend(name, ctx.dir(f"c-{name}"), durable=True) for name in BACKENDS}
    opened[UNSORTED] = open_backend("walqueue", ctx.dir(f"c-{UNSORTED}"), durable=True)
    opened.update({name: _RulesOnly(rules) for name, rules in RULES.items()})
    try:
        for backend in opened.values():
            backend.put_many(put_items("warm", 0, batch))

        def fresh_inputs(name: str) -> list[list[list[dict[str, Any]]] | None]:
            """Repetition `rep`'s lists of tasks: each member gets its own identical copy (nothing shared)."""
            items = put_items_keys_reversed if name == UNSORTED else put_items
            return [
                [items("c", (rep * calls + call) * batch, batch) for call in range(calls)] for rep in range(s["reps"])
            ]

        def chunk_for(backend: Any, inputs: list[list[list[dict[str, Any]]] | None]) -> Chunk:
            def run(rep: int) -> Clock:
                put_many = backend.put_many
                lists = inputs[rep]
                inputs[rep] = None  # consumed once; freed after the timed region
                assert lists is not None
                start = clock()
                for items in lists:
                    put_many(items)
                return since(start)

            return run

        chunks = {name: chunk_for(b, fresh_inputs(name)) for name, b in opened.items()}
        times = interleave(chunks, s["reps"])
    finally:
        for backend in opened.values():
            backend.close()
    per = per_op(times, batch * calls, "wall")
    # Per repetition, the cheaper of the two validations: what an engine that stored for free would cost.
    rules_min = [min(a, b) for a, b in zip(per["rules_sqlite"], per["rules_walqueue"], strict=True)]
    return {
        "title": f"durable put_many of {batch:,} tasks",
        "clock": "wall",
        "params": {
            "batch": batch,
            "calls_per_chunk": calls,
            "reps": s["reps"],
            "rules_*": "validation only, no storage",
        },
        "backends": backends_block(times, batch * calls, "wall", "s/task"),
        "ratios": {
            "walqueue_vs_sqlite": figure(speed_ratio(per, "walqueue", "sqlite"), "x", target=(">=", 1.5)),
            "walqueue_vs_floor": figure(speed_ratio(per, "walqueue", "floor"), "x", note="information"),
            "keys_unsorted_vs_sqlite": figure(
                speed_ratio(per, UNSORTED, "sqlite"),
                "x",
                note="information: walqueue with every payload's keys out of canonical order (reversed), so that"
                " no payload is encoded without the sort (sqlite time / that member's time)",
            ),
            "ceiling_vs_sqlite": figure(
                speed_ratio({"rules": rules_min, "sqlite": per["sqlite"]}, "rules", "sqlite"),
                "x",
                note="information: the best ratio any engine applying the same validation could reach"
                " (storage free): sqlite time / min(rules_sqlite, rules_walqueue) time",
            ),
            "rules_share_of_sqlite": figure(
                time_ratio(per, "rules_sqlite", "sqlite"),
                "share",
                better="lower",
                note="information: the part of sqlite's put_many time spent validating"
                " (rules_sqlite time / sqlite time)",
            ),
        },
    }
