"""The packages' import graph: every arrow points down the layers, and no modules import one another in a circle.

Every import counts, also one inside a function or under `TYPE_CHECKING`:
a deferred import hides a dependency from the reader, not from the design.
The layers, lowest first, are `LAYERS`; a module may import its own layer
and those below. Two layers on one rank (`cli`, `worker`) are peers and
may not import each other. `walqueue` itself (the engine's `__init__` and
`__main__`) belongs to the engine. Inside `walqueue.format`, the
`walqueue-fsck` command (`format/fsck/`) sits above the library it checks.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
SOURCES = sorted((REPO_ROOT / "packages").glob("*/src"))

#: Rank of each layer (a package of `walqueue`, or `format.fsck`); lower ranks are imported by higher ones.
LAYERS: dict[str, int] = {
    "format": 0,
    "format.fsck": 1,
    "engine": 2,
    "protocol": 3,
    "backup": 3,  # the replicator and restore (another branch's package): reads the format and the engine
    "client": 4,
    "dashboard": 5,
    "serve": 6,
    "cli": 7,
    "worker": 7,
}


def modules() -> dict[str, Path]:
    """Every module of every distribution, by dotted name (a package by its own name, for its ``__init__``)."""
    found: dict[str, Path] = {}
    for src in SOURCES:
        for path in sorted(src.rglob("*.py")):
            parts = list(path.relative_to(src).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def layer_of(module: str) -> str:
    parts = module.split(".")[1:]
    if parts[:2] == ["format", "fsck"]:
        return "format.fsck"
    if parts in ([], ["__main__"]):
        return "engine"  # walqueue/__init__.py and walqueue/__main__.py ship with the engine
    return parts[0]  # a package not in LAYERS fails the first test below: give it its rank there


def imports_of(module: str, path: Path, known: dict[str, Path]) -> Iterator[tuple[str, int]]:
    """The walqueue modules `module` imports, with each import's line: the module a name comes from,
    or the submodule itself when the name is one."""
    is_package = path.name == "__init__.py"
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("walqueue"):
                    yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = module.split(".") if is_package else module.split(".")[:-1]
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, *([base] if base else [])])
            if not base.startswith("walqueue"):
                continue
            for alias in node.names:
                submodule = f"{base}.{alias.name}"
                yield (submodule if submodule in known else base), node.lineno


def graph() -> dict[str, dict[str, int]]:
    known = modules()
    return {
        module: {
            target: line for target, line in imports_of(module, path, known) if target in known and target != module
        }
        for module, path in known.items()
    }


def test_every_module_belongs_to_a_layer() -> None:
    for module in modules():
        assert layer_of(module) in LAYERS, f"{module}: add its package to LAYERS, at the rank of what it imports"


def test_no_import_points_up_or_sideways_between_layers() -> None:
    wrong = []
    for module, targets in graph().items():
        own = layer_of(module)
        for target, line in targets.items():
            theirs = layer_of(target)
            if theirs != own and LAYERS.get(theirs, 99) >= LAYERS.get(own, -1):
                wrong.append(f"{module}:{line} imports {target} ({own} -> {theirs})")
    assert wrong == []


def test_no_modules_import_one_another_in_a_circle() -> None:
    edges = graph()
    circles: list[str] = []
    done: set[str] = set()

    def visit(module: str, trail: list[str]) -> None:
        if module in trail:
            circles.append(" -> ".join([*trail[trail.index(module) :], module]))
            return
        if module in done:
            return
        for target in sorted(edges[module]):
            visit(target, [*trail, module])
        done.add(module)

    for module in sorted(edges):
        visit(module, [])
    assert circles == []


def test_the_graph_sees_imports_inside_functions() -> None:
    edges = graph()
    assert "walqueue.client" in edges["walqueue.cli.shell"]  # imported inside `connect`, not at the top
