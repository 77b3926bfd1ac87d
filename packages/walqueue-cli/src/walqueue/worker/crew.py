"""`Crew`: what the worker's roles share, made once by `Worker` and handed to each role.

The stop signals and the reserve's lock (`Signals`), the completer (the
one place that ends a lease), the keep-alive's registry of runs, the room
for leases with the acks waiting for a batch (`Pending`), and the hand-off
from the fetcher to the executors. A role holds the crew rather than each
piece, so that what it reaches is visible in one type.
"""

from __future__ import annotations

import queue as queue_module
import threading
from dataclasses import dataclass, field

from walqueue.worker.complete import Completer
from walqueue.worker.monitor import Monitor
from walqueue.worker.pending import Pending
from walqueue.worker.run import Run

__all__ = ["Crew", "Signals"]


@dataclass(eq=False)
class Signals:
    """What every role watches: stop reserving, a stop was asked, no more grace, done; and the reserve's lock."""

    stopping: threading.Event = field(default_factory=threading.Event)  # no more reserves
    stop_requested: threading.Event = field(default_factory=threading.Event)
    hurry: threading.Event = field(default_factory=threading.Event)  # release at once, no more grace
    done: threading.Event = field(default_factory=threading.Event)
    monitor_stop: threading.Event = field(default_factory=threading.Event)
    reserving: threading.Lock = field(default_factory=threading.Lock)


@dataclass(eq=False)
class Crew:
    """The roles' shared parts (see the module's docstring)."""

    signals: Signals
    completer: Completer
    monitor: Monitor
    pending: Pending
    handoff: queue_module.SimpleQueue[Run | None] = field(default_factory=queue_module.SimpleQueue)
