# shellcheck shell=bash
# Sourced (not run) by tools/test.sh and tools/demo.sh: the one place that
# knows how the development environment is built.
#
# After sourcing, WALQUEUE_ROOT is the repository root and WALQUEUE_VENV its
# .venv; `walqueue_venv` makes sure .venv exists, runs on a Python >= 3.12
# (tools/find-python.sh) and holds requirements-test.txt plus the three
# distributions installed editable.
#
# The venv is reused while a stamp file matches: the interpreter, its version,
# and the hashes of requirements-test.txt and the three pyproject.toml files.
# Sources need no reinstall (the installs are editable); a changed pin,
# version, entry point or interpreter rebuilds the venv from scratch, since an
# editable install keeps reporting the old metadata otherwise.
#
# It also makes sure the dashboard's browser tests have a browser
# (`walqueue_browser`, below: apt-get as root only).

WALQUEUE_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
WALQUEUE_VENV="$WALQUEUE_ROOT/.venv"

walqueue_venv() {
    local python wanted stamp_file
    walqueue_browser
    python="$(bash "$WALQUEUE_ROOT/tools/find-python.sh")" || return 1

    wanted="$("$python" - "$WALQUEUE_ROOT" <<'PY'
import hashlib
import pathlib
import sys

root = pathlib.Path(sys.argv[1])
print(sys.executable)
print(sys.version.replace("\n", " "))
inputs = ["requirements-test.txt", "requirements-docs.txt"] + [
    f"packages/{name}/pyproject.toml" for name in ("walqueue-format", "walqueue-engine", "walqueue-cli")
]
for rel in inputs:
    print(rel, hashlib.sha256((root / rel).read_bytes()).hexdigest())
PY
)" || return 1

    stamp_file="$WALQUEUE_VENV/.walqueue-stamp"
    if [ -x "$WALQUEUE_VENV/bin/python" ] && [ -f "$stamp_file" ] \
        && [ "$(cat "$stamp_file")" = "$wanted" ]; then
        return 0
    fi

    echo "walqueue: setting up $WALQUEUE_VENV with $python" >&2
    "$python" -m venv --clear "$WALQUEUE_VENV" || return 1
    # One pip command, so that pip resolves the exact pins between the three
    # local distributions instead of looking them up on the package index.
    PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1 \
        "$WALQUEUE_VENV/bin/python" -m pip install --quiet \
        -r "$WALQUEUE_ROOT/requirements-test.txt" \
        -r "$WALQUEUE_ROOT/requirements-docs.txt" \
        -e "$WALQUEUE_ROOT/packages/walqueue-format" \
        -e "$WALQUEUE_ROOT/packages/walqueue-engine" \
        -e "$WALQUEUE_ROOT/packages/walqueue-cli" || return 1
    # Written last: an interrupted or failed setup is redone on the next run.
    printf '%s\n' "$wanted" >"$stamp_file"
}

# The dashboard's browser tests drive Debian's chromium through its own
# chromedriver (selenium never downloads one). When either is missing and we
# run as root with apt-get (CI on a fresh machine), install both, quietly;
# otherwise leave the machine alone: the browser tests then skip, saying why.
# Idempotent: nothing is run when both are on PATH. Never fails the caller.
walqueue_browser() {
    if command -v chromium >/dev/null 2>&1 && command -v chromedriver >/dev/null 2>&1; then
        return 0
    fi
    if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
        return 0
    fi
    echo "walqueue: installing chromium and chromium-driver for the dashboard's browser tests" >&2
    if ! { DEBIAN_FRONTEND=noninteractive apt-get update -qq \
        && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
            chromium chromium-driver; } >/dev/null 2>&1; then
        echo "walqueue: could not install chromium (the browser tests will say so)" >&2
    fi
    return 0
}
