"""The dashboard of a WALQueue: a WSGI app with a page, a JSON API and Prometheus ``/metrics``.

Embed it in an application's own web server::

    from walqueue import Queue
    from walqueue.dashboard import Dashboard

    app = Dashboard(Queue("/var/lib/app/queue"))   # any WSGI server can serve `app`

or run it beside a served queue (``walqueue-serve DIR --socket PATH --http
127.0.0.1:8080``), or on its own threads with `serve_in_thread`. Standard
library only; the page needs no network beyond the dashboard itself.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from walqueue.dashboard.app import Dashboard
    from walqueue.dashboard.http import RunningServer, serve_in_thread

__all__ = ["Dashboard", "RunningServer", "serve_in_thread"]


def __getattr__(name: str) -> Any:
    """Import the dashboard's parts on first use: `walqueue-serve` without ``--http`` imports none of them."""
    if name == "Dashboard":
        from walqueue.dashboard.app import Dashboard

        return Dashboard
    if name in ("RunningServer", "serve_in_thread"):
        from walqueue.dashboard import http

        return getattr(http, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
