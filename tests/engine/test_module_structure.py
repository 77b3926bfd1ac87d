"""The engine's shape: its modules import one another without a circle, and none outgrows the house limits.

A circle in the imports means two modules that cannot be understood (or
tested) one without the other; the limits (600 lines a module, 80 a
function, but for a measured hot loop whose docstring or comment carries a
WARNING paragraph saying why) keep each module about one job.
"""

from __future__ import annotations

import ast
from pathlib import Path

import walqueue.engine

ENGINE = Path(walqueue.engine.__file__).parent
PACKAGES = ENGINE.parents[3]  # packages/


def _engine_imports(path: Path) -> set[str]:
    """The engine modules `path` imports, also those imported only for type checking."""
    tree = ast.parse(path.read_text())
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module is not None:
            if node.module == "walqueue.engine":
                found.update(alias.name for alias in node.names)
            elif node.module.startswith("walqueue.engine."):
                found.add(node.module.removeprefix("walqueue.engine.").split(".")[0])
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("walqueue.engine."):
                    found.add(alias.name.removeprefix("walqueue.engine.").split(".")[0])
    return found - {path.stem}


def test_the_engines_imports_have_no_circle() -> None:
    graph = {path.stem: _engine_imports(path) for path in ENGINE.glob("*.py") if path.stem != "__init__"}
    done: set[str] = set()

    def visit(module: str, trail: list[str]) -> None:
        if module in trail:
            raise AssertionError(f"import circle: {' -> '.join([*trail[trail.index(module) :], module])}")
        if module in done:
            return
        for imported in sorted(graph.get(module, ())):
            visit(imported, [*trail, module])
        done.add(module)

    for module in sorted(graph):
        visit(module, [])


def test_no_module_of_the_engine_or_the_protocol_is_over_600_lines() -> None:
    modules = [*ENGINE.glob("*.py"), PACKAGES / "walqueue-cli/src/walqueue/protocol/requests.py"]
    long = {str(path.relative_to(PACKAGES)): n for path in modules if (n := len(path.read_text().splitlines())) > 600}
    assert long == {}


def test_no_engine_function_is_over_80_lines_without_a_warning_saying_why() -> None:
    long: list[str] = []
    for path in sorted(ENGINE.glob("*.py")):
        source = path.read_text()
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                assert node.end_lineno is not None
                lines = node.end_lineno - node.lineno + 1
                text = ast.get_source_segment(source, node) or ""
                if lines > 80 and "WARNING" not in text:
                    long.append(f"{path.name}:{node.lineno} {node.name} ({lines} lines)")
    assert long == []
