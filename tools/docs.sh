#!/usr/bin/env bash
# Build the docs site: `bash tools/docs.sh [SPHINX ARGS...]`.
#
# Markdown pages under docs/ through MyST, the Furo theme and the API
# reference from the docstrings, into docs/_build/html. Warnings are errors
# and every reference must resolve (`-W --keep-going -n`): a broken link, a
# page missing from the table of contents or a public name without its entry
# fails the build. Uses the development .venv (tools/_venv.sh), which holds
# requirements-docs.txt; no network is needed beyond the package index that
# builds the .venv.
set -euo pipefail

# shellcheck source=tools/_venv.sh
. "$(dirname "${BASH_SOURCE[0]}")/_venv.sh"
walqueue_venv

exec "$WALQUEUE_VENV/bin/python" -m sphinx -W --keep-going -n -q -E -b html \
    "$WALQUEUE_ROOT/docs" "$WALQUEUE_ROOT/docs/_build/html" "$@"
