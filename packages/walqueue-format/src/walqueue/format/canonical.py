"""Canonical JSON: the only byte form WALQueue writes.

One value has exactly one encoding, so that two requests can be compared by
their bytes and a digest of those bytes names the request (CONTRACT §3).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

_ENCODER = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)

try:  # CPython's C encoder, built once: JSONEncoder.encode builds a new one per call.
    from _json import encode_basestring as _c_encode_str
    from _json import make_encoder as _c_make_encoder
except ImportError:  # pragma: no cover - other interpreters use the pure-Python encoder
    _C_ENCODE = _C_ENCODE_IN_ORDER = None
    from json.encoder import py_encode_basestring as _c_encode_str
else:
    # The same arguments JSONEncoder passes, without circular-reference
    # tracking: a cycle then ends in RecursionError, turned into ValueError
    # below, as JSONEncoder would raise ValueError for it.
    _C_ENCODE = _c_make_encoder(None, _ENCODER.default, _c_encode_str, None, ":", ",", True, False, False)
    # The same encoder without sort_keys: a dict's members in its own order (see `encode_chunks_in_order`).
    _C_ENCODE_IN_ORDER = _c_make_encoder(None, _ENCODER.default, _c_encode_str, None, ":", ",", False, False, False)


def canonical_json(value: Any) -> bytes:
    """Encode `value` as canonical JSON (UTF-8 bytes).

    Raises `ValueError` for NaN/Infinity, for strings that are not valid
    Unicode (lone surrogates) and for values JSON cannot hold; `TypeError`
    for objects of other types or non-string keys that json would coerce is
    NOT raised by json itself, which is why callers that need a round trip
    check the value's shape first (see the engine's validation).
    """
    if _C_ENCODE is None:  # pragma: no cover
        return _ENCODER.encode(value).encode("utf-8")
    try:
        return "".join(_C_ENCODE(value, 0)).encode("utf-8")
    except RecursionError:
        raise ValueError("value nested too deeply (or cyclic) for JSON") from None


def canonical_str(value: str) -> bytes:
    """`canonical_json` of one `str`, without the general encoder's dispatch.

    Names (task ids, keys, workers) are encoded on every operation; this is
    the same C routine the encoder runs for a string (escape only ``"``,
    ``\\`` and control characters; everything else as its own UTF-8), a
    third of the cost. Raises `ValueError` for a lone surrogate, as
    `canonical_json` does (UnicodeEncodeError is a ValueError).
    """
    if _C_ENCODE is None:  # pragma: no cover
        return canonical_json(value)
    return _c_encode_str(value).encode("utf-8")


#: The str form of `canonical_str` (``canonical_str(v) == encode_str(v).encode()``): for a caller
#: that has just checked `v` is a storable name and calls it on every operation, without the wrapper.
encode_str: Callable[[str], str] = _c_encode_str


def _python_chunks(value: Any, _indent: int) -> tuple[str]:  # pragma: no cover - without the C encoder
    return (_ENCODER.encode(value),)


#: The encoder's chunks of `value` (``"".join(chunks).encode()`` is `canonical_json`'s bytes; a cycle or too deep
#: a value raises RecursionError): for a caller that encodes on every operation, without that function's wrapper.
encode_chunks: Callable[[Any, int], Sequence[str]] = _python_chunks if _C_ENCODE is None else _C_ENCODE

#: `encode_chunks` without the sort: each dict's members in the dict's own order. The same chunks only for a value
#: whose every dict already has its keys in sorted order (a flat dict whose keys were seen ascending): the sort is
#: about a third of encoding a dict of a few members (it copies the items into a list of pairs first), and a dict
#: decoded from canonical JSON, or built in key order, has nothing to sort.
encode_chunks_in_order: Callable[[Any, int], Sequence[str]] = (
    _python_chunks if _C_ENCODE_IN_ORDER is None else _C_ENCODE_IN_ORDER
)


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not allowed in canonical JSON")


# One decoder for every frame: json.loads with an argument builds a new
# JSONDecoder per call, a measurable share of replay time.
_DECODER = json.JSONDecoder(parse_constant=_reject_constant)
# Its C scanner, called directly: `JSONDecoder.decode` adds two whitespace
# regex matches per call, which cost about as much as parsing a small body.
# typeshed does not declare the attribute.
_SCAN: Callable[[str, int], tuple[Any, int]] = _DECODER.scan_once  # type: ignore[attr-defined]


def parse_json(body: bytes) -> Any:
    """Decode a frame body: strict UTF-8, standard JSON, no NaN/Infinity.

    Raises `ValueError` (UnicodeDecodeError and JSONDecodeError are both
    ValueErrors) for anything a canonical writer could not have produced in
    those respects.

    A canonical body (no whitespace around the value) is read by the
    decoder's scanner alone; anything the scanner does not take whole (an
    error, or surrounding whitespace) goes through `JSONDecoder.decode`, so
    what is accepted and every error message are the decoder's.
    """
    text = body.decode("utf-8")
    try:
        value, end = _SCAN(text, 0)
    except (StopIteration, ValueError, RecursionError):
        end = -1
    if end == len(text):
        return value
    try:
        return _DECODER.decode(text)
    except RecursionError:
        raise ValueError("JSON nested too deeply to decode") from None
