"""Print the index of a numbered docs page: `python tools/docs_index.py docs/DECISIONS.md`.

A page of numbered sections (`## 12. Title`) opens with a generated list of
links to them, so a reader finds a decision by its subject, and a section
added at the end is listed by running this again (tests/docs check that the
list is what this prints). Anchors are the slugs the docs site and GitHub
give a heading: lower case, punctuation dropped, spaces as hyphens.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

SECTION = re.compile(r"^## (\d+)\. (.+)$")


def slug(title: str) -> str:
    """The anchor of a heading, as MyST (`myst_heading_anchors`) and GitHub make it."""
    text = title.strip().lower().replace("`", "")
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def index(text: str) -> list[str]:
    """One Markdown list item per numbered section, in the page's order."""
    items: list[str] = []
    in_code = False
    for line in text.splitlines():
        if line.startswith("```"):
            in_code = not in_code
            continue
        match = None if in_code else SECTION.match(line)
        if match:
            heading = f"{match.group(1)}. {match.group(2)}"
            items.append(f"- [{heading}](#{slug(heading)})")
    return items


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("page", type=Path, help="a Markdown page with `## N. Title` sections")
    arguments = parser.parse_args(argv)
    print("\n".join(index(arguments.page.read_text(encoding="utf-8"))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
