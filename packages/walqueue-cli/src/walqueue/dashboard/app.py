"""`Dashboard`: the WSGI application, its routes, and the page it serves.

Why WSGI: it is the standard library's web interface, so an application
embeds the dashboard in its own server (mount it under a prefix with any
WSGI router), and `walqueue-serve --http` runs it on `wsgiref` in a thread
of its own (walqueue.dashboard.http). The page is plain HTML, CSS and a
little JavaScript shipped in this package (static/), with no external
resource: it works offline, and its Content-Security-Policy forbids
anything else. The page fills itself from the JSON API with ``textContent``,
never markup, so whatever a payload or an error message holds is shown as
text.

Routes (GET unless said; the JSON API's are declared in walqueue.dashboard.routes):
  /                      the page
  /api/                  the JSON API's index: routes, their fields, a task's fields
  /static/app.js, /static/style.css
  /api/overview          counts, ages, WAL, snapshot, fsync and group-size histograms, counters
  /api/throughput        puts, acks, releases, deaths per minute over the last hour
  /api/leases            leased tasks (after=, limit=, page=)
  /api/dead              dead letters (after=, limit=, page=, group=)
  /api/dead/groups       dead letters grouped by last error
  /api/task?id=ID        one task
  /metrics               Prometheus text exposition 0.0.4
  /api/queues            every queue: counts by status, oldest ready age, limits, paused (lanes)
  POST /api/actions/redrive, /api/actions/cancel   (only with actions enabled; token)
  POST /api/actions/pause, /api/actions/resume     (queue=NAME; the same flag and token)
  /login?token=T         with an access token: sets the cookie that carries it, then redirects to /

Every route first checks the ``Host`` header against the dashboard's own
names (walqueue.dashboard.hosts): any other is a 421, the defence against
DNS rebinding.
"""

from __future__ import annotations

import hmac
import html
import logging
import secrets
import time
from collections.abc import Callable, Iterable, Mapping
from functools import cache
from importlib import resources
from typing import Any, Final

from walqueue import QueueClosed
from walqueue.dashboard import api
from walqueue.dashboard.actions import ACTIONS, QUEUE_ACTIONS, run_action, run_queue_action
from walqueue.dashboard.hosts import HostRule
from walqueue.dashboard.prometheus import CONTENT_TYPE, render
from walqueue.dashboard.routes import api_index
from walqueue.dashboard.sampler import Sampler
from walqueue.dashboard.source import Backend, Source
from walqueue.dashboard.web import (
    HttpError,
    Response,
    check_access_token,
    error_response,
    json_response,
    parse_query,
)

__all__ = ["ACCESS_COOKIE", "Dashboard"]

log = logging.getLogger("walqueue.dashboard")

#: The cookie that carries the access token once `/login` was visited.
ACCESS_COOKIE: Final = "walqueue_access"

_STATIC: Final = {
    "/static/app.js": ("app.js", "text/javascript; charset=utf-8"),
    "/static/style.css": ("style.css", "text/css; charset=utf-8"),
    "/static/icon.svg": ("icon.svg", "image/svg+xml"),
}

StartResponse = Callable[..., Any]


@cache
def _asset(name: str) -> bytes:
    return resources.files("walqueue.dashboard").joinpath("static", name).read_bytes()


class Dashboard:
    """The dashboard of one queue, as a WSGI application.

    ``Dashboard(backend, *, actions=False, access_token=None, clock=time.time)``:
    `backend` is a `Queue`, a `Client`, or anything with their read calls
    (`stats`, `get`, `tasks`; `metrics` and the bounded `page` when it has
    them) and, for actions, `redrive` and `cancel`. `actions` enables the
    POST actions, which then need `action_token` (random per instance,
    embedded in the page). `access_token`, if given, is required on every
    request (``Authorization: Bearer T`` or the cookie `/login?token=T`
    sets): use it whenever the address is reachable by others. `clock`
    gives the ``now`` for ages, times left and redrives (seconds since the
    epoch, as the queue's callers use). `hosts` are the names a request's
    ``Host`` may carry (default: localhost, 127.0.0.1 and ::1); any other
    is refused with 421, so that a hostile name pointed at this address
    (DNS rebinding) reads nothing. An application serving it under its own
    name passes that name. `on_commit`, if given, is called after each
    action (walqueue-serve wakes its loop with it).
    """

    def __init__(
        self,
        backend: Backend,
        *,
        actions: bool = False,
        access_token: str | None = None,
        clock: Callable[[], float] = time.time,
        hosts: Iterable[str] | None = None,
        on_commit: Callable[[], None] | None = None,
    ) -> None:
        if access_token is not None:
            check_access_token(access_token)
        self.hosts = HostRule.of(hosts)
        self.source = Source(backend, on_commit)
        self.sampler = Sampler()
        self.actions = actions
        self.action_token = secrets.token_urlsafe(32)
        self.access_token = access_token
        self.clock = clock

    def sample(self) -> None:
        """Take one reading for the throughput chart (a background thread may call this every few seconds)."""
        now = self.clock()
        self.sampler.observe(now, self.source.metrics(self.source.now(now)))

    # -- WSGI ------------------------------------------------------------------------

    def __call__(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        try:
            response = self._route(environ)
        except HttpError as error:
            response = error_response(error)
        except QueueClosed as error:
            response = error_response(HttpError(503, f"the queue is closed: {error}"))
        except Exception:
            log.exception("dashboard request %s %s failed", environ.get("REQUEST_METHOD"), environ.get("PATH_INFO"))
            response = error_response(HttpError(500, "internal error (logged on the server)"))
        start_response(response.status_line(), response.header_list())
        return [b"" if environ.get("REQUEST_METHOD") == "HEAD" else response.body]

    def _route(self, environ: Mapping[str, Any]) -> Response:
        path = environ.get("PATH_INFO") or "/"
        method = environ.get("REQUEST_METHOD", "GET")
        self._check_host(environ)
        if path == "/login":
            return self._login(environ)
        self._check_access(environ)
        if path.startswith("/api/actions/"):
            action = path.removeprefix("/api/actions/")
            if action not in ACTIONS and action not in QUEUE_ACTIONS:
                known = ", ".join([*ACTIONS, *QUEUE_ACTIONS])
                raise HttpError(404, f"no such action {action[:60]!r} (known: {known})")
            if method != "POST":
                raise HttpError(405, "actions are POST requests", [("Allow", "POST")])
            if not self.actions:
                raise HttpError(403, "actions are disabled (start the dashboard with actions enabled)")
            now = self.source.now(self.clock())
            remote = str(environ.get("REMOTE_ADDR", "?"))
            if action in QUEUE_ACTIONS:
                return json_response(
                    run_queue_action(self.source, action, environ, self.action_token, lambda: remote, self.hosts)
                )
            answer = run_action(self.source, action, environ, self.action_token, now, lambda: remote, self.hosts)
            return json_response(answer)
        handler = self._views().get(path)
        if handler is None:
            raise HttpError(404, f"no such page {path[:100]!r}")
        if method not in ("GET", "HEAD"):
            raise HttpError(405, f"{path} answers GET only", [("Allow", "GET, HEAD")])
        return handler(environ)

    def _views(self) -> dict[str, Callable[[Mapping[str, Any]], Response]]:
        return {
            "/": self._page,
            "/static/app.js": self._static,
            "/static/style.css": self._static,
            "/static/icon.svg": self._static,
            "/metrics": self._metrics,
            "/api/": lambda e: self._json(lambda now: api_index(self.actions), e),
            "/api": lambda e: self._json(lambda now: api_index(self.actions), e),
            "/api/overview": lambda e: self._json(
                lambda now: api.overview(self.source, self.sampler, now, self.clock()), e
            ),
            "/api/throughput": lambda e: self._json(lambda now: api.throughput(self.sampler, self.clock()), e),
            "/api/leases": lambda e: json_response(api.leases_page(self.source, e, self.source.now(self.clock()))),
            "/api/dead": lambda e: json_response(api.dead_page(self.source, e, self.source.now(self.clock()))),
            "/api/dead/groups": lambda e: json_response(api.dead_groups(self.source, e)),
            "/api/task": lambda e: json_response(api.task_lookup(self.source, e, self.source.now(self.clock()))),
            "/api/queues": lambda e: self._json(lambda now: api.queues(self.source, now), e),
        }

    def _json(self, view: Callable[[int], Any], environ: Mapping[str, Any]) -> Response:
        parse_query(environ, ())
        return json_response(view(self.source.now(self.clock())))

    # -- pages -----------------------------------------------------------------------

    def _page(self, environ: Mapping[str, Any]) -> Response:
        parse_query(environ, ())
        text = _asset("index.html").decode("utf-8")
        text = text.replace("{{ACTIONS}}", "on" if self.actions else "off")
        text = text.replace("{{ACTION_TOKEN}}", html.escape(self.action_token if self.actions else "", quote=True))
        return Response(200, text.encode("utf-8"), "text/html; charset=utf-8")

    def _static(self, environ: Mapping[str, Any]) -> Response:
        name, kind = _STATIC[environ["PATH_INFO"]]
        return Response(200, _asset(name), kind)

    def _metrics(self, environ: Mapping[str, Any]) -> Response:
        parse_query(environ, ())
        now = self.clock()
        metrics = self.source.metrics(self.source.now(now))
        self.sampler.observe(now, metrics)
        return Response(200, render(metrics, units_per_second=self.source.units()).encode("utf-8"), CONTENT_TYPE)

    # -- access ----------------------------------------------------------------------

    def _check_host(self, environ: Mapping[str, Any]) -> None:
        host = environ.get("HTTP_HOST")
        if not self.hosts.allows(host):
            raise HttpError(
                421,
                f"Host {str(host)[:100]!r} is not a name of this dashboard (accepted: {self.hosts.describe()}); "
                "serve it under another name with --http-host NAME",
            )

    def _check_access(self, environ: Mapping[str, Any]) -> None:
        token = self.access_token
        if token is None:
            return
        given = ""
        authorization = environ.get("HTTP_AUTHORIZATION", "")
        if authorization.startswith("Bearer "):
            given = authorization.removeprefix("Bearer ")
        else:
            for part in environ.get("HTTP_COOKIE", "").split(";"):
                name, _, value = part.strip().partition("=")
                if name == ACCESS_COOKIE:
                    given = value
        if not hmac.compare_digest(given.encode("utf-8", "surrogatepass"), token.encode("utf-8")):
            raise HttpError(
                401,
                "this dashboard needs its access token: visit /login?token=TOKEN once",
                [("WWW-Authenticate", 'Bearer realm="walqueue"')],
            )

    def _login(self, environ: Mapping[str, Any]) -> Response:
        fields = parse_query(environ, ("token",))
        if self.access_token is None:
            raise HttpError(404, "this dashboard needs no login")
        given = fields.get("token", "")
        if not hmac.compare_digest(given.encode("utf-8", "surrogatepass"), self.access_token.encode("utf-8")):
            raise HttpError(401, "wrong access token")
        cookie = f"{ACCESS_COOKIE}={self.access_token}; HttpOnly; SameSite=Strict; Path=/"
        return Response(303, b"", "text/plain; charset=utf-8", [("Location", "/"), ("Set-Cookie", cookie)])
