"""The HTTP side of the dashboard with no routes: strict query parsing, bounded bodies, safe answers.

Why strict: every input is a stranger's. A malformed query string, an
unknown or repeated parameter, a number out of range, a body too large or
of the wrong type is a 4xx with a message naming the cause, and the server
goes on. Every answer carries headers that keep a browser from sniffing
JSON as HTML, framing the page or loading anything from elsewhere; JSON
answers also escape ``<``, ``>`` and ``&``, so that even a payload holding
``</script>`` is inert wherever the JSON lands.
"""

from __future__ import annotations

import json
import re
import urllib.parse
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from walqueue import WalQueueError

__all__ = [
    "MAX_BODY_BYTES",
    "check_access_token",
    "HttpError",
    "Response",
    "SECURITY_HEADERS",
    "json_response",
    "parse_form",
    "parse_query",
    "query_int",
    "query_text",
]

#: The largest request body read (an action's form is a few fields).
MAX_BODY_BYTES: Final = 64 * 1024
#: The longest value of one query or form field, in characters.
MAX_FIELD_CHARS: Final = 4096
#: Seconds the body of a request may take to arrive once its headers have (served by walqueue.dashboard.http).
BODY_TIMEOUT: Final = 2.0
#: The WSGI environ key that carries the connection's socket, when walqueue.dashboard.http serves.
SOCKET_KEY: Final = "walqueue.socket"
#: The most fields one query string or form may hold.
MAX_FIELDS: Final = 16

SECURITY_HEADERS: Final = (
    ("X-Content-Type-Options", "nosniff"),
    ("X-Frame-Options", "DENY"),
    ("Referrer-Policy", "no-referrer"),
    ("Cache-Control", "no-store"),
    (
        "Content-Security-Policy",
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
        "connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'",
    ),
)

_REASONS: Final = {
    200: "OK",
    303: "See Other",
    400: "Bad Request",
    401: "Unauthorized",
    403: "Forbidden",
    404: "Not Found",
    405: "Method Not Allowed",
    409: "Conflict",
    411: "Length Required",
    413: "Content Too Large",
    415: "Unsupported Media Type",
    421: "Misdirected Request",
    500: "Internal Server Error",
    503: "Service Unavailable",
}


_ACCESS_TOKEN: Final = re.compile(r"[A-Za-z0-9._~+/=-]{16,512}")


def check_access_token(token: str) -> str:
    """`token` if it can be an access token (16 to 512 URL- and cookie-safe characters); else `ValueError`."""
    if not isinstance(token, str) or not _ACCESS_TOKEN.fullmatch(token):
        raise ValueError("an access token must be 16 to 512 characters of A-Z a-z 0-9 . _ ~ + / = -")
    return token


class HttpError(WalQueueError):
    """An answer with a 4xx/5xx status and a message naming the cause (sent as JSON).

    A `WalQueueError`, as every deliberate refusal of WALQueue is.
    """

    def __init__(self, status: int, message: str, headers: Iterable[tuple[str, str]] = ()) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.headers = list(headers)


@dataclass(slots=True)
class Response:
    """One answer: status, body, content type and extra headers."""

    status: int
    body: bytes
    content_type: str
    headers: list[tuple[str, str]] = field(default_factory=list)

    def status_line(self) -> str:
        """``"200 OK"``: the status as WSGI's `start_response` takes it."""
        return f"{self.status} {_REASONS.get(self.status, 'Unknown')}"

    def header_list(self) -> list[tuple[str, str]]:
        """Content type and length, the security headers every answer carries, then this answer's own."""
        return [
            ("Content-Type", self.content_type),
            ("Content-Length", str(len(self.body))),
            *SECURITY_HEADERS,
            *self.headers,
        ]


def dumps_safe(value: Any) -> str:
    """JSON with ``<``, ``>`` and ``&`` escaped: still the same JSON, never markup."""
    text = json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    return text.replace("&", "\\u0026").replace("<", "\\u003c").replace(">", "\\u003e")


def json_response(value: Any, status: int = 200) -> Response:
    """`value` as a JSON answer (markup characters escaped, see `dumps_safe`)."""
    return Response(status, dumps_safe(value).encode("utf-8", "surrogatepass"), "application/json; charset=utf-8")


def error_response(error: HttpError) -> Response:
    response = json_response({"ok": False, "error": error.message}, error.status)
    response.headers.extend(error.headers)
    return response


def _parse_fields(text: str, what: str) -> dict[str, str]:
    if not text:
        return {}
    try:
        pairs = urllib.parse.parse_qsl(
            text, keep_blank_values=True, strict_parsing=True, max_num_fields=MAX_FIELDS, errors="strict"
        )
    except (ValueError, UnicodeDecodeError) as error:
        raise HttpError(400, f"malformed {what}: {error}") from None
    fields: dict[str, str] = {}
    for name, value in pairs:
        if name in fields:
            raise HttpError(400, f"{what} field {name!r} given twice")
        if len(value) > MAX_FIELD_CHARS:
            raise HttpError(400, f"{what} field {name!r} is longer than {MAX_FIELD_CHARS} characters")
        fields[name] = value
    return fields


def parse_query(environ: Mapping[str, Any], allowed: Iterable[str]) -> dict[str, str]:
    """The query string's fields; an unknown, repeated or malformed one is a 400."""
    raw = environ.get("QUERY_STRING", "")
    try:
        # WSGI hands the query string over as latin-1 text of the raw bytes: decode it as UTF-8.
        text = raw.encode("latin-1").decode("ascii")
    except (UnicodeEncodeError, UnicodeDecodeError):
        raise HttpError(400, "the query string must be ASCII (percent-encode the rest)") from None
    fields = _parse_fields(text, "query")
    unknown = sorted(set(fields) - set(allowed))
    if unknown:
        raise HttpError(400, f"unknown query field {unknown[0]!r} (known: {', '.join(sorted(allowed)) or 'none'})")
    return fields


def query_int(fields: Mapping[str, str], name: str, default: int, low: int, high: int) -> int:
    """An integer field within ``[low, high]``; anything else is a 400 naming the range."""
    text = fields.get(name)
    if text is None:
        return default
    if not text.isascii() or not text.isdigit() or len(text) > 19:
        raise HttpError(400, f"{name} must be an integer from {low} to {high}, not {text[:40]!r}")
    value = int(text)
    if not low <= value <= high:
        raise HttpError(400, f"{name} must be an integer from {low} to {high}, not {value}")
    return value


def query_text(fields: Mapping[str, str], name: str) -> str | None:
    """A text field, or None when absent; an empty one means absent too."""
    value = fields.get(name)
    return value if value else None


def read_body(environ: Mapping[str, Any]) -> bytes:
    """The request body, refused unless its length is declared and at most `MAX_BODY_BYTES`."""
    length_text = environ.get("CONTENT_LENGTH") or ""
    if not length_text.isdigit():
        raise HttpError(411, "a POST needs a Content-Length")
    length = int(length_text)
    if length > MAX_BODY_BYTES:
        raise HttpError(413, f"the body is larger than {MAX_BODY_BYTES} bytes")
    if not length:
        return b""
    connection = environ.get(SOCKET_KEY)
    previous = connection.gettimeout() if connection is not None else None
    try:
        if connection is not None:
            connection.settimeout(BODY_TIMEOUT)
        body: bytes = environ["wsgi.input"].read(length)
    except OSError:  # a timeout (TimeoutError) or a reset: the body did not arrive
        body = b""
    finally:
        if connection is not None:
            connection.settimeout(previous)
    if len(body) != length:
        raise HttpError(
            400, f"the body ended before its Content-Length of {length} bytes (or took over {BODY_TIMEOUT:g} s)"
        )
    return body


def parse_form(environ: Mapping[str, Any]) -> dict[str, str]:
    """An action's fields, from a urlencoded form or a JSON object of strings; anything else is a 4xx."""
    body = read_body(environ)
    kind = (environ.get("CONTENT_TYPE") or "").split(";")[0].strip().lower()
    if kind == "application/x-www-form-urlencoded":
        try:
            text = body.decode("ascii")
        except UnicodeDecodeError:
            raise HttpError(400, "a form body must be ASCII (percent-encoded)") from None
        return _parse_fields(text, "form")
    if kind == "application/json":
        try:
            value = json.loads(body.decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as error:
            raise HttpError(400, f"malformed JSON body: {error}") from None
        if not isinstance(value, dict) or len(value) > MAX_FIELDS:
            raise HttpError(400, f"a JSON body must be an object of at most {MAX_FIELDS} fields")
        if not all(isinstance(item, str) and len(item) <= MAX_FIELD_CHARS for item in value.values()):
            raise HttpError(400, f"every field of a JSON body must be a string of at most {MAX_FIELD_CHARS} chars")
        return dict(value)
    raise HttpError(415, "send application/x-www-form-urlencoded or application/json")
