"""The supervisor's kill of a child that outlived its stop says how long it really waited, and says it once."""

from __future__ import annotations

import logging
import os
import sys
import threading

import pytest

from walqueue.worker import supervisor

STUBBORN = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(60)"


@pytest.mark.timeout(60)
def test_a_child_killed_after_the_stop_is_logged_once_with_the_seconds_that_passed(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(supervisor, "_KILL_MARGIN_SECONDS", 1.5)
    ward = supervisor.Supervisor(None, os.devnull, [[sys.executable, "-c", STUBBORN]], grace=0.5)
    stopper = threading.Timer(1.0, ward.stop)  # the child has set SIGTERM aside by then
    stopper.start()
    with caplog.at_level(logging.ERROR, logger="walqueue.worker"):
        assert ward.run()  # the supervisor's loop runs in the main thread; it returns once all is stopped
    stopper.join()
    [line] = [record.getMessage() for record in caplog.records if "killed" in record.getMessage()]
    waited = float(line.split(" still running ")[1].split(" s ")[0])
    assert waited >= 0.5 + 1.5 and "(its grace: 0.5 s)" in line, line
