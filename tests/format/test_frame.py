"""Frames (CONTRACT §3): ``len`` (4 bytes, big-endian) + canonical JSON body + SHA-256 of the body.

Here: encoding, the layout byte by byte, the bounds, `decode_frame` (exactly
one frame, as CURRENT holds) and the error type. Reading a stream of frames
from a segment file is tested in test_segment_reader.py.
"""

from __future__ import annotations

import hashlib
import pickle
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import walqueue.format as fmt
from walqueue.format import (
    DIGEST_BYTES,
    FRAME_OVERHEAD,
    LENGTH_BYTES,
    MAX_FRAME_BYTES,
    CorruptStore,
    WalQueueError,
    canonical_json,
    decode_frame,
    encode_body,
    encode_frame,
)

json_scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text()
json_values = st.recursive(
    json_scalars,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=6), children, max_size=4),
    max_leaves=20,
)


def test_the_frame_bound_is_16_mib() -> None:
    assert MAX_FRAME_BYTES == 16 * 1024 * 1024 == 16_777_216
    assert (LENGTH_BYTES, DIGEST_BYTES, FRAME_OVERHEAD) == (4, 32, 36)


def test_frame_layout_is_big_endian_length_then_body_then_sha256() -> None:
    value = {"seq": 1, "ops": [{"op": "ack", "task": "t", "generation": 1}]}
    body = canonical_json(value)
    frame = encode_frame(value)
    assert frame[:4] == len(body).to_bytes(4, "big")
    assert frame[4 : 4 + len(body)] == body
    assert frame[4 + len(body) :] == hashlib.sha256(body).digest()
    assert len(frame) == 4 + len(body) + 32


def test_encode_frame_is_encode_body_of_the_canonical_json() -> None:
    value = {"b": [1.5, None], "a": "é"}
    assert encode_frame(value) == encode_body(canonical_json(value))


@settings(max_examples=60, deadline=None)
@given(json_values)
def test_decode_frame_inverts_encode_frame(value: Any) -> None:
    frame = encode_frame(value)
    decoded = decode_frame(frame)
    assert canonical_json(decoded) == canonical_json(value)
    assert encode_frame(decoded) == frame


def test_encode_body_accepts_exactly_the_bounds() -> None:
    assert encode_body(b"1")[:4] == b"\x00\x00\x00\x01"
    largest = b'"' + b"x" * (MAX_FRAME_BYTES - 2) + b'"'
    frame = encode_body(largest)
    assert frame[:4] == b"\x01\x00\x00\x00"
    assert decode_frame(frame) == "x" * (MAX_FRAME_BYTES - 2)


@pytest.mark.parametrize("size", [0, MAX_FRAME_BYTES + 1])
def test_encode_body_refuses_a_body_outside_the_bound(size: int) -> None:
    with pytest.raises(ValueError):
        encode_body(b"x" * size)


def test_encode_frame_refuses_a_value_too_large_for_a_frame() -> None:
    with pytest.raises(ValueError):
        encode_frame("x" * MAX_FRAME_BYTES)  # plus two quotes: two bytes over


def test_encode_frame_refuses_nan_before_writing_anything() -> None:
    with pytest.raises(ValueError):
        encode_frame({"x": float("nan")})


# -- decode_frame: exactly one frame -------------------------------------------


def corrupt_reason(data: bytes) -> CorruptStore:
    with pytest.raises(CorruptStore) as info:
        decode_frame(data, "/store/CURRENT")
    assert info.value.path == "/store/CURRENT"
    return info.value


@pytest.mark.parametrize("size", [0, 1, 3])
def test_decode_frame_refuses_fewer_bytes_than_a_length(size: int) -> None:
    frame = encode_frame({"a": 1})
    assert corrupt_reason(frame[:size]).offset == 0


def test_decode_frame_refuses_every_truncation() -> None:
    frame = encode_frame({"current": 1, "seq": 7})
    for cut in range(len(frame)):
        assert corrupt_reason(frame[:cut]).offset == 0


def test_decode_frame_refuses_trailing_bytes_after_the_frame() -> None:
    frame = encode_frame({"a": 1})
    error = corrupt_reason(frame + b"\x00")
    assert error.offset == len(frame)
    assert corrupt_reason(frame + frame).offset == len(frame)


@pytest.mark.parametrize("length", [0, MAX_FRAME_BYTES + 1, 0xFFFFFFFF])
def test_decode_frame_refuses_a_length_outside_the_bound(length: int) -> None:
    error = corrupt_reason(length.to_bytes(4, "big") + b"{}" + bytes(32))
    assert error.offset == 0
    assert "length" in error.reason


def test_decode_frame_refuses_any_single_bit_flip() -> None:
    frame = encode_frame({"current": 1, "snapshot": "snapshot-00000000000000000001.snap"})
    for index in range(len(frame)):
        for bit in range(8):
            damaged = bytearray(frame)
            damaged[index] ^= 1 << bit
            corrupt_reason(bytes(damaged))


def with_digest(body: bytes) -> bytes:
    """A frame around `body` with a CORRECT digest: only the body's content is wrong."""
    return len(body).to_bytes(4, "big") + body + hashlib.sha256(body).digest()


@pytest.mark.parametrize(
    "body",
    [b"\xff\xfe", b'{"a":"\xc3"}', b"{", b"NaN", b'{"x":NaN}', b'{"x":Infinity}', b"[1,]", b"\xef\xbb\xbf{}"],
)
def test_decode_frame_refuses_a_body_that_is_not_strict_utf8_json(body: bytes) -> None:
    error = corrupt_reason(with_digest(body))
    assert error.offset == 0
    assert "JSON" in error.reason


# -- the error type -------------------------------------------------------------


def test_corrupt_store_carries_path_offset_and_reason() -> None:
    error = CorruptStore("/d/wal-00000000000000000001.log", 123, "frame digest mismatch")
    assert isinstance(error, WalQueueError)
    assert (error.path, error.offset, error.reason) == ("/d/wal-00000000000000000001.log", 123, "frame digest mismatch")
    assert "/d/wal-00000000000000000001.log" in str(error)
    assert "123" in str(error)
    assert "frame digest mismatch" in str(error)


def test_corrupt_store_survives_pickling_with_its_fields() -> None:
    error = pickle.loads(pickle.dumps(CorruptStore("/d/CURRENT", None, "missing")))
    assert isinstance(error, CorruptStore)
    assert (error.path, error.offset, error.reason) == ("/d/CURRENT", None, "missing")


def test_the_package_exports_what_spec_section_1_names() -> None:
    for name in ("MAX_FRAME_BYTES", "CorruptStore", "canonical_json", "encode_frame"):
        assert name in fmt.__all__
        assert hasattr(fmt, name)


def test_the_worked_example_of_format_md_is_what_encode_frame_writes() -> None:
    """docs/FORMAT.md §10 shows this frame byte by byte; this keeps the document honest."""
    value = {
        "seq": 1,
        "ops": [{"op": "put", "task": "t1", "key": "t1", "payload": {"n": 1}, "available_at": 0, "max_attempts": 3}],
    }
    expected = bytes.fromhex(
        "00000069"
        "7b226f7073223a5b7b22617661696c61"
        "626c655f6174223a302c226b6579223a"
        "227431222c226d61785f617474656d70"
        "7473223a332c226f70223a2270757422"
        "2c227061796c6f6164223a7b226e223a"
        "317d2c227461736b223a227431227d5d"
        "2c22736571223a317d"
        "89bd6a68d98e27557562e969425cd6e9"
        "1caca36176185d12dea1a9c460f020a9"
    )
    assert len(expected) == 141
    assert encode_frame(value) == expected
    assert hashlib.sha256(expected[4:109]).hexdigest() == (
        "89bd6a68d98e27557562e969425cd6e91caca36176185d12dea1a9c460f020a9"
    )
    identity = {"available_at": 0, "max_attempts": 3, "payload": {"n": 1}, "task": "t1"}
    assert hashlib.sha256(canonical_json(identity)).hexdigest() == (
        "02f9f61cf1a62ee2987a9f03c0f55a7fa5175d2bfc8272e9e78b4f290e893990"
    )
