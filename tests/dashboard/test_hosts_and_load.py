"""The dashboard answers only its own names (DNS rebinding), and stays prompt under load and bad bodies."""

from __future__ import annotations

import json
import socket
import urllib.request
from pathlib import Path

import pytest
from dashboard_helpers import NOW, call, form_headers, refused_start, served_dashboard
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from walqueue import Queue
from walqueue.dashboard import Dashboard, RunningServer, serve_in_thread
from walqueue.dashboard.hosts import HostRule, host_of

pytestmark = pytest.mark.timeout(120)


def _raw(served: RunningServer, request: bytes, timeout: float = 8.0) -> bytes:
    """Send `request` as is and read the whole answer (the server closes after one)."""
    with socket.create_connection((served.host, served.port), timeout=timeout) as connection:
        connection.sendall(request)
        chunks = []
        while chunk := connection.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks)


def test_a_foreign_host_is_refused_on_every_route(app: Dashboard) -> None:
    for path in ("/", "/api/overview", "/api/task", "/metrics", "/login"):
        answer = call(app, path, headers={"Host": "rebind.attacker.example:8080"})
        assert answer.status == 421, path
        assert "--http-host" in answer.json()["error"]
    for host in ("127.0.0.1:8080", "localhost:8080", "LOCALHOST", "[::1]:8080", "127.0.0.1"):
        assert call(app, "/api/overview", headers={"Host": host}).status == 200, host


def test_a_foreign_host_over_http_gets_neither_the_token_nor_a_payload(served: RunningServer, queue: Queue) -> None:
    queue.put("secret", {"card": "4111"})
    port = served.port
    for path in (b"/", b"/api/task?id=secret"):
        answer = _raw(served, b"GET " + path + b" HTTP/1.1\r\nHost: rebind.attacker.example:%d\r\n\r\n" % port)
        assert answer.startswith(b"HTTP/1.0 421"), answer[:80]
        assert b"4111" not in answer and b"walqueue-action-token" not in answer


def test_an_action_from_a_rebound_name_with_a_matching_origin_is_refused(acting: Dashboard, queue: Queue) -> None:
    queue.put("t", {})
    evil = "rebind.attacker.example:8080"
    headers = {**form_headers(acting.action_token), "Host": evil, "Origin": f"http://{evil}"}
    assert call(acting, "/api/actions/cancel", method="POST", body=b"task_id=t", headers=headers).status == 421
    assert queue.get("t").status == "ready"  # type: ignore[union-attr]


def test_names_given_are_accepted_and_their_origin_too(queue: Queue) -> None:
    acting = Dashboard(queue, actions=True, clock=lambda: NOW, hosts=["queue.internal", "localhost"])
    queue.put("t", {})
    host = "queue.internal:8080"
    headers = {**form_headers(acting.action_token), "Host": host, "Origin": f"http://{host}"}
    assert call(acting, "/api/actions/cancel", method="POST", body=b"task_id=t", headers=headers).status == 200
    assert call(acting, "/api/overview", headers={"Host": "127.0.0.1"}).status == 421  # not on this list


@pytest.mark.parametrize(
    "origin", ["null", "http://rebind.attacker.example", "http://127.0.0.1:8080/x", "ftp://127.0.0.1:8080"]
)
def test_an_origin_outside_the_names_is_refused(acting: Dashboard, queue: Queue, origin: str) -> None:
    queue.put("t", {})
    headers = {**form_headers(acting.action_token), "Host": "127.0.0.1:8080", "Origin": origin}
    assert call(acting, "/api/actions/cancel", method="POST", body=b"task_id=t", headers=headers).status == 403
    assert queue.get("t").status == "ready"  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("header", "name"),
    [
        ("Example.COM.:80", "example.com"),
        ("[::1]:9", "::1"),
        ("127.0.0.1", "127.0.0.1"),
        ("a:b", None),
        ("[::1", None),
        ("user@host", None),
        ("", None),
        ("-bad-.example", None),
    ],
)
def test_host_headers_are_parsed_strictly(header: str, name: str | None) -> None:
    assert host_of(header) == name


def test_a_bad_host_name_is_refused_when_given() -> None:
    with pytest.raises(ValueError, match="not a host name"):
        HostRule.of(["bad name"])


def test_a_truncated_body_is_a_prompt_400_not_a_500_after_the_connection_timeout(
    served: RunningServer, acting: Dashboard
) -> None:
    request = (
        b"POST /api/actions/cancel HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        b"Content-Type: application/x-www-form-urlencoded\r\nX-WALQueue-Token: "
        + acting.action_token.encode()
        + b"\r\nContent-Length: 100\r\n\r\ntask_id=x"
    )
    answer = _raw(served, request, timeout=8.0)  # the connection's own timeout is 10 s
    assert answer.startswith(b"HTTP/1.0 400"), answer[:200]
    assert b"Content-Length" in answer.split(b"\r\n\r\n", 1)[1]


def test_a_body_cut_by_a_closed_connection_is_a_400(served: RunningServer, acting: Dashboard) -> None:
    request = (
        b"POST /api/actions/cancel HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        b"Content-Type: application/x-www-form-urlencoded\r\nContent-Length: 100\r\n\r\ntask_id=x"
    )
    with socket.create_connection((served.host, served.port), timeout=8.0) as connection:
        connection.sendall(request)
        connection.shutdown(socket.SHUT_WR)
        answer = connection.recv(65536)
    assert answer.startswith(b"HTTP/1.0 400"), answer[:200]


def test_the_listen_backlog_takes_a_burst_of_connections(queue: Queue) -> None:
    """A burst larger than the standard library's backlog of 5 is queued by the kernel at once, not retried."""
    running = serve_in_thread(Dashboard(queue, clock=lambda: NOW), "127.0.0.1", 0)
    try:
        listening = running.server.socket
        running.server.shutdown()  # nobody accepts now: the kernel's queue alone holds the burst
        burst = 64
        connections = []
        try:
            for _ in range(burst):
                connection = socket.socket()
                connection.setblocking(False)
                connection.connect_ex(listening.getsockname())
                connections.append(connection)
            # Loopback handshakes complete at once; one refused by a full queue is retried only after 1 s.
            assert _queued(listening, burst, wait=0.5) == burst
        finally:
            for connection in connections:
                connection.close()
    finally:
        running.stop()


def _queued(listening: socket.socket, most: int, wait: float) -> int:
    """How many completed connections wait in `listening`'s accept queue (accepting them)."""
    listening.settimeout(wait)
    count = 0
    try:
        while count < most:
            accepted, _ = listening.accept()
            accepted.close()
            count += 1
    except TimeoutError:
        pass
    return count


def test_a_busy_http_port_fails_the_start_and_creates_nothing(src_pythonpath: str, place: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        status, err = refused_start(src_pythonpath, place, "--http", f"127.0.0.1:{busy.getsockname()[1]}")
    assert status == 3, err
    assert "cannot serve the dashboard" in err
    assert sorted(path.name for path in place.iterdir()) == []


def test_the_served_dashboard_accepts_its_http_host_names_only(src_pythonpath: str, place: Path) -> None:
    with served_dashboard(src_pythonpath, place, "--http-host", "queue.internal") as url:
        statuses = {}
        for host in ("queue.internal", "localhost", "127.0.0.1", "rebind.attacker.example"):
            request = urllib.request.Request(url + "api/overview", headers={"Host": host})
            try:
                with urllib.request.urlopen(request, timeout=30) as answer:
                    statuses[host] = answer.status
                    json.loads(answer.read())
            except urllib.error.HTTPError as error:
                statuses[host] = error.code
        assert statuses == {"queue.internal": 200, "localhost": 200, "127.0.0.1": 200, "rebind.attacker.example": 421}


@pytest.mark.parametrize("name", ["", "bad name", "*"])
def test_a_bad_http_host_is_a_usage_error(src_pythonpath: str, place: Path, name: str) -> None:
    status, err = refused_start(src_pythonpath, place, "--http", "127.0.0.1:0", "--http-host", name)
    assert status == 64, err
    assert "host name" in err
    assert sorted(path.name for path in place.iterdir()) == []


def test_the_served_dashboard_takes_the_bound_address_the_loopback_names_and_the_given_ones(queue: Queue) -> None:
    from walqueue.dashboard.http import HttpOptions, start_dashboard

    running = start_dashboard(queue, HttpOptions("127.0.0.2", 0, False, None, ("queue.internal",)))
    try:
        app = running.server.get_app()
        assert isinstance(app, Dashboard)
        assert app.hosts.names == {"127.0.0.2", "localhost", "127.0.0.1", "::1", "queue.internal"}
    finally:
        running.stop()


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    name=st.from_regex(
        r"[a-z0-9]([a-z0-9-]{0,20}[a-z0-9])?(\.[a-z0-9]([a-z0-9-]{0,20}[a-z0-9])?){0,3}", fullmatch=True
    ),
    port=st.one_of(st.none(), st.integers(0, 65535)),
    upper=st.booleans(),
)
def test_no_other_name_reads_anything(app: Dashboard, name: str, port: int | None, upper: bool) -> None:
    assume(name not in {"localhost", "127.0.0.1"})
    header = (name.upper() if upper else name) + ("" if port is None else f":{port}")
    assert call(app, "/api/overview", headers={"Host": header}).status == 421


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=60))
def test_any_host_header_parses_to_a_name_or_none_and_never_raises(header: str) -> None:
    name = host_of(header)
    assert name is None or (name == name.lower() and not name.endswith("."))
