"""Sphinx configuration of the WALQueue docs site (`bash tools/docs.sh`).

Markdown pages through MyST, the Furo theme, and an API reference generated
from the docstrings (autodoc). The site is built with warnings as errors and
`nitpicky` on (tools/docs.sh passes `-W --keep-going -n`), so a broken link,
a missing page or a reference to an undocumented `walqueue` name fails the
build. It needs no network: no intersphinx inventory is fetched, so names
from the standard library are left unlinked rather than looked up.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
for layer in ("walqueue-format", "walqueue-engine", "walqueue-cli"):
    sys.path.insert(0, str(ROOT / "packages" / layer / "src"))

import walqueue  # noqa: E402  (after the src directories are on sys.path)

project = "WALQueue"
author = "The WALQueue authors"
copyright = "2026, The WALQueue authors"  # noqa: A001  (Sphinx's own setting name)
release = walqueue.__version__
version = release

extensions = ["myst_parser", "sphinx.ext.autodoc"]
source_suffix = {".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build", "bench", "archive/README.md"]
myst_heading_anchors = 4
myst_enable_extensions = ["colon_fence"]
# Code blocks of other languages (JSON with placeholders, shell sessions) are
# shown as they are; an unlexable block is not a documentation error.
suppress_warnings = ["misc.highlighting_failure"]

# Docstrings quote names in single backquotes, as Markdown does: show them as code.
default_role = "literal"
autodoc_member_order = "bysource"
autodoc_typehints = "signature"
autodoc_default_options = {"members": True}

nitpicky = True
# Only walqueue's own names must resolve: without intersphinx (no network at
# build time) a standard-library or typing name has nowhere to point.
nitpick_ignore_regex = [
    (r"py:.*", r"(?!walqueue\b).*"),
    (r"py:.*", r"walqueue\..*\._.*"),
    # a generic function's type variables (``R``, ``P``): no page of their own to point at
    (r"py:.*", r"walqueue\..*\.[A-Z]"),
]

html_theme = "furo"
html_title = f"WALQueue {release}"
html_static_path: list[str] = []
