#!/usr/bin/env bash
# The demo: `bash tools/demo.sh`.
#
# Runs straight from the source tree: no virtual environment, no install,
# nothing downloaded. WALQueue needs only the standard library, so a Python
# >= 3.12 (tools/find-python.sh) with the three src directories on PYTHONPATH
# is enough. In a temporary directory it runs tools/demo_functions.py: task
# functions enqueued through walqueue-serve, a fleet of two walqueue-worker
# processes running them (a retry, a dead task with its last error, results
# read back, a follow-up chain), then the offline inspector (`python -m
# walqueue.format.fsck`, the `walqueue-fsck` command) on what they left.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
echo "demo: looking for a Python >= 3.12 (tools/find-python.sh) ..."
python="$(bash "$root/tools/find-python.sh")"
echo "demo: using $python, from the source tree (PYTHONPATH=packages/*/src; nothing is installed)"
export PYTHONPATH="$root/packages/walqueue-format/src:$root/packages/walqueue-engine/src:$root/packages/walqueue-cli/src"

work="$(mktemp -d "${TMPDIR:-/tmp}/walqueue-demo.XXXXXX")"
trap 'rm -rf "$work"' EXIT
queue_dir="$work/queue"

# The task queue (tools/demo_functions.py): walqueue-serve, two walqueue-worker
# processes running its App, and a producer enqueueing decorated functions
# through a Client and reading their results back.
"$python" "$root/tools/demo_functions.py" "$work"

echo
echo "== walqueue-fsck $queue_dir   (here: python -m walqueue.format.fsck)"
"$python" -m walqueue.format.fsck "$queue_dir"
echo
echo "demo: done (the temporary directory is removed)"
