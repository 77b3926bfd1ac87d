"""Where the dashboard runs: a `wsgiref` server on its own threads, placed by the ``--http`` options.

The options themselves are declared and checked in `options.py` (re-exported
here), which walqueue-serve imports without this module.

Why its own threads: the queue server's request path must not wait for a
browser. `serve_in_thread` answers each HTTP connection on a daemon thread
(a slow or silent client holds only its own thread, for at most
`CONNECTION_TIMEOUT` seconds per read), and a sampler thread reads the
metrics every `SAMPLE_SECONDS` for the throughput chart.

Binding: loopback by default. Any other address needs ``--http-allow-remote``
and an access token (``--http-token-file``, or the ``WALQUEUE_HTTP_TOKEN``
environment variable; never a command-line argument, which other users can
read in the process list). A request's ``Host`` must be the bound address,
a loopback name (``localhost``, ``127.0.0.1``, ``::1``) or a name given with
``--http-host`` (walqueue.dashboard.hosts).

Under load: the listening socket's backlog is `LISTEN_BACKLOG` (the
standard library's default of 5 makes a burst of connections wait for
SYN retries), and a request body that stops short of its Content-Length is
a prompt 400: the body is read with web.BODY_TIMEOUT, not the connection's.

`bind` comes apart from `serve_in_thread` so that walqueue-serve binds the
port before it opens or creates the store: a busy port then leaves nothing.
"""

from __future__ import annotations

import functools
import logging
import socket
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from walqueue.dashboard.hosts import DEFAULT_HOSTS
from walqueue.dashboard.options import HttpOptions, add_http_arguments, http_options, is_loopback, parse_address
from walqueue.dashboard.web import SOCKET_KEY

if TYPE_CHECKING:
    from wsgiref.simple_server import WSGIRequestHandler, WSGIServer

__all__ = [
    "CONNECTION_TIMEOUT",
    "HttpOptions",
    "RunningServer",
    "SAMPLE_SECONDS",
    "add_http_arguments",
    "bind",
    "http_options",
    "is_loopback",
    "parse_address",
    "serve_in_thread",
    "start_dashboard",
]

log = logging.getLogger("walqueue.dashboard")

#: Seconds a connection may stay silent before it is dropped.
CONNECTION_TIMEOUT: Final = 10.0
#: Seconds between two readings of the metrics for the throughput chart.
SAMPLE_SECONDS: Final = 5.0
#: The listening socket's backlog (the kernel caps it at net.core.somaxconn).
LISTEN_BACKLOG: Final = 1024

WsgiApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


@functools.cache
def _server_classes() -> tuple[type[WSGIServer], type[WSGIServer], type[WSGIRequestHandler]]:
    """The server classes (IPv4, IPv6) and the handler, made at the first serve.

    `wsgiref` pulls in `http.server` and `email`: a command that only parses
    ``--http`` (walqueue-serve without it) never imports them (DECISIONS §35).
    """
    import socketserver
    from wsgiref.simple_server import WSGIRequestHandler, WSGIServer

    class _Handler(WSGIRequestHandler):
        """wsgiref's handler with a read timeout, and its access log through `logging` instead of stderr."""

        timeout = CONNECTION_TIMEOUT

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (the base class's name)
            log.debug("%s %s", self.address_string(), format % args)

        def get_environ(self) -> dict[str, Any]:
            environ = super().get_environ()
            environ[SOCKET_KEY] = self.connection
            return environ

    class _ThreadingServer(socketserver.ThreadingMixIn, WSGIServer):
        daemon_threads = True
        block_on_close = False
        request_queue_size = LISTEN_BACKLOG

    class _ThreadingServer6(_ThreadingServer):
        address_family = socket.AF_INET6

    return _ThreadingServer, _ThreadingServer6, _Handler


@dataclass
class RunningServer:
    """A dashboard being served: its address, and `stop()` to end it (idempotent)."""

    host: str
    port: int
    server: WSGIServer
    thread: threading.Thread
    stopping: threading.Event

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/"

    def stop(self) -> None:
        """Stop answering, close the listening socket and end the sampler (idempotent)."""
        if not self.stopping.is_set():
            self.stopping.set()
            self.server.shutdown()
            self.server.server_close()
            self.thread.join()


def bind(host: str, port: int) -> WSGIServer:
    """A server bound and listening on ``host:port``, not yet answering; `OSError` if the address cannot be bound."""
    server4, server6, handler = _server_classes()
    return (server6 if ":" in host else server4)((host, port), handler)


def serve_in_thread(
    app: WsgiApp,
    host: str = "127.0.0.1",
    port: int = 0,
    *,
    sample: Callable[[], None] | None = None,
    bound: WSGIServer | None = None,
) -> RunningServer:
    """Serve `app` on ``host:port`` (port 0: any free one) from daemon threads; returns at once.

    `sample`, if given (a `Dashboard`'s ``sample``), is called every
    `SAMPLE_SECONDS` on a thread of its own until `stop()`; a failure there
    is logged and sampling goes on. `bound`, if given, is the server
    `bind(host, port)` made earlier. Raises `OSError` if the address cannot
    be bound.
    """
    server = bind(host, port) if bound is None else bound
    server.set_app(app)
    stopping = threading.Event()
    thread = threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.2}, daemon=True, name="walqueue-dashboard-http"
    )
    thread.start()
    if sample is not None:
        threading.Thread(
            target=_sampling, args=(sample, stopping), daemon=True, name="walqueue-dashboard-sampler"
        ).start()
    bound_port = server.server_address[1]
    return RunningServer(host, int(bound_port), server, thread, stopping)


def start_dashboard(
    backend: Any,
    options: HttpOptions,
    on_commit: Callable[[], None] | None = None,
    bound: WSGIServer | None = None,
) -> RunningServer:
    """Serve the dashboard of `backend` (a `Queue` or a `Client`) as `options` say, sampling for its chart.

    What ``walqueue-serve --http`` runs beside its socket. `on_commit` is
    called after each action that committed (walqueue-serve wakes its loop
    with it: the loop's parked waits must see a commit made by this
    thread). `bound`: the server `bind` made before the store was opened.
    Raises `OSError` if the address cannot be bound.
    """
    from walqueue.dashboard.app import Dashboard

    hosts = (options.host, *DEFAULT_HOSTS, *options.hosts)  # the loopback names can never be rebound
    app = Dashboard(backend, actions=options.actions, access_token=options.token, hosts=hosts, on_commit=on_commit)
    running = serve_in_thread(app, options.host, options.port, sample=app.sample, bound=bound)
    log.info("dashboard on %s (actions %s)", running.url, "enabled" if options.actions else "disabled")
    return running


def _sampling(sample: Callable[[], None], stopping: threading.Event) -> None:
    while not stopping.wait(SAMPLE_SECONDS):
        try:
            sample()
        except Exception:
            log.exception("the dashboard's sampler failed (it keeps trying)")
