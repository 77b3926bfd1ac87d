"""Snapshots (CONTRACT §3): header, bodies of records, footer, and nothing after it.

The writer streams records into bounded bodies; the reader streams them back
and checks everything CONTRACT §3 lists: header and footer agree on sequence and
count, exactly that many records, strictly increasing task ids, unique keys,
nothing after the footer, and the size and SHA-256 that CURRENT recorded.
"""

from __future__ import annotations

import hashlib
import inspect
import os
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import walqueue.format.snapshot as snapshot_module
from walqueue.format import (
    BODY_TARGET_BYTES,
    MAX_FRAME_BYTES,
    CorruptStore,
    SegmentEnd,
    SnapshotInfo,
    SnapshotReader,
    canonical_json,
    encode_frame,
    file_sha256,
    read_frames,
    snapshot_name,
    write_snapshot,
)


def record(task: str, key: str | None = None, payload: Any = None, status: str = "ready") -> dict[str, Any]:
    """A snapshot record as the engine writes it (the format layer reads only `task` and `key`)."""
    payload = {"n": task} if payload is None else payload
    identity = {"available_at": 0, "max_attempts": 3, "payload": payload, "task": task}
    return {
        "task": task,
        "key": task if key is None else key,
        "identity": hashlib.sha256(canonical_json(identity)).hexdigest(),
        "status": status,
        "payload": payload,
        "available_at": 0,
        "max_attempts": 3,
        "attempts": 0,
        "generation": 0,
        "worker": None,
        "deadline": None,
    }


def records_named(count: int) -> list[dict[str, Any]]:
    return [record(f"task-{index:05d}") for index in range(count)]


def read_snapshot(path: Path, **expected: Any) -> tuple[int, int, list[dict[str, Any]]]:
    with SnapshotReader(path, **expected) as reader:
        return reader.seq, reader.count, list(reader.records())


def assert_corrupt(path: Path, **expected: Any) -> CorruptStore:
    with pytest.raises(CorruptStore) as info:
        read_snapshot(path, **expected)
    assert info.value.path == str(path)
    assert info.value.reason
    return info.value


def frames_of(path: Path) -> list[Any]:
    with open(path, "rb") as file:
        return list(read_frames(file, str(path), allow_torn_tail=False, end=SegmentEnd()))


def write(path: Path, seq: int, records: list[dict[str, Any]]) -> SnapshotInfo:
    return write_snapshot(path, seq, len(records), (canonical_json(r) for r in records))


# -- round trips -------------------------------------------------------------------------


@pytest.mark.parametrize("count", [0, 1, 2, 50])
def test_a_snapshot_round_trips_its_records(tmp_path: Path, count: int) -> None:
    path = tmp_path / snapshot_name(42)
    records = records_named(count)
    info = write(path, 42, records)
    on_disk = (path.stat().st_size, hashlib.sha256(path.read_bytes()).hexdigest())
    assert (info.size, info.sha256) == file_sha256(path) == on_disk
    assert read_snapshot(path, expected_size=info.size, expected_sha256=info.sha256) == (42, count, records)


def test_a_snapshot_is_a_header_bodies_and_a_footer(tmp_path: Path) -> None:
    path = tmp_path / snapshot_name(7)
    records = records_named(3)
    write(path, 7, records)
    values = [frame.value for frame in frames_of(path)]
    assert values == [{"snapshot": 1, "seq": 7, "tasks": 3}, {"tasks": records}, {"end": True, "seq": 7, "tasks": 3}]
    assert path.read_bytes() == b"".join(encode_frame(value) for value in values)


def test_an_empty_snapshot_has_no_body(tmp_path: Path) -> None:
    path = tmp_path / snapshot_name(0)
    write(path, 0, [])
    assert [frame.value for frame in frames_of(path)] == [
        {"snapshot": 1, "seq": 0, "tasks": 0},
        {"end": True, "seq": 0, "tasks": 0},
    ]


def test_many_records_are_split_across_bodies_within_the_target(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = 700
    monkeypatch.setattr(snapshot_module, "BODY_TARGET_BYTES", target)
    path = tmp_path / snapshot_name(3)
    records = records_named(40)
    records.insert(20, record("task-00019~big", payload={"blob": "b" * 2000}))  # alone larger than the target
    write(path, 3, records)
    frames = frames_of(path)
    bodies = frames[1:-1]
    assert len(bodies) > 5
    for frame in bodies:
        body_length = frame.size - 36
        assert len(frame.value["tasks"]) >= 1
        assert body_length <= target or len(frame.value["tasks"]) == 1
    assert [r for frame in bodies for r in frame.value["tasks"]] == records
    assert read_snapshot(path) == (3, len(records), records)


@settings(max_examples=40, deadline=None)
@given(
    tasks=st.lists(st.text(min_size=1, max_size=12), unique=True, max_size=30),
    target=st.integers(min_value=1, max_value=2000),
    seq=st.integers(min_value=0, max_value=2**63 - 1),
)
def test_any_sorted_records_round_trip_whatever_the_body_target(tasks: list[str], target: int, seq: int) -> None:
    records = [record(task, key=f"k:{task}", payload={"t": task, "x": [1.5, None, True]}) for task in sorted(tasks)]
    with pytest.MonkeyPatch.context() as patch, tempfile.TemporaryDirectory() as directory:
        patch.setattr(snapshot_module, "BODY_TARGET_BYTES", target)
        path = Path(directory) / snapshot_name(seq)
        info = write(path, seq, records)
        got = read_snapshot(path, expected_size=info.size, expected_sha256=info.sha256)
    assert got == (seq, len(records), records)


def test_the_body_target_is_within_the_frame_bound() -> None:
    assert 0 < BODY_TARGET_BYTES <= MAX_FRAME_BYTES


def test_no_body_exceeds_the_frame_bound_when_the_records_do_not_fit_in_one(tmp_path: Path) -> None:
    """About 19 MiB of records in all: one body for all of them could not be framed."""
    path = tmp_path / snapshot_name(1)
    records = [record(f"t{index:03d}", payload={"blob": "p" * 300_000}) for index in range(66)]
    assert sum(len(canonical_json(r)) for r in records) > MAX_FRAME_BYTES
    write(path, 1, records)
    frames = frames_of(path)
    assert all(frame.size - 36 <= MAX_FRAME_BYTES for frame in frames)
    assert len(frames) > 3
    assert read_snapshot(path)[2] == records


def test_write_snapshot_consumes_records_from_a_one_shot_iterator(tmp_path: Path) -> None:
    path = tmp_path / snapshot_name(5)
    records = records_named(10)
    consumed: list[int] = []

    def produce() -> Iterator[bytes]:
        for index, r in enumerate(records):
            consumed.append(index)
            yield canonical_json(r)

    write_snapshot(path, 5, len(records), produce())
    assert consumed == list(range(10))
    assert read_snapshot(path)[2] == records


def test_on_partial_is_called_once_with_exactly_the_header_on_disk(tmp_path: Path) -> None:
    path = tmp_path / snapshot_name(8)
    seen: list[bytes] = []
    records = (canonical_json(r) for r in records_named(2))
    write_snapshot(path, 8, 2, records, on_partial=lambda: seen.append(path.read_bytes()))
    assert seen == [encode_frame({"snapshot": 1, "seq": 8, "tasks": 2})]


@pytest.mark.parametrize(("announced", "given_count"), [(3, 2), (1, 2), (0, 1), (1, 0)])
def test_write_snapshot_refuses_a_count_that_differs_from_the_records(
    tmp_path: Path, announced: int, given_count: int
) -> None:
    path = tmp_path / snapshot_name(1)
    with pytest.raises(ValueError):
        write_snapshot(path, 1, announced, (canonical_json(r) for r in records_named(given_count)))
    # Whatever is left is not a readable snapshot: it has no footer.
    assert_corrupt(path)


# -- streaming reads ------------------------------------------------------------------------


def test_records_are_yielded_lazily_body_by_body(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(snapshot_module, "BODY_TARGET_BYTES", 600)
    path = tmp_path / snapshot_name(2)
    records = records_named(30)
    write(path, 2, records)
    frames = frames_of(path)
    # Damage the digest of the last body: a reader that decoded everything up front would fail at once.
    last_body = frames[-2]
    data = bytearray(path.read_bytes())
    data[last_body.offset + last_body.size - 1] ^= 0x01
    path.write_bytes(bytes(data))
    with SnapshotReader(path) as reader:
        stream = reader.records()
        assert inspect.isgenerator(stream)
        first_body = frames[1].value["tasks"]
        assert [next(stream) for _ in first_body] == first_body
        with pytest.raises(CorruptStore) as info:
            list(stream)
    assert info.value.offset == last_body.offset


def test_a_body_beyond_the_announced_count_yields_none_of_its_records(tmp_path: Path) -> None:
    """The count is checked per body, before its records: a consumer never sees record count + 1."""
    A, B, C, D = (record(name) for name in "abcd")
    path = tmp_path / snapshot_name(1)
    path.write_bytes(
        b"".join(
            encode_frame(value)
            for value in [
                {"snapshot": 1, "seq": 1, "tasks": 3},
                {"tasks": [A, B]},
                {"tasks": [C, D]},
                {"end": True, "seq": 1, "tasks": 3},
            ]
        )
    )
    second_body = frames_of(path)[2]
    with SnapshotReader(path) as reader:
        stream = reader.records()
        assert [next(stream), next(stream)] == [A, B]
        with pytest.raises(CorruptStore, match="more than 3 records") as info:
            next(stream)
    assert info.value.offset == second_body.offset


def test_the_format_layer_leaves_names_to_the_engine(tmp_path: Path) -> None:
    """Only str-ness, order and uniqueness are the format's rules: an empty first task id is the engine's to refuse."""
    records = [{"task": "", "key": "k"}, {"task": "b", "key": "b"}]
    path = tmp_path / snapshot_name(1)
    write(path, 1, records)
    assert read_snapshot(path)[2] == records


def test_records_can_be_read_only_once(tmp_path: Path) -> None:
    path = tmp_path / snapshot_name(1)
    write(path, 1, records_named(2))
    with SnapshotReader(path) as reader:
        list(reader.records())
        with pytest.raises(RuntimeError):
            list(reader.records())


def test_records_compare_task_ids_by_code_point(tmp_path: Path) -> None:
    """Python str order, the same order as canonical JSON's keys: U+FF5A before U+1F600."""
    path = tmp_path / snapshot_name(1)
    records = [record("B"), record("a"), record("é"), record("ｚ"), record("😀")]
    write(path, 1, records)
    assert read_snapshot(path)[2] == records
    swapped = records[:3] + [records[4], records[3]]
    write_snapshot(path, 1, 5, (canonical_json(r) for r in swapped))
    assert_corrupt(path)


# -- damage: hand-made files -----------------------------------------------------------------


def header(seq: int, tasks: int) -> dict[str, Any]:
    return {"snapshot": 1, "seq": seq, "tasks": tasks}


def footer(seq: int, tasks: int) -> dict[str, Any]:
    return {"end": True, "seq": seq, "tasks": tasks}


def body(*records: dict[str, Any]) -> dict[str, Any]:
    return {"tasks": list(records)}


def build(path: Path, values: Iterable[Any], trailing: bytes = b"") -> Path:
    path.write_bytes(b"".join(encode_frame(value) for value in values) + trailing)
    return path


A, B, C = record("a"), record("b"), record("c")


def test_a_hand_built_snapshot_following_every_rule_is_read(tmp_path: Path) -> None:
    """The reference for the damaged variants below: each differs from a file like this in one rule."""
    path = build(tmp_path / snapshot_name(1), [header(1, 3), body(A, B), body(C), footer(1, 3)])
    assert read_snapshot(path) == (1, 3, [A, B, C])


DAMAGED: list[tuple[str, list[Any]]] = [
    ("no frames", []),
    ("only a header", [header(1, 0)]),
    ("a missing footer", [header(1, 2), body(A, B)]),
    ("more records than the count", [header(1, 2), body(A, B, C), footer(1, 2)]),
    ("more records across bodies", [header(1, 2), body(A, B), body(C), footer(1, 2)]),
    ("fewer records than the count", [header(1, 3), body(A, B), footer(1, 3)]),
    ("no records for a count of 1", [header(1, 1), footer(1, 1)]),
    ("a wrong sequence in the footer", [header(1, 2), body(A, B), footer(2, 2)]),
    ("a footer count different from the header's", [header(1, 2), body(A, B), footer(1, 3)]),
    ("header and footer agreeing with each other but not the records", [header(1, 1), body(A, B), footer(1, 1)]),
    ("an extra body after the footer", [header(1, 2), body(A, B), footer(1, 2), body(C)]),
    ("an empty body after the footer", [header(1, 2), body(A, B), footer(1, 2), body()]),
    ("a second footer", [header(1, 2), body(A, B), footer(1, 2), footer(1, 2)]),
    ("a second header", [header(1, 2), header(1, 2), body(A, B), footer(1, 2)]),
    ("records out of order in a body", [header(1, 2), body(B, A), footer(1, 2)]),
    ("records out of order across bodies", [header(1, 3), body(A, C), body(B), footer(1, 3)]),
    ("a repeated task id", [header(1, 2), body(A, record("a", key="other")), footer(1, 2)]),
    ("a repeated task id across bodies", [header(1, 2), body(A), body(record("a", key="z")), footer(1, 2)]),
    ("a repeated key", [header(1, 2), body(A, record("b", key="a")), footer(1, 2)]),
    (
        "a repeated key across bodies",
        [header(1, 3), body(record("a", key="k"), B), body(record("c", key="k")), footer(1, 3)],
    ),
    ("a header with snapshot version 2", [{"snapshot": 2, "seq": 1, "tasks": 0}, footer(1, 0)]),
    ("a header with version true", [{"snapshot": True, "seq": 1, "tasks": 0}, footer(1, 0)]),
    ("a header with a negative seq", [header(-1, 0), footer(-1, 0)]),
    ("a header with a bool seq", [{"snapshot": 1, "seq": True, "tasks": 0}, footer(1, 0)]),
    ("a header with a float count", [{"snapshot": 1, "seq": 1, "tasks": 0.0}, footer(1, 0)]),
    ("a header with an extra field", [{"snapshot": 1, "seq": 1, "tasks": 0, "x": 0}, footer(1, 0)]),
    ("a header missing tasks", [{"snapshot": 1, "seq": 1}, footer(1, 0)]),
    ("a body first", [body(A), footer(1, 1)]),
    ("a footer first", [footer(1, 0)]),
    ("a footer with end false", [header(1, 0), {"end": False, "seq": 1, "tasks": 0}]),
    ("a footer with end 1", [header(1, 0), {"end": 1, "seq": 1, "tasks": 0}]),
    ("a footer with a bool seq", [header(1, 0), {"end": True, "seq": True, "tasks": 0}]),
    ("a footer with an extra field", [header(1, 0), {"end": True, "seq": 1, "tasks": 0, "x": 1}]),
    ("a body that is a list", [header(1, 1), [A], footer(1, 1)]),
    ("a body with an extra field", [header(1, 1), {"tasks": [A], "more": []}, footer(1, 1)]),
    ("a body whose tasks is an object", [header(1, 1), {"tasks": A}, footer(1, 1)]),
    ("a record that is not an object", [header(1, 1), {"tasks": ["a"]}, footer(1, 1)]),
    ("a record without a task", [header(1, 1), {"tasks": [{"key": "a"}]}, footer(1, 1)]),
    ("a record without a key", [header(1, 1), {"tasks": [{"task": "a"}]}, footer(1, 1)]),
    ("a record with an int task", [header(1, 1), {"tasks": [{"task": 1, "key": "a"}]}, footer(1, 1)]),
    ("a record with a null key", [header(1, 1), {"tasks": [{"task": "a", "key": None}]}, footer(1, 1)]),
]


@pytest.mark.parametrize(("case", "values"), DAMAGED, ids=[case for case, _ in DAMAGED])
def test_a_snapshot_breaking_a_rule_is_corrupt(tmp_path: Path, case: str, values: list[Any]) -> None:
    path = build(tmp_path / snapshot_name(1), values)
    error = assert_corrupt(path)
    assert error.offset is not None


@pytest.mark.parametrize("trailing", [b"\x00", b"\x00\x00\x00", b"\x00\x00\x00\x00", b"\n", b"\x00\x00\x00\x05{}"])
def test_trailing_bytes_after_the_footer_are_corrupt(tmp_path: Path, trailing: bytes) -> None:
    values = [header(1, 1), body(A), footer(1, 1)]
    path = build(tmp_path / snapshot_name(1), values, trailing)
    error = assert_corrupt(path)
    assert error.offset == sum(len(encode_frame(value)) for value in values)


def test_a_truncated_snapshot_is_corrupt_at_every_length(tmp_path: Path) -> None:
    """A snapshot is published only once complete: any cut is damage, never a torn tail."""
    path = tmp_path / snapshot_name(4)
    write(path, 4, records_named(3))
    data = path.read_bytes()
    for cut in range(len(data) - 1, -1, -1):
        os.truncate(path, cut)
        assert_corrupt(path)


def test_a_bit_flip_anywhere_in_a_snapshot_is_corrupt(tmp_path: Path) -> None:
    path = tmp_path / snapshot_name(4)
    write(path, 4, [{"key": "a", "task": "a"}, {"key": "k", "task": "b"}])  # the reader needs only task and key
    data = path.read_bytes()
    for index in range(len(data)):
        damaged = bytearray(data)
        damaged[index] ^= 1 << (index % 8)
        path.write_bytes(bytes(damaged))
        assert_corrupt(path)


# -- what CURRENT recorded ----------------------------------------------------------------------


def test_a_snapshot_of_another_size_than_recorded_is_corrupt(tmp_path: Path) -> None:
    path = tmp_path / snapshot_name(1)
    info = write(path, 1, records_named(2))
    for size in (info.size - 1, info.size + 1, 0):
        error = assert_corrupt(path, expected_size=size, expected_sha256=info.sha256)
        assert error.offset is None


def test_a_snapshot_with_another_sha256_than_recorded_is_corrupt(tmp_path: Path) -> None:
    path = tmp_path / snapshot_name(1)
    info = write(path, 1, records_named(2))
    wrong = ("0" if info.sha256[0] != "0" else "1") + info.sha256[1:]
    assert_corrupt(path, expected_size=info.size, expected_sha256=wrong)
    assert_corrupt(path, expected_size=info.size, expected_sha256=info.sha256.upper())


def test_a_valid_replacement_snapshot_is_caught_by_the_recorded_digest(tmp_path: Path) -> None:
    """Another well-formed snapshot of the same size under the same name is still not the published one."""
    path = tmp_path / snapshot_name(1)
    info = write(path, 1, [record("a")])
    write(path, 1, [record("b")])
    assert path.stat().st_size == info.size
    assert_corrupt(path, expected_size=info.size, expected_sha256=info.sha256)


def test_a_missing_snapshot_is_corrupt(tmp_path: Path) -> None:
    path = tmp_path / snapshot_name(1)
    error = assert_corrupt(path, expected_size=10, expected_sha256="0" * 64)
    assert error.offset is None
    assert_corrupt(path)


def test_a_directory_in_place_of_the_snapshot_is_corrupt(tmp_path: Path) -> None:
    path = tmp_path / snapshot_name(1)
    path.mkdir()
    assert assert_corrupt(path).offset is None


def test_a_synced_snapshot_goes_out_in_writes_and_syncs_of_about_a_mebibyte(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A WAL fdatasync that overlaps one of the snapshot's writes or syncs waits for it (DECISIONS §60).
    calls: list[tuple[str, int]] = []
    real_write, real_fdatasync = os.write, os.fdatasync

    def write(fd: int, data: Any) -> int:
        calls.append(("write", len(data)))
        return real_write(fd, data)

    def fdatasync(fd: int) -> None:
        calls.append(("sync", 0))
        real_fdatasync(fd)

    monkeypatch.setattr(os, "write", write)
    monkeypatch.setattr(os, "fdatasync", fdatasync)
    records = [canonical_json({"task": f"t{n:06d}", "pad": "x" * 200}) for n in range(25_000)]  # about 5.5 MiB
    write_snapshot(tmp_path / "snapshot.snap", 1, len(records), records, sync=True)
    written = [size for what, size in calls if what == "write"]
    assert sum(written) > 5 << 20
    assert max(written) <= 2 << 20  # one body frame (about 1 MiB) and what was pending before it
    unsynced = 0
    for what, size in calls:
        unsynced = 0 if what == "sync" else unsynced + size
        assert unsynced <= 3 << 20
