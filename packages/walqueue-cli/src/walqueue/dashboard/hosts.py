"""Which ``Host`` (and ``Origin``) names the dashboard answers: its defence against DNS rebinding.

Why: a hostile page can point a name of its own (``rebind.attacker.example``)
at 127.0.0.1; the browser then sends the page's requests, with
``Host: rebind.attacker.example:PORT`` and a matching ``Origin``, to the
dashboard, and reads the answers as same-origin. Refusing every Host that
is not one of the dashboard's own names closes that door: the attacker's
name is never on the list. The list is the bound address, ``localhost``,
and the names the operator gives (``--http-host NAME``, repeatable); an
embedding application passes its own (``Dashboard(..., hosts=[...])``).

A request without a ``Host`` header (HTTP/1.0 tools) is not a browser's and
passes; an action's ``Origin``, when present, must name an accepted host too.
"""

from __future__ import annotations

import ipaddress
import re
import urllib.parse
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

__all__ = ["DEFAULT_HOSTS", "HostRule", "check_host_name", "host_of"]

#: The names accepted when none are given: the loopback names a local browser uses.
DEFAULT_HOSTS: Final = ("localhost", "127.0.0.1", "::1")

_NAME: Final = re.compile(
    r"(?=.{1,253}\Z)[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?(?:\.[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?)*"
)


def _normal(name: str) -> str:
    name = name.strip().lower().removesuffix(".")
    return name[1:-1] if name.startswith("[") and name.endswith("]") else name


def check_host_name(name: str) -> str:
    """`name` normalised (lower case, no brackets, no final dot) if a DNS name or an IP address; else `ValueError`."""
    normal = _normal(name)
    try:
        return str(ipaddress.ip_address(normal))
    except ValueError:
        pass
    if not _NAME.fullmatch(normal):
        raise ValueError(f"{name[:100]!r} is not a host name (letters, digits, '-' and '.') or an IP address")
    return normal


def host_of(header: str) -> str | None:
    """The name in a ``Host`` header (``name``, ``name:port``, ``[v6]:port``), normalised; None if malformed."""
    text = header.strip()
    if text.startswith("["):
        end = text.find("]")
        rest = text[end + 1 :]
        if end < 0 or (rest and not re.fullmatch(r":\d{1,5}", rest)):
            return None
        name = text[1:end]
    else:
        name, colon, port = text.partition(":")
        if colon and not re.fullmatch(r"\d{1,5}", port):
            return None
    try:
        return check_host_name(name)
    except ValueError:
        return None


@dataclass(frozen=True)
class HostRule:
    """The accepted host names (normalised)."""

    names: frozenset[str]

    @classmethod
    def of(cls, names: Iterable[str] | None) -> HostRule:
        """The rule accepting `names` (checked; `ValueError` naming a bad one), or `DEFAULT_HOSTS` for None."""
        return cls(frozenset(check_host_name(name) for name in (DEFAULT_HOSTS if names is None else names)))

    def allows(self, header: str | None) -> bool:
        """Whether a ``Host`` header names this dashboard (a missing one does: no browser omits it)."""
        return header is None or host_of(header) in self.names

    def allows_origin(self, origin: str) -> bool:
        """Whether an ``Origin`` header is ``http(s)://`` one of the accepted names (with any port)."""
        try:
            parts = urllib.parse.urlsplit(origin)
        except ValueError:
            return False
        if parts.scheme not in ("http", "https") or parts.path or parts.query or parts.fragment:
            return False
        return host_of(parts.netloc) in self.names

    def describe(self) -> str:
        """The accepted names, for a refusal's message."""
        return ", ".join(sorted(self.names))
