"""The torn-tail scan's candidate search (CONTRACT §4.5): exactly the offsets where a length in bounds starts.

`_length_candidates` finds them with C-speed searches instead of a Python
loop per byte; these tests hold it to the plain definition, and check that a
zero-filled tail after a torn length is still judged torn.
"""

from __future__ import annotations

from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from walqueue import Queue
from walqueue.format.frame import FRAME_OVERHEAD, LENGTH_BYTES, MAX_FRAME_BYTES, _length_candidates, encode_frame
from walqueue.format.fsck import EXIT_TORN, check
from walqueue.format.names import wal_name


def _by_definition(data: bytes) -> list[int]:
    last = len(data) - FRAME_OVERHEAD - 1
    return [
        offset
        for offset in range(max(0, last + 1))
        if 1 <= int.from_bytes(data[offset : offset + LENGTH_BYTES], "big") <= MAX_FRAME_BYTES
    ]


# Bytes drawn mostly from the values that make lengths interesting: zero runs, 0x01 and high bytes.
_BYTES = st.lists(st.sampled_from([0, 0, 0, 0, 1, 2, 0x7F, 0xFF]), max_size=300).map(bytes)


@given(_BYTES)
def test_candidates_are_exactly_the_in_bound_length_offsets(data: bytes) -> None:
    assert list(_length_candidates(data)) == _by_definition(data)


@given(st.binary(max_size=300))
def test_candidates_on_arbitrary_bytes(data: bytes) -> None:
    assert list(_length_candidates(data)) == _by_definition(data)


def test_the_bound_itself_is_a_candidate_inside_another_candidate() -> None:
    frame = encode_frame({"x": 1})
    data = b"\x00\x01" + MAX_FRAME_BYTES.to_bytes(4, "big")[1:] + frame
    assert list(_length_candidates(data)) == _by_definition(data)


def test_a_torn_sixteen_mib_length_followed_by_zeros_is_a_torn_tail(tmp_path: Path) -> None:
    directory = tmp_path / "q"
    with Queue(directory, sync=False) as queue:
        queue.put("t", {})
    segment = directory / wal_name(1)
    healthy = segment.stat().st_size
    with segment.open("ab") as file:
        file.write(MAX_FRAME_BYTES.to_bytes(4, "big") + bytes(4 << 20))
    report = check(directory, replay=True)
    assert report.exit_code == EXIT_TORN
    with Queue(directory, sync=False) as queue:
        assert queue.get("t") is not None
    assert segment.stat().st_size == healthy
