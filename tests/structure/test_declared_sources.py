"""Sources are declared, not sniffed: the worker, dashboard and serve packages never probe one at run time.

A source (`QueueSource`, the worker's `WorkerSource`) declares every call
it has, and how it groups calls (`grouping`); a caller calls them. So in
these packages there is no `getattr`/`hasattr`/`inspect.signature` but
the few listed below, none of them on a source, each with its reason; no
class defines `__getattr__` (a wrapper that forwards whatever is asked is
a source nobody declared); and in the worker only the completer (and the
grouped acks it sends through source.py) acks, releases, fails, gives
back or completes a lease.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "packages" / "walqueue-cli" / "src" / "walqueue"
CHECKED = ("worker", "dashboard", "serve")
PROBES = {"getattr", "hasattr", "inspect.signature", "signature"}

#: (module, probe, its first argument) -> why it is not a source being sniffed.
ALLOWED: dict[tuple[str, str, str], str] = {
    ("worker/app.py", "inspect.signature", "function"): "a task function's parameters, to check its arguments",
    (
        "worker/cli.py",
        "getattr",
        "target",
    ): "the handler's dotted path (module:attribute) on the command line",
    ("worker/complete.py", "getattr", "error"): "an exception's own retry delay, set by an App task's retry policy",
    ("worker/forkstart.py", "hasattr", "os"): "whether the platform has os.fork (the supervisor's start method)",
    ("worker/retry.py", "getattr", "self"): "the policy's own fields, checked by name",
    ("worker/sync_only.py", "getattr", "handler"): "the handler's own __call__, to refuse an async one",
    ("dashboard/__init__.py", "getattr", "http"): "the package's lazy import of its own module (PEP 562)",
    (
        "worker/__init__.py",
        "getattr",
        "importlib.import_module(_HOMES[name])",
    ): "the package's lazy import of its public names (PEP 562)",
}
#: Calls that end a lease, and the only worker modules that make them on a source.
ENDING_CALLS = {"ack", "ack_many", "release", "fail", "give_back", "complete"}
COMPLETERS = {"worker/complete.py", "worker/source.py"}


def _modules() -> list[tuple[str, ast.Module]]:
    found = []
    for package in CHECKED:
        for path in sorted((PACKAGE / package).rglob("*.py")):
            found.append((path.relative_to(PACKAGE).as_posix(), ast.parse(path.read_text(encoding="utf-8"))))
    return found


def test_no_source_is_probed_with_getattr_hasattr_or_inspect_signature() -> None:
    seen: set[tuple[str, str, str]] = set()
    unexplained = []
    for name, tree in _modules():
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and ast.unparse(node.func) in PROBES and node.args:
                key = (name, ast.unparse(node.func), ast.unparse(node.args[0]))
                seen.add(key)
                if key not in ALLOWED:
                    unexplained.append(f"{name}:{node.lineno}: {ast.unparse(node)}")
    assert unexplained == [], "declare the capability on the source instead of probing for it"
    assert set(ALLOWED) <= seen, f"listed but gone (drop them from ALLOWED): {sorted(set(ALLOWED) - seen)}"


def test_no_class_forwards_attributes_with_getattr() -> None:
    wrappers = [
        f"{name}:{item.lineno}: {node.name}.__getattr__"
        for name, tree in _modules()
        for node in ast.walk(tree)
        if isinstance(node, ast.ClassDef)
        for item in node.body
        if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef) and item.name in ("__getattr__", "__getattribute__")
    ]
    assert wrappers == [], "write the class's calls out (an explicit class), not a forwarding wrapper"


def test_only_the_completer_ends_a_lease_in_the_worker() -> None:
    elsewhere = []
    for name, tree in _modules():
        if not name.startswith("worker/") or name in COMPLETERS:
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in ENDING_CALLS:
                receiver = ast.unparse(node.func.value)
                if "completer" not in receiver:
                    elsewhere.append(f"{name}:{node.lineno}: {ast.unparse(node.func)}")
    assert elsewhere == [], "acks, releases, fails, give-backs and completes go through worker/complete.py"
