"""The WAL transaction envelope (CONTRACT §3): ``{"seq": S, "ops": [op, ...]}``, S >= 1, ops non-empty.

The format layer checks the envelope and each op's name; what an op means is
the engine's state machine's business.
"""

from __future__ import annotations

from typing import Any

import pytest

from walqueue.format import OP_NAMES, CorruptStore, decode_frame, encode_frame, transaction_seq

PUT = {"op": "put", "task": "t", "key": "t", "payload": {}, "available_at": 0, "max_attempts": 3}
LEASE = {"op": "lease", "task": "t", "worker": "w", "generation": 1, "deadline": 10}
EXPIRE = {"op": "expire", "task": "t", "generation": 1}
ACK = {"op": "ack", "task": "t", "generation": 1}
RELEASE = {"op": "release", "task": "t", "generation": 1, "available_at": 5}


def test_the_op_names_are_exactly_the_contracts_the_lifecycle_ops_and_the_last_errors() -> None:
    lifecycle = {"put", "lease", "expire", "ack", "release", "extend", "redrive", "cancel", "fail", "error"}
    # and the format extensions (docs/FORMAT.md), a queue's settings (lanes) among them
    assert OP_NAMES == lifecycle | {"clock", "traceback", "give_back", "result", "configure"}


@pytest.mark.parametrize("op", [PUT, LEASE, EXPIRE, ACK, RELEASE], ids=lambda op: op["op"])
def test_an_envelope_with_each_op_gives_its_sequence(op: dict[str, Any]) -> None:
    assert transaction_seq({"seq": 7, "ops": [op]}, "/d/wal", 0) == 7


def test_an_envelope_with_many_ops_survives_a_frame_round_trip() -> None:
    value = {"seq": 2**63 - 1, "ops": [PUT, LEASE, EXPIRE, ACK, RELEASE]}
    assert transaction_seq(decode_frame(encode_frame(value)), None, 0) == 2**63 - 1


BAD_ENVELOPES: list[tuple[str, Any]] = [
    ("not an object", [1, [PUT]]),
    ("null", None),
    ("missing seq", {"ops": [PUT]}),
    ("missing ops", {"seq": 1}),
    ("an extra field", {"seq": 1, "ops": [PUT], "time": 0}),
    ("seq 0", {"seq": 0, "ops": [PUT]}),
    ("seq -1", {"seq": -1, "ops": [PUT]}),
    ("seq true", {"seq": True, "ops": [PUT]}),
    ("seq 1.0", {"seq": 1.0, "ops": [PUT]}),
    ('seq "1"', {"seq": "1", "ops": [PUT]}),
    ("seq null", {"seq": None, "ops": [PUT]}),
    ("empty ops", {"seq": 1, "ops": []}),
    ("ops an object", {"seq": 1, "ops": PUT}),
    ("ops null", {"seq": 1, "ops": None}),
    ("an unknown op name", {"seq": 1, "ops": [{"op": "delete", "task": "t"}]}),
    ("an op name in another case", {"seq": 1, "ops": [{**PUT, "op": "PUT"}]}),
    ("an op without a name", {"seq": 1, "ops": [{"task": "t"}]}),
    ("an op name that is not a string", {"seq": 1, "ops": [{**ACK, "op": 1}]}),
    ("an op that is not an object", {"seq": 1, "ops": ["put"]}),
    ("an unknown op after valid ones", {"seq": 1, "ops": [PUT, ACK, {"op": "purge"}]}),
]


@pytest.mark.parametrize(("case", "value"), BAD_ENVELOPES, ids=[case for case, _ in BAD_ENVELOPES])
def test_a_malformed_envelope_is_corrupt_at_its_frame(case: str, value: Any) -> None:
    with pytest.raises(CorruptStore) as info:
        transaction_seq(value, "/d/wal-00000000000000000003.log", 4096)
    assert info.value.path == "/d/wal-00000000000000000003.log"
    assert info.value.offset == 4096
    assert info.value.reason


@pytest.mark.parametrize("name", [[], {}, ["put"], {"op": "put"}, None, 1.5], ids=repr)
def test_an_op_name_of_any_json_type_but_string_is_corrupt_not_a_type_error(name: Any) -> None:
    """An unhashable name (a list or an object) cannot be looked up in a set: it must still be CorruptStore."""
    with pytest.raises(CorruptStore) as info:
        transaction_seq({"seq": 1, "ops": [PUT, {**ACK, "op": name}]}, "/d/wal", 8)
    assert info.value.offset == 8
    assert "op 1 " in info.value.reason


@pytest.mark.parametrize(
    ("ops", "index"),
    [
        ([{"op": "x"}, {"op": "x"}], 0),
        ([PUT, ACK, "put"], 2),
        ([PUT, PUT, {"op": "purge"}, {"op": "purge"}], 2),
        ([ACK, None, ACK], 1),
    ],
)
def test_the_reason_names_the_first_bad_op(ops: list[Any], index: int) -> None:
    with pytest.raises(CorruptStore) as info:
        transaction_seq({"seq": 4, "ops": ops}, None, 0)
    assert info.value.reason.startswith(f"invalid transaction 4: op {index} is not a known op (")


def test_the_reason_names_an_unknown_op_so_an_older_reader_says_what_it_lacks() -> None:
    """docs/FORMAT.md: a reader without a newer kind refuses it by name."""
    with pytest.raises(CorruptStore) as info:
        transaction_seq({"seq": 4, "ops": [PUT, {"op": "rewind", "task": "t"}]}, None, 0)
    assert info.value.reason == "invalid transaction 4: op 1 is not a known op (op name 'rewind')"


def test_an_envelope_with_the_two_fields_in_any_order_is_read() -> None:
    assert transaction_seq({"ops": [ACK], "seq": 3}, None, 0) == 3
    assert transaction_seq(dict([("seq", 3), ("ops", [ACK])]), None, 0) == 3
