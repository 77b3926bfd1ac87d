"""Every error WALQueue raises on purpose is a `WalQueueError`, and keeps the builtin class it extends.

One `except WalQueueError` catches every deliberate refusal of any layer
(the format layer's tools, the engine, the server); `InjectedCrash` alone
stays apart, so that no code path can catch a simulated death as an
ordinary error.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import walqueue
from walqueue import InjectedCrash, WalQueueError

#: The builtin classes some errors extend besides `WalQueueError`, so that older `except` clauses still match.
BUILTIN_BASES = {
    "InvalidTransaction": ValueError,
    "ReplayUnavailable": RuntimeError,
    "ReentrantCall": RuntimeError,
    "WrongStatus": ValueError,
    "BadArgument": ValueError,
    "HandlerImportError": ValueError,
    "CallSignatureError": TypeError,
}


def _public_error_classes() -> dict[str, type[BaseException]]:
    found: dict[str, type[BaseException]] = {}
    for module_info in pkgutil.walk_packages(walqueue.__path__, "walqueue."):
        if module_info.name.endswith("__main__"):
            continue
        module = importlib.import_module(module_info.name)
        for name, value in vars(module).items():
            if (
                inspect.isclass(value)
                and issubclass(value, BaseException)
                and value.__module__ == module.__name__
                and not name.startswith("_")
            ):
                found[name] = value
    return found


def test_every_public_error_class_derives_from_walqueue_error() -> None:
    classes = _public_error_classes()
    assert {"SalvageError", "ReplayUnavailable", "SocketInUse", "InvalidTransaction"} <= set(classes)
    strays = sorted(
        name for name, cls in classes.items() if cls is not InjectedCrash and not issubclass(cls, WalQueueError)
    )
    assert strays == []
    assert not issubclass(InjectedCrash, WalQueueError)


def test_errors_keep_the_builtin_classes_they_extend() -> None:
    classes = _public_error_classes()
    for name, base in BUILTIN_BASES.items():
        assert issubclass(classes[name], base), name
