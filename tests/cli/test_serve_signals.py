"""walqueue-serve stops on SIGTERM wherever the signal lands.

A signal delivered to a thread other than the main one (or to the main
thread just before it enters `poll`) runs its C-level handler at once, but
its Python handler only when the main thread next runs bytecode. Without
`signal.set_wakeup_fd` the accept loop slept through such a SIGTERM (the
torture tool's hostile-clients campaign found it: 2 of about 7 loaded
40-second runs hung at a stop). Sending SIGTERM to a helper thread makes the case
deterministic.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from support.children import child_environment
from support.servers import short_directory

pytestmark = pytest.mark.timeout(60)

_CHILD = """
import os, signal, sys, threading, time
from walqueue.serve.cli import main

directory, socket_path = sys.argv[1:3]

def deliver() -> None:
    while not os.path.exists(socket_path):
        time.sleep(0.01)
    time.sleep(0.3)  # the accept loop is blocked in poll by now
    signal.pthread_kill(threading.get_ident(), signal.SIGTERM)

threading.Thread(target=deliver, daemon=True).start()
sys.exit(main([directory, "--socket", socket_path, "--log-level", "WARNING"]))
"""


def test_a_sigterm_delivered_to_another_thread_stops_the_server() -> None:
    with short_directory() as place:
        child = subprocess.run(
            [sys.executable, "-c", _CHILD, str(place / "q"), str(place / "s")],
            env=child_environment(),
            capture_output=True,
            timeout=30,
        )
        assert child.returncode == 0, child.stderr.decode(errors="replace")
        assert not (place / "s").exists()
