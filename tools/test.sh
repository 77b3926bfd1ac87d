#!/usr/bin/env bash
# The test command: `bash tools/test.sh [PYTEST ARGS...]`.
#
# Sets up (or reuses) .venv with a Python >= 3.12, the pinned test tools and
# the three distributions installed editable, then runs pytest there with the
# given arguments. With none it runs the whole suite, slow packaging tests
# included; `-m "not slow"` skips those.
set -euo pipefail

# shellcheck source=tools/_venv.sh
. "$(dirname "${BASH_SOURCE[0]}")/_venv.sh"
walqueue_venv

exec "$WALQUEUE_VENV/bin/python" -m pytest "$@"
