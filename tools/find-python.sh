#!/usr/bin/env bash
# Print the absolute path of a Python >= 3.12 interpreter, for tools/_venv.sh.
#
# Order: $PYTHON if set (an explicit choice: if it is too old we fail rather
# than silently use another), then python3.12, python3.13 and python3 on PATH,
# then pyenv's installed versions 3.12 and later (oldest first: 3.12 is the
# floor we support, so it is what a plain run should test). A pyenv shim for a
# version that is not activated fails to run, which is why every candidate is
# actually executed rather than trusted by name.
set -u

MIN_CHECK='import sys; sys.exit(0 if sys.version_info >= (3, 12) else 1)'

# Print the real executable of candidate $1 if it runs and is recent enough.
try_python() {
    "$1" -c "$MIN_CHECK" >/dev/null 2>&1 || return 1
    "$1" -c 'import sys; print(sys.executable)' 2>/dev/null
}

if [ -n "${PYTHON:-}" ]; then
    if try_python "$PYTHON"; then
        exit 0
    fi
    echo "find-python: \$PYTHON='$PYTHON' is not a working Python >= 3.12" >&2
    exit 1
fi

for name in python3.12 python3.13 python3; do
    if command -v "$name" >/dev/null 2>&1 && try_python "$name"; then
        exit 0
    fi
done

if command -v pyenv >/dev/null 2>&1; then
    pyenv_root="$(pyenv root 2>/dev/null)"
else
    pyenv_root="${PYENV_ROOT:-$HOME/.pyenv}"
fi
if [ -n "$pyenv_root" ] && [ -d "$pyenv_root/versions" ]; then
    # The glob sorts 3.12.x before 3.13.x; `sort -V` keeps 3.12.10 after 3.12.9.
    while IFS= read -r candidate; do
        if [ -x "$candidate" ] && try_python "$candidate"; then
            exit 0
        fi
    done < <(printf '%s\n' "$pyenv_root"/versions/3.1[2-9]*/bin/python3 | sort -V)
fi

cat >&2 <<'MSG'
find-python: no Python >= 3.12 found.
  Tried $PYTHON, python3.12, python3.13 and python3 on PATH, and pyenv's versions.
  Install Python 3.12 or later, or set PYTHON=/path/to/python3.12.
MSG
exit 1
