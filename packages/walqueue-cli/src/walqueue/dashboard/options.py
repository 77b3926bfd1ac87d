"""The ``--http`` options of `walqueue-serve`: declared, and checked into `HttpOptions`; nothing served here.

Apart from `http.py` (which serves) so that walqueue-serve without
``--http`` parses its command line without importing the dashboard: this
module needs only `argparse`; what checks an address (`ipaddress`, the
Host rules of `hosts.py`) is imported when ``--http`` is given
(DECISIONS §59).
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

__all__ = ["TOKEN_ENVIRONMENT", "HttpOptions", "add_http_arguments", "http_options", "is_loopback", "parse_address"]

#: The environment variable that may hold the access token.
TOKEN_ENVIRONMENT: Final = "WALQUEUE_HTTP_TOKEN"


@dataclass(frozen=True)
class HttpOptions:
    """Where and how to serve the dashboard, checked: a non-loopback host always has a token."""

    host: str
    port: int
    actions: bool
    token: str | None
    hosts: tuple[str, ...] = ()


def add_http_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``--http`` options, for `walqueue-serve` (or any command that serves a dashboard)."""
    group = parser.add_argument_group("dashboard")
    group.add_argument(
        "--http",
        metavar="HOST:PORT",
        help="serve the dashboard, /metrics and the JSON API here (loopback, e.g. 127.0.0.1:8080)",
    )
    group.add_argument(
        "--http-allow-remote",
        action="store_true",
        help="allow a non-loopback --http address (then an access token is required)",
    )
    group.add_argument(
        "--http-token-file", metavar="PATH", help=f"read the access token from PATH (or set {TOKEN_ENVIRONMENT})"
    )
    group.add_argument(
        "--http-host",
        metavar="NAME",
        action="append",
        default=[],
        help="also accept requests whose Host is NAME (repeatable; the bound address and the loopback names are; "
        "any other Host is refused with 421, against DNS rebinding)",
    )
    group.add_argument(
        "--http-actions",
        action="store_true",
        help="enable redrive and cancel from the dashboard (POST with the page's token; logged)",
    )


def http_options(arguments: argparse.Namespace, environ: Mapping[str, str] = os.environ) -> HttpOptions | None:
    """The checked options, or None without ``--http``; `ValueError` (a usage error) naming what is wrong."""
    if arguments.http is None:
        if arguments.http_allow_remote or arguments.http_token_file or arguments.http_actions or arguments.http_host:
            raise ValueError("--http-allow-remote, --http-token-file, --http-host and --http-actions need --http")
        return None
    host, port = parse_address(arguments.http)
    token = environ.get(TOKEN_ENVIRONMENT) or None
    if arguments.http_token_file:
        try:
            with open(arguments.http_token_file, encoding="utf-8") as file:
                token = file.read().strip()
        except (OSError, UnicodeDecodeError) as error:
            raise ValueError(f"cannot read --http-token-file: {error}") from None
    if token is not None:
        from walqueue.dashboard.web import check_access_token

        check_access_token(token)
    if not is_loopback(host):
        if not arguments.http_allow_remote:
            raise ValueError(f"--http {host} is not a loopback address: add --http-allow-remote (and a token)")
        if token is None:
            raise ValueError(f"a non-loopback --http needs an access token: --http-token-file or {TOKEN_ENVIRONMENT}")
    from walqueue.dashboard.hosts import check_host_name

    hosts = tuple(check_host_name(name) for name in arguments.http_host)
    return HttpOptions(host, port, bool(arguments.http_actions), token, hosts)


def parse_address(text: str) -> tuple[str, int]:
    """``HOST:PORT``, ``[IPV6]:PORT`` or ``:PORT`` (loopback) as ``(host, port)``; `ValueError` naming the fault."""
    host, colon, port_text = text.rpartition(":")
    if not colon or not port_text.isascii() or not port_text.isdigit() or not 0 <= int(port_text) <= 65535:
        raise ValueError(f"--http wants HOST:PORT with a port from 0 to 65535, not {text!r}")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    host = host or "127.0.0.1"
    import ipaddress

    try:
        ipaddress.ip_address(host)
    except ValueError:
        if host != "localhost":
            raise ValueError(f"--http wants an IP address (or localhost), not {host!r}") from None
    return host, int(port_text)


def is_loopback(host: str) -> bool:
    """Whether `host` (an IP address or ``localhost``) is reachable from this machine only."""
    import ipaddress

    return host == "localhost" or ipaddress.ip_address(host).is_loopback
