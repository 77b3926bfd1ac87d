#!/usr/bin/env bash
# The demo: `bash tools/demo.sh`.
#
# Runs straight from the source tree: no virtual environment, no install,
# nothing downloaded. WALQueue needs only the standard library, so a Python
# >= 3.12 (tools/find-python.sh) with the three src directories on PYTHONPATH
# is enough. It talks to the JSON-lines consumer (`python -m walqueue.cli
# DIR`, README "The command-line consumer") in a temporary directory: two
# producer/worker sessions in two separate processes, each request shown with
# its answer, then the offline inspector (`python -m walqueue.format.fsck`,
# the `walqueue-fsck` command) on what they left.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
echo "demo: looking for a Python >= 3.12 (tools/find-python.sh) ..."
python="$(bash "$root/tools/find-python.sh")"
echo "demo: using $python, from the source tree (PYTHONPATH=packages/*/src; nothing is installed)"
export PYTHONPATH="$root/packages/walqueue-format/src:$root/packages/walqueue-engine/src:$root/packages/walqueue-cli/src"

work="$(mktemp -d "${TMPDIR:-/tmp}/walqueue-demo.XXXXXX")"
trap 'rm -rf "$work"' EXIT
queue_dir="$work/queue"

# One consumer process: the requests in file $1 go in on stdin, the answers
# come back in order; each request is printed with its answer below it.
session() {
    local requests="$1" answers="$work/answers" status=0
    "$python" -m walqueue.cli "$queue_dir" <"$requests" >"$answers" || status=$?
    local request answer
    while IFS= read -r request <&3; do
        IFS= read -r answer <&4 || answer="(no answer)"
        printf '  > %s\n  < %s\n' "$request" "$answer"
    done 3<"$requests" 4<"$answers"
    if [ "$status" -ne 0 ]; then
        echo "demo: the consumer exited with status $status" >&2
        return "$status"
    fi
}

echo "== Session 1: $queue_dir"
echo "   put one task, put two at once (report-7 only from t=500), retry the first"
echo "   put (identical: accepted, nothing written), reuse its key for other work"
echo "   (KeyConflict), lease two tasks at t=100, ack one, release the other for"
echo "   60 s, try the used lease again (StaleLease), and look at the counts."
cat >"$work/session1.jsonl" <<'JSONL'
{"id": 1, "op": "put", "task_id": "email-1", "payload": {"to": "ada@example.org"}}
{"id": 2, "op": "put_many", "tasks": [{"task_id": "email-2", "payload": {"to": "bob@example.org"}}, {"task_id": "report-7", "payload": {"month": "2026-10"}, "available_at": 500}]}
{"id": 3, "op": "put", "task_id": "email-1", "payload": {"to": "ada@example.org"}}
{"id": 4, "op": "put", "task_id": "email-1", "payload": {"to": "eve@example.org"}}
{"id": 5, "op": "reserve", "worker": "w1", "now": 100, "lease_seconds": 30, "limit": 2}
{"id": 6, "op": "ack", "now": 110, "lease": {"task_id": "email-1", "worker": "w1", "generation": 1, "deadline": 130, "attempts": 1, "payload": {"to": "ada@example.org"}}}
{"id": 7, "op": "release", "now": 115, "delay": 60, "lease": {"task_id": "email-2", "worker": "w1", "generation": 1, "deadline": 130, "attempts": 1, "payload": {"to": "bob@example.org"}}}
{"id": 8, "op": "ack", "now": 120, "lease": {"task_id": "email-1", "worker": "w1", "generation": 1, "deadline": 130, "attempts": 1, "payload": {"to": "ada@example.org"}}}
{"id": 9, "op": "stats"}
JSONL
session "$work/session1.jsonl"

echo
echo "== Session 2: a new process on the same directory finds everything as it was"
echo "   (email-2 waits until t=175), leases it at t=200 and acks it."
cat >"$work/session2.jsonl" <<'JSONL'
{"id": 10, "op": "get", "task_id": "email-2"}
{"id": 11, "op": "reserve", "worker": "w2", "now": 200, "lease_seconds": 30}
{"id": 12, "op": "ack", "now": 210, "lease": {"task_id": "email-2", "worker": "w2", "generation": 2, "deadline": 230, "attempts": 2, "payload": {"to": "bob@example.org"}}}
{"id": 13, "op": "tasks", "status": "ready"}
JSONL
session "$work/session2.jsonl"

echo
echo "== walqueue-fsck $queue_dir   (here: python -m walqueue.format.fsck)"
"$python" -m walqueue.format.fsck "$queue_dir"
echo
echo "demo: done (the temporary directory is removed)"
