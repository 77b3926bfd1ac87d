"""The docs site stays a guide: a short README, every page reachable, every public name documented.

The site itself is built with warnings as errors by `bash tools/docs.sh`
(.ci/run runs it), which catches a broken link, a page missing from every
table of contents and a reference to an undocumented `walqueue` name. These
checks need no Sphinx: they hold the parts of the promise a build cannot
see, that the README stays a front page and that autodoc has something to
say about each name a public module exports.
"""

from __future__ import annotations

import importlib
import inspect
import re
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
DOCS = REPO_ROOT / "docs"

#: The modules whose `__all__` is the public API, each documented by an automodule in docs/api.md.
PUBLIC_MODULES = ["walqueue", "walqueue.worker", "walqueue.client", "walqueue.dashboard", "walqueue.format"]


def test_the_readme_is_a_front_page_of_at_most_300_lines() -> None:
    assert len((REPO_ROOT / "README.md").read_text(encoding="utf-8").splitlines()) <= 300


def test_every_page_is_in_a_table_of_contents() -> None:
    listed: set[str] = set()
    for page in DOCS.rglob("*.md"):
        if "_build" in page.parts:
            continue
        for block in re.findall(r"```\{toctree\}\n(.*?)```", page.read_text(encoding="utf-8"), re.DOTALL):
            for line in block.splitlines():
                if line.strip() and not line.startswith(":"):
                    listed.add(str((page.parent / line.strip()).relative_to(DOCS)))
    pages = {str(p.relative_to(DOCS).with_suffix("")) for p in DOCS.rglob("*.md") if "_build" not in p.parts}
    assert pages - listed == {"index"}


@pytest.mark.parametrize("module_name", PUBLIC_MODULES)
def test_every_public_name_has_a_docstring_and_an_api_entry(module_name: str) -> None:
    api = (DOCS / "api.md").read_text(encoding="utf-8")
    assert f".. automodule:: {module_name}\n" in api, module_name
    module = importlib.import_module(module_name)
    undocumented = [
        name
        for name in module.__all__
        if (inspect.isclass(getattr(module, name)) or inspect.isfunction(getattr(module, name)))
        and not (getattr(module, name).__doc__ or "").strip()
    ]
    assert undocumented == []


def test_the_decisions_page_opens_with_its_generated_index() -> None:
    text = (DOCS / "DECISIONS.md").read_text(encoding="utf-8")
    assert "<!-- generated: python tools/docs_index.py docs/DECISIONS.md -->" in text.split("\n## 1.", 1)[0]
