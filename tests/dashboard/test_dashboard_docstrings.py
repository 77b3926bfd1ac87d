"""Every public name of the dashboard, the shell, and the engine's metrics, events and paging documents itself."""

from __future__ import annotations

import importlib
import inspect

import pytest

MODULES = (
    "walqueue.dashboard",
    "walqueue.dashboard.actions",
    "walqueue.dashboard.api",
    "walqueue.dashboard.app",
    "walqueue.dashboard.http",
    "walqueue.dashboard.prometheus",
    "walqueue.dashboard.sampler",
    "walqueue.dashboard.source",
    "walqueue.dashboard.web",
    "walqueue.cli.shell",
    "walqueue.engine.events",
    "walqueue.engine.metrics",
    "walqueue.engine.paging",
)


@pytest.mark.parametrize("name", MODULES)
def test_every_public_name_has_a_docstring(name: str) -> None:
    module = importlib.import_module(name)
    assert module.__doc__
    missing = []
    for public in module.__all__:
        value = getattr(module, public)
        if (inspect.isclass(value) or inspect.isfunction(value)) and not inspect.getdoc(value):
            missing.append(public)
        if inspect.isclass(value) and value.__module__ == name:
            for member, attribute in vars(value).items():
                if not member.startswith("_") and inspect.isfunction(attribute) and not inspect.getdoc(attribute):
                    missing.append(f"{public}.{member}")
    assert not missing, missing
