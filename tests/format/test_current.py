"""CURRENT (CONTRACT §3, §4.2): exactly one valid frame, every field checked, replaced atomically."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from walqueue.format import (
    CURRENT_NAME,
    CURRENT_TMP_NAME,
    MAX_FRAME_BYTES,
    CorruptStore,
    Current,
    decode_frame,
    encode_frame,
    publish_current,
    read_current,
    snapshot_name,
    write_current_tmp,
)
from walqueue.format.current import current_from_json

SHA = "0123456789abcdef" * 4


def valid_body() -> dict[str, Any]:
    """A valid CURRENT body whose ints are all 1, so that `True` (== 1) is a real trap for each."""
    return {"current": 1, "snapshot": snapshot_name(1), "seq": 1, "size": 1, "sha256": SHA, "wal": 1}


def write_raw_current(directory: Path, data: bytes) -> Path:
    path = directory / CURRENT_NAME
    path.write_bytes(data)
    return path


def assert_corrupt(directory: Path, path: Path) -> CorruptStore:
    with pytest.raises(CorruptStore) as info:
        read_current(directory)
    assert info.value.path == str(path)
    assert info.value.reason
    return info.value


def test_a_directory_without_current_has_none(tmp_path: Path) -> None:
    assert read_current(tmp_path) is None


def test_current_tmp_alone_is_never_authoritative(tmp_path: Path) -> None:
    write_current_tmp(tmp_path, Current(snapshot_name(4), 4, 10, SHA, 2), sync=False)
    assert read_current(tmp_path) is None


def test_the_valid_body_used_below_is_accepted(tmp_path: Path) -> None:
    write_raw_current(tmp_path, encode_frame(valid_body()))
    assert read_current(tmp_path) == Current(snapshot_name(1), 1, 1, SHA, 1)


@settings(max_examples=100, deadline=None)
@given(
    seq=st.integers(min_value=0, max_value=10**20 - 1),
    size=st.integers(min_value=0, max_value=2**63),
    sha=st.text(alphabet="0123456789abcdef", min_size=64, max_size=64),
    wal=st.integers(min_value=1, max_value=10**20 - 1),
)
def test_current_round_trips_through_its_frame(seq: int, size: int, sha: str, wal: int) -> None:
    current = Current(snapshot_name(seq), seq, size, sha, wal)
    frame = encode_frame(current.to_json())
    assert current_from_json(decode_frame(frame)) == current


def test_write_then_publish_replaces_current_and_leaves_no_tmp(tmp_path: Path) -> None:
    first = Current(snapshot_name(3), 3, 100, SHA, 2)
    second = Current(snapshot_name(9), 9, 200, "f" * 64, 5)
    write_current_tmp(tmp_path, first)
    publish_current(tmp_path)
    assert read_current(tmp_path) == first
    write_current_tmp(tmp_path, second)
    # Between the two steps the published CURRENT is still the old one, intact.
    assert read_current(tmp_path) == first
    assert (tmp_path / CURRENT_TMP_NAME).exists()
    publish_current(tmp_path)
    assert read_current(tmp_path) == second
    assert sorted(os.listdir(tmp_path)) == [CURRENT_NAME]
    assert (tmp_path / CURRENT_NAME).read_bytes() == encode_frame(second.to_json())


def test_write_current_tmp_overwrites_a_stale_tmp(tmp_path: Path) -> None:
    (tmp_path / CURRENT_TMP_NAME).write_bytes(b"stale leftover of a crash" * 100)
    current = Current(snapshot_name(2), 2, 50, SHA, 1)
    write_current_tmp(tmp_path, current, sync=False)
    publish_current(tmp_path, sync=False)
    assert read_current(tmp_path) == current
    assert not (tmp_path / CURRENT_TMP_NAME).exists()


def test_current_is_written_with_sorted_keys_and_version_1(tmp_path: Path) -> None:
    write_current_tmp(tmp_path, Current(snapshot_name(1), 1, 1, SHA, 1), sync=False)
    publish_current(tmp_path, sync=False)
    body = (tmp_path / CURRENT_NAME).read_bytes()[4:-32]
    assert body == (
        b'{"current":1,"seq":1,"sha256":"' + SHA.encode() + b'","size":1,'
        b'"snapshot":"snapshot-00000000000000000001.snap","wal":1}'
    )


# -- every field wrong in turn ---------------------------------------------------------

FIELDS = ["current", "snapshot", "seq", "size", "sha256", "wal"]


def mutated(change: dict[str, Any], drop: str | None = None) -> dict[str, Any]:
    body = valid_body()
    body.update(change)
    if drop is not None:
        del body[drop]
    return body


BAD_BODIES: list[tuple[str, Any]] = [
    *[(f"missing {name}", mutated({}, drop=name)) for name in FIELDS],
    ("an extra field", mutated({"extra": 0})),
    ("an extra null field", mutated({"note": None})),
    ("a list", [valid_body()]),
    ("a string", "CURRENT"),
    ("null", None),
    ("an int", 1),
    ("current 2", mutated({"current": 2})),
    ("current 0", mutated({"current": 0})),
    ("current true", mutated({"current": True})),
    ("current 1.0", mutated({"current": 1.0})),
    ('current "1"', mutated({"current": "1"})),
    ("snapshot as a segment name", mutated({"snapshot": "wal-00000000000000000001.log"})),
    ("snapshot with wal prefix", mutated({"snapshot": "wal-00000000000000000001.snap"})),
    ("snapshot short digits", mutated({"snapshot": "snapshot-1.snap"})),
    ("snapshot path traversal", mutated({"snapshot": "../x"})),
    ("snapshot path traversal to a snapshot", mutated({"snapshot": "../snapshot-00000000000000000001.snap"})),
    ("snapshot in a subdirectory", mutated({"snapshot": "d/snapshot-00000000000000000001.snap"})),
    ("snapshot absolute", mutated({"snapshot": "/snapshot-00000000000000000001.snap"})),
    ("snapshot temp", mutated({"snapshot": "snapshot-00000000000000000001.snap.tmp"})),
    ("snapshot empty", mutated({"snapshot": ""})),
    ("snapshot int", mutated({"snapshot": 1})),
    ("snapshot null", mutated({"snapshot": None})),
    ("seq not matching the name", mutated({"seq": 2})),
    ("seq 0 with snapshot 1", mutated({"seq": 0})),
    ("seq true", mutated({"seq": True})),
    ("seq 1.0", mutated({"seq": 1.0})),
    ('seq "1"', mutated({"seq": "1"})),
    ("seq -1", mutated({"seq": -1, "snapshot": snapshot_name(1)})),
    ("seq null", mutated({"seq": None})),
    ("size -1", mutated({"size": -1})),
    ("size true", mutated({"size": True})),
    ("size 1.0", mutated({"size": 1.0})),
    ('size "1"', mutated({"size": "1"})),
    ("size null", mutated({"size": None})),
    ("sha256 uppercase hex", mutated({"sha256": SHA.upper()})),
    ("sha256 63 digits", mutated({"sha256": SHA[:-1]})),
    ("sha256 65 digits", mutated({"sha256": SHA + "0"})),
    ("sha256 not hex", mutated({"sha256": "g" + SHA[1:]})),
    ("sha256 with a newline", mutated({"sha256": SHA + "\n"})),
    ("sha256 int", mutated({"sha256": 0})),
    ("sha256 null", mutated({"sha256": None})),
    ("wal 0", mutated({"wal": 0})),
    ("wal beyond the 20 digits of a segment name", mutated({"wal": 10**20})),
    ("wal -1", mutated({"wal": -1})),
    ("wal true", mutated({"wal": True})),
    ("wal 1.0", mutated({"wal": 1.0})),
    ('wal "1"', mutated({"wal": "1"})),
    ("wal null", mutated({"wal": None})),
]


@pytest.mark.parametrize(("case", "body"), BAD_BODIES, ids=[case for case, _ in BAD_BODIES])
def test_current_with_any_wrong_field_is_corrupt(tmp_path: Path, case: str, body: Any) -> None:
    path = write_raw_current(tmp_path, encode_frame(body))
    assert_corrupt(tmp_path, path)
    with pytest.raises(CorruptStore):
        current_from_json(body, str(path))


# -- the frame around it ------------------------------------------------------------------


def test_current_with_trailing_bytes_after_its_frame_is_corrupt(tmp_path: Path) -> None:
    frame = encode_frame(valid_body())
    for trailing in (b"\x00", b"\n", frame):
        path = write_raw_current(tmp_path, frame + trailing)
        assert assert_corrupt(tmp_path, path).offset == len(frame)


def test_a_truncated_current_is_corrupt_never_torn(tmp_path: Path) -> None:
    """CURRENT is replaced by rename, so a partial CURRENT was never published: it is damage."""
    frame = encode_frame(valid_body())
    for cut in range(len(frame)):
        path = write_raw_current(tmp_path, frame[:cut])
        assert assert_corrupt(tmp_path, path).offset == 0


def test_current_with_any_single_bit_flip_is_corrupt(tmp_path: Path) -> None:
    """Every bit of every byte is covered by test_frame's decode_frame test; here each byte once, end to end."""
    frame = encode_frame(valid_body())
    for index in range(len(frame)):
        damaged = bytearray(frame)
        damaged[index] ^= 1 << (index % 8)
        path = write_raw_current(tmp_path, bytes(damaged))
        assert_corrupt(tmp_path, path)


def test_current_with_a_body_that_is_not_json_is_corrupt(tmp_path: Path) -> None:
    body = b'{"current":1,'
    path = write_raw_current(tmp_path, len(body).to_bytes(4, "big") + body + hashlib.sha256(body).digest())
    assert_corrupt(tmp_path, path)


def test_an_oversized_current_is_refused_without_reading_it(tmp_path: Path) -> None:
    path = tmp_path / CURRENT_NAME
    with open(path, "wb") as file:
        file.truncate(MAX_FRAME_BYTES + 36 + 1)  # sparse
    error = assert_corrupt(tmp_path, path)
    assert error.offset == 0


def test_a_directory_named_current_is_corrupt(tmp_path: Path) -> None:
    (tmp_path / CURRENT_NAME).mkdir()
    assert_corrupt(tmp_path, tmp_path / CURRENT_NAME)
