"""Canonical JSON (CONTRACT §3): one value, one byte string, and the strict body parser."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from walqueue.format import canonical_json, canonical_str, parse_json

SETTINGS = settings(max_examples=60, deadline=None)

json_scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text()  # hypothesis excludes lone surrogates by default: they are not UTF-8
)
json_values = st.recursive(
    json_scalars,
    lambda children: st.lists(children, max_size=5) | st.dictionaries(st.text(max_size=8), children, max_size=5),
    max_leaves=25,
)


def spec_expression(value: Any) -> bytes:
    """The definition of canonical JSON, written exactly as CONTRACT §3 writes it."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode("utf-8")


@SETTINGS
@given(json_values)
def test_canonical_json_equals_the_spec_expression(value: Any) -> None:
    assert canonical_json(value) == spec_expression(value)


@SETTINGS
@given(json_values)
def test_canonical_json_is_a_fixed_point_of_parse_then_encode(value: Any) -> None:
    encoded = canonical_json(value)
    assert canonical_json(parse_json(encoded)) == encoded


@SETTINGS
@given(st.dictionaries(st.text(max_size=4), st.integers(), max_size=8))
def test_canonical_json_does_not_depend_on_insertion_order(value: dict[str, int]) -> None:
    reversed_value = dict(reversed(list(value.items())))
    assert canonical_json(reversed_value) == canonical_json(value)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ({"b": 1, "a": [1, 2, {"d": None, "c": True}]}, b'{"a":[1,2,{"c":true,"d":null}],"b":1}'),
        # Keys sort by Unicode code point, as Python sorts str: "B" < "a" < "é" < "ｚ" (U+FF5A) < "😀" (U+1F600).
        # A UTF-16 sort (JavaScript, Java) would put "😀" (D83D DE00) before "ｚ" (FF5A): that is NOT canonical.
        ({"😀": 0, "ｚ": 0, "é": 0, "a": 0, "B": 0}, '{"B":0,"a":0,"é":0,"ｚ":0,"😀":0}'.encode()),
        # ensure_ascii=False: non-ASCII characters are written as their own UTF-8 bytes.
        ("é😀", b'"\xc3\xa9\xf0\x9f\x98\x80"'),
        # Escapes: only '"', '\\' and U+0000..U+001F; short forms for \b \t \n \f \r, else \u00XX lowercase.
        ("\x00\x01\x08\t\n\x0b\x0c\r\x1f", b'"\\u0000\\u0001\\b\\t\\n\\u000b\\f\\r\\u001f"'),
        ('"\\/', b'"\\"\\\\/"'),
        ("\x7f\u2028\u2029", '"\x7f\u2028\u2029"'.encode()),  # DEL, U+2028 and U+2029 are not escaped
        # Numbers: ints in decimal, any size; floats as Python's repr (shortest round trip).
        (2**70, b"1180591620717411303424"),
        (-0, b"0"),
        (1.0, b"1.0"),
        (-0.0, b"-0.0"),
        (0.1 + 0.2, b"0.30000000000000004"),
        (1e15, b"1000000000000000.0"),
        (1e16, b"1e+16"),
        (0.0001, b"0.0001"),
        (0.00001, b"1e-05"),
        (5e-324, b"5e-324"),
        (1.5e300, b"1.5e+300"),
        ([True, False, None], b"[true,false,null]"),
        ({}, b"{}"),
        ([], b"[]"),
    ],
)
def test_canonical_json_examples(value: Any, expected: bytes) -> None:
    assert canonical_json(value) == expected


def test_canonical_json_has_no_whitespace_between_tokens() -> None:
    assert canonical_json({"a": [1, {"b": "c d"}], "e": None}) == b'{"a":[1,{"b":"c d"}],"e":null}'


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf, {"x": [math.nan]}])
def test_canonical_json_refuses_non_finite_floats(value: Any) -> None:
    with pytest.raises(ValueError):
        canonical_json(value)


def test_canonical_json_refuses_a_lone_surrogate() -> None:
    with pytest.raises(ValueError):
        canonical_json({"task": "\ud800"})


def test_canonical_json_refuses_objects_json_cannot_hold() -> None:
    with pytest.raises(TypeError):
        canonical_json({"x": object()})


@pytest.mark.parametrize(
    "body",
    [
        b"\xff",  # not UTF-8
        b'"\xc3"',  # truncated UTF-8 sequence
        b'"\xed\xa0\x80"',  # an encoded surrogate is not UTF-8
        b"\xef\xbb\xbf{}",  # a byte order mark
        b"{",
        b"{} {}",
        b"",
        b"{'a':1}",
        b"NaN",
        b"[Infinity]",
        b'{"x":-Infinity}',
        b"[" * 100_000 + b"]" * 100_000,  # nested beyond the interpreter's recursion limit
    ],
)
def test_parse_json_refuses_what_no_canonical_writer_produces(body: bytes) -> None:
    with pytest.raises(ValueError):
        parse_json(body)


def test_parse_json_reads_canonical_bytes_back() -> None:
    assert parse_json('{"a":[1,2.5,"é"],"b":null}'.encode()) == {"a": [1, 2.5, "é"], "b": None}


@given(st.text())
def test_canonical_str_equals_canonical_json_of_the_string(value: str) -> None:
    assert canonical_str(value) == canonical_json(value)


def test_canonical_str_escapes_only_what_json_requires() -> None:
    assert canonical_str('a"b\\c\n\x01é') == b'"a\\"b\\\\c\\n\\u0001\xc3\xa9"'


def test_canonical_str_refuses_a_lone_surrogate() -> None:
    with pytest.raises(ValueError):
        canonical_str("\ud800")


@given(
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3),
        max_leaves=8,
    ),
    st.sampled_from(["", " ", "\n", "\t "]),
    st.sampled_from(["", " ", "\r\n", "x", ",1", "NaN"]),
)
def test_parse_json_reads_what_the_strict_decoder_reads(value: Any, before: str, after: str) -> None:
    """The scanner path is only a shortcut: anything else takes the decoder, with its verdict."""
    text = before + json.dumps(value, allow_nan=True) + after
    body = text.encode("utf-8", "surrogatepass")
    try:
        expected: Any = json.loads(text, parse_constant=lambda name: 1 / 0)
    except (ValueError, ZeroDivisionError):
        with pytest.raises(ValueError):
            parse_json(body)
        return
    try:
        body.decode("utf-8")
    except UnicodeDecodeError:
        with pytest.raises(ValueError):
            parse_json(body)
        return
    assert parse_json(body) == expected
