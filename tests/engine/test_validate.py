"""Argument and payload checks (walqueue.engine.validate): what may be stored, and the size margin."""

from __future__ import annotations

import enum
import json
import math
import re
import time
from collections import OrderedDict
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from walqueue.engine.batchpayloads import check_flat_payloads
from walqueue.engine.validate import (
    MAX_FRAME_BYTES,
    MAX_INT,
    MAX_NAME_BYTES,
    MAX_PAYLOAD_DEPTH,
    MAX_PAYLOAD_INT_BITS,
    RECORD_WORST_CASE_EXTRA,
    check_int,
    check_name,
    check_payload,
    check_record_fits,
)
from walqueue.format import frame
from walqueue.format.canonical import canonical_json

SETTINGS = settings(max_examples=100, deadline=None)

json_scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(alphabet=st.characters(exclude_categories=["Cs"]), max_size=8)
)
json_values = st.recursive(
    json_scalars,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=4), children, max_size=4),
    max_leaves=12,
)
json_objects = st.dictionaries(st.text(max_size=6), json_values, max_size=5)


def same_json(left: Any, right: Any) -> bool:
    """Equality that also compares types (1, 1.0 and True are three different JSON values)."""
    if type(left) is not type(right):
        return False
    if isinstance(left, dict):
        return left.keys() == right.keys() and all(same_json(left[k], right[k]) for k in left)
    if isinstance(left, list):
        return len(left) == len(right) and all(same_json(a, b) for a, b in zip(left, right, strict=True))
    if isinstance(left, float):
        return math.copysign(1.0, left) == math.copysign(1.0, right) and left == right
    return bool(left == right)


def nested(depth: int, container: str = "dict") -> dict[str, Any]:
    """A payload whose containers nest exactly `depth` levels (the payload itself is level 1)."""
    inner: Any = {} if container == "dict" else []
    for _ in range(depth - 2):
        inner = {"x": inner} if container == "dict" else [inner]
    return {"x": inner} if depth > 1 else {}


# -- names ----------------------------------------------------------------------


def test_frame_bound_is_the_format_layers() -> None:
    assert MAX_FRAME_BYTES == frame.MAX_FRAME_BYTES == 16 * 2**20


@pytest.mark.parametrize("name", ["a", "x" * MAX_NAME_BYTES, "é" * (MAX_NAME_BYTES // 2), "\x00", "日本"])
def test_name_of_1_to_1024_utf8_bytes_is_accepted(name: str) -> None:
    assert check_name(name, "task_id") is name


@pytest.mark.parametrize(
    "name", ["", "x" * (MAX_NAME_BYTES + 1), "é" * (MAX_NAME_BYTES // 2) + "a", "\ud800", "a\udfff"]
)
def test_empty_overlong_or_unencodable_name_is_value_error(name: str) -> None:
    with pytest.raises(ValueError, match="task_id"):
        check_name(name, "task_id")


class StrSubclass(str):
    pass


@pytest.mark.parametrize("name", [None, 1, b"abc", ["a"], StrSubclass("abc")])
def test_name_of_another_type_is_type_error(name: object) -> None:
    with pytest.raises(TypeError, match="worker"):
        check_name(name, "worker")


@SETTINGS
@given(st.text(max_size=MAX_NAME_BYTES // 2 + 20))
def test_name_is_accepted_exactly_when_encodable_and_within_bounds(name: str) -> None:
    try:
        size = len(name.encode("utf-8"))
    except UnicodeEncodeError:
        size = None
    if size is not None and 1 <= size <= MAX_NAME_BYTES:
        assert check_name(name, "key") == name
    else:
        with pytest.raises(ValueError):
            check_name(name, "key")


# -- ints -----------------------------------------------------------------------


class Small(enum.IntEnum):
    ONE = 1


@pytest.mark.parametrize("value", [True, False, 1.0, "1", None, Small.ONE])
def test_non_int_and_bool_are_type_errors(value: object) -> None:
    with pytest.raises(TypeError, match="now"):
        check_int(value, "now")


@pytest.mark.parametrize(("value", "minimum"), [(-1, 0), (0, 1), (MAX_INT + 1, 0), (2**64, 1)])
def test_int_outside_minimum_to_max_int_is_value_error(value: int, minimum: int) -> None:
    with pytest.raises(ValueError, match="delay"):
        check_int(value, "delay", minimum)


@SETTINGS
@given(st.integers(0, MAX_INT), st.integers(0, 10))
def test_int_within_bounds_is_returned(value: int, minimum: int) -> None:
    if value >= minimum:
        assert check_int(value, "x", minimum) == value
    else:
        with pytest.raises(ValueError):
            check_int(value, "x", minimum)


def test_max_int_is_the_largest_19_digit_value() -> None:
    assert check_int(MAX_INT, "x") == 2**63 - 1
    assert len(str(MAX_INT)) == 19


# -- payloads -------------------------------------------------------------------


@SETTINGS
@given(json_objects)
def test_payload_json_round_trips_to_an_identical_value_and_the_same_bytes(payload: dict[str, Any]) -> None:
    encoded = check_payload(payload)
    assert encoded == canonical_json(payload)
    decoded = json.loads(encoded)
    assert same_json(decoded, payload)
    assert canonical_json(decoded) == encoded


@pytest.mark.parametrize("payload", [None, [], "x", 1, OrderedDict(a=1), (("a", 1),)])
def test_payload_that_is_not_exactly_a_dict_is_type_error(payload: object) -> None:
    with pytest.raises(TypeError, match="payload"):
        check_payload(payload)


class DictSubclass(dict):  # type: ignore[type-arg]
    pass


class ListSubclass(list):  # type: ignore[type-arg]
    pass


class FloatSubclass(float):
    pass


@pytest.mark.parametrize(
    "value",
    [(1, 2), {1, 2}, frozenset(), b"x", bytearray(b"x"), object(), DictSubclass(), ListSubclass(), FloatSubclass(1.5)]
    + [StrSubclass("s"), Small.ONE, 1j],
)
def test_nested_value_that_would_not_round_trip_is_type_error(value: object) -> None:
    with pytest.raises(TypeError):
        check_payload({"deep": [{"x": value}]})


@pytest.mark.parametrize("key", [1, None, True, 1.5, ("a",)])
def test_non_str_key_is_type_error_at_any_depth(key: object) -> None:
    with pytest.raises(TypeError, match="keys"):
        check_payload({key: 1})
    with pytest.raises(TypeError, match="keys"):
        check_payload({"a": [{key: 1}]})


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
def test_non_finite_float_is_value_error(value: float) -> None:
    with pytest.raises(ValueError, match="finite"):
        check_payload({"a": [value]})


@pytest.mark.parametrize("payload", [{"a": "\ud800"}, {"\udc00": 1}, {"a": [{"b": "x\udfffy"}]}])
def test_lone_surrogate_anywhere_is_value_error(payload: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="UTF-8"):
        check_payload(payload)


@pytest.mark.parametrize("container", ["dict", "list"])
def test_payload_may_nest_exactly_max_payload_depth_levels(container: str) -> None:
    deepest = nested(MAX_PAYLOAD_DEPTH, container)
    assert json.loads(check_payload(deepest)) == deepest
    with pytest.raises(ValueError, match="deeper"):
        check_payload(nested(MAX_PAYLOAD_DEPTH + 1, container))


def test_cyclic_payload_is_value_error() -> None:
    cyclic: dict[str, Any] = {}
    cyclic["self"] = cyclic
    with pytest.raises(ValueError, match="deeper"):
        check_payload(cyclic)


def test_payload_int_bits_are_bounded_below_the_decimal_conversion_limit() -> None:
    largest = 2**MAX_PAYLOAD_INT_BITS - 1
    assert len(str(largest)) < 4300  # CPython's default int_max_str_digits
    assert json.loads(check_payload({"n": largest, "m": -largest})) == {"n": largest, "m": -largest}
    with pytest.raises(ValueError, match="bits"):
        check_payload({"n": 2**MAX_PAYLOAD_INT_BITS})
    with pytest.raises(ValueError, match="bits"):
        check_payload({"n": [-(2**MAX_PAYLOAD_INT_BITS)]})


def test_shared_structure_expanding_beyond_a_frame_is_refused_before_encoding() -> None:
    big = "a" * 2**20
    started = time.perf_counter()
    with pytest.raises(ValueError, match="larger than a frame"):
        check_payload({"x": [big] * 32})
    assert time.perf_counter() - started < 1.0


def test_payload_check_does_not_change_the_payload() -> None:
    payload = {"b": [1, 2.5, None, True], "a": {"z": "é"}}
    before = json.dumps(payload)
    check_payload(payload)
    assert json.dumps(payload) == before


# -- the record size margin -----------------------------------------------------


def test_record_fits_up_to_exactly_the_frame_bound() -> None:
    payload_json = b'{"x":"' + b"a" * 100 + b'"}'
    size = len(payload_json) + 3 + 3 + RECORD_WORST_CASE_EXTRA
    check_record_fits(payload_json, b'"t"', b'"k"', max_frame_bytes=size)
    with pytest.raises(ValueError, match="too large"):
        check_record_fits(payload_json, b'"t"', b'"k"', max_frame_bytes=size - 1)


def test_record_margin_uses_the_real_frame_bound_by_default() -> None:
    fitting = MAX_FRAME_BYTES - RECORD_WORST_CASE_EXTRA - 6
    check_record_fits(b"x" * fitting, b'"t"', b'"k"')
    with pytest.raises(ValueError):
        check_record_fits(b"x" * (fitting + 1), b'"t"', b'"k"')


def _record(task: str, key: str, worker: str | None, status: str, payload: Any, number: int) -> dict[str, Any]:
    return {
        "task": task,
        "key": key,
        "identity": "f" * 64,
        "status": status,
        "payload": payload,
        "available_at": number,
        "max_attempts": number,
        "attempts": number,
        "generation": number,
        "worker": worker,
        "deadline": None if worker is None else number,
    }


def _extra(task: str, key: str, worker: str | None, status: str, payload: dict[str, Any], number: int) -> int:
    """Bytes of a one-record snapshot body beyond the canonical payload, task id and key."""
    stored = None if status == "completed" else payload
    body = canonical_json({"tasks": [_record(task, key, worker, status, stored, number)]})
    return len(body) - len(canonical_json(payload)) - len(canonical_json(task)) - len(canonical_json(key))


def test_worst_case_record_extra_matches_the_documented_arithmetic() -> None:
    # The worst case the docstring derives: a completed record (payload null,
    # 2 bytes more than {}) whose worker of 1,024 control characters is all
    # 6-byte escapes and whose ints all have 19 digits. No real record is
    # both completed and leased; the bound covers the union anyway.
    record = _record("t", "k", "\x01" * MAX_NAME_BYTES, "completed", None, MAX_INT)
    body = canonical_json({"tasks": [record]})
    extra = len(body) - len(b"{}") - len(b'"t"') - len(b'"k"')
    assert extra == 6461 <= RECORD_WORST_CASE_EXTRA


names = st.text(alphabet=st.characters(exclude_categories=["Cs"]), min_size=1, max_size=40).filter(
    lambda s: len(s.encode("utf-8")) <= MAX_NAME_BYTES
)
escapes = st.text(alphabet='\x00\x1f"\\\n\x7f\u2028é', min_size=MAX_NAME_BYTES - 2, max_size=MAX_NAME_BYTES)


@settings(max_examples=25, deadline=None)
@given(
    task=names | escapes,
    key=names | escapes,
    worker=names | escapes,
    status=st.sampled_from(["ready", "leased", "completed", "dead"]),
    payload=json_objects,
    number=st.integers(0, MAX_INT),
)
def test_margin_covers_every_snapshot_record_and_put_transaction(
    task: str, key: str, worker: str, status: str, payload: dict[str, Any], number: int
) -> None:
    leased_worker = worker if status == "leased" else None
    assert _extra(task, key, leased_worker, status, payload, number) <= RECORD_WORST_CASE_EXTRA
    put = {"op": "put", "task": task, "key": key, "payload": payload, "available_at": number, "max_attempts": number}
    body = canonical_json({"ops": [put], "seq": MAX_INT})
    put_extra = len(body) - len(canonical_json(payload)) - len(canonical_json(task)) - len(canonical_json(key))
    assert put_extra <= RECORD_WORST_CASE_EXTRA


# -- payloads straight from the decoder (recovery) --------------------------------------


def check_decoded_payload(payload: Any) -> bytes:
    """`check_payload` told that `payload` came straight from the JSON decoder."""
    return check_payload(payload, decoded=True)


def verdict(check: Any, payload: Any) -> Any:
    """What a check answers: the bytes, or the class of its error."""
    try:
        return check(payload)
    except (TypeError, ValueError) as exc:
        return type(exc)


# JSON texts that stress every bound the fast path relies on: nesting around
# MAX_PAYLOAD_DEPTH (brackets in strings too), ints around MAX_PAYLOAD_INT_BITS,
# 1e999 (decodes to inf), escaped lone surrogates.
_BIG = 2**MAX_PAYLOAD_INT_BITS
edge_texts = st.sampled_from(
    [
        "[" * depth + "]" * depth
        for depth in (MAX_PAYLOAD_DEPTH - 2, MAX_PAYLOAD_DEPTH - 1, MAX_PAYLOAD_DEPTH, MAX_PAYLOAD_DEPTH + 1)
    ]
    + ['{"a":' * 63 + "1" + "}" * 63, '{"a":' * 64 + "1" + "}" * 64, '"' + "[" * 80 + '"']
    + [str(n) for n in (_BIG - 1, _BIG, -_BIG, -(_BIG - 1))]
    + ["1e999", "-1e999", '"\\ud800"', '"\\udfff x"', "0.5", '"x"', "[]", "{}"]
)


@SETTINGS
@given(json_objects | st.dictionaries(st.text(max_size=3), edge_texts.map(json.loads), max_size=3))
def test_the_decoded_check_agrees_with_the_full_check_on_decoder_output(value: dict[str, Any]) -> None:
    try:
        text = json.dumps(value, allow_nan=True)
    except ValueError:  # a lone surrogate cannot be written as text here; escape it
        text = json.dumps(value, ensure_ascii=True, allow_nan=True)
    decoded = json.loads(text)
    assert verdict(check_decoded_payload, decoded) == verdict(check_payload, decoded)


@pytest.mark.parametrize("text", ['{"a":1e999}', '{"a":"\\ud800"}', '{"a":' + "[" * 64 + "]" * 64 + "}"])
def test_the_decoded_check_refuses_what_the_full_check_refuses(text: str) -> None:
    decoded = json.loads(text)
    with pytest.raises(ValueError):
        check_payload(decoded)
    with pytest.raises(ValueError):
        check_decoded_payload(decoded)


def test_the_decoded_check_takes_the_full_walk_for_an_int_too_large() -> None:
    decoded = {"n": json.loads(str(2**MAX_PAYLOAD_INT_BITS))}
    with pytest.raises(ValueError, match="bits"):
        check_decoded_payload(decoded)
    assert check_decoded_payload({"n": 2**MAX_PAYLOAD_INT_BITS - 1}) == check_payload(
        {"n": 2**MAX_PAYLOAD_INT_BITS - 1}
    )


class _Str(str):
    pass


class _Int(int):
    pass


class _Float(float):
    pass


# Values and keys of a flat payload built in Python, including every kind the walk refuses.
flat_values = (
    json_scalars
    | edge_texts.map(json.loads).filter(lambda value: not isinstance(value, (list, dict)))
    | st.sampled_from(
        [_Str("s"), _Int(1), _Float(0.5), enum.IntEnum("E", "A").A, math.nan, math.inf, (), b"x", "\ud800", 2**14001]
    )
    | st.sampled_from(["{" * 70, "[" * 70, "{[" * 40, "[" * 4300])  # more brackets than levels; past the short size
    | st.text(alphabet="{[]}", min_size=60, max_size=80)
)
flat_keys = st.text(max_size=4) | st.sampled_from([_Str("k"), 1, None, True, 1.5, "\udc00"])


@SETTINGS
@given(st.dictionaries(flat_keys, flat_values, max_size=4))
def test_a_flat_payload_gets_the_walks_verdict_and_bytes(payload: dict[Any, Any]) -> None:
    """The flat shortcut (exact scalar types, bytes settle the bounds) answers as the walk does, error and message."""
    walked: Any
    try:  # nested one level down, the payload takes the walk
        walked = check_payload({"w": payload})[len(b'{"w":') : -1]
    except (TypeError, ValueError) as exc:
        walked = (type(exc), re.sub(r"position \d+", "", str(exc)))  # the wrapper moves the offset
    try:
        shortcut: Any = check_payload(payload)
    except (TypeError, ValueError) as exc:
        shortcut = (type(exc), re.sub(r"position \d+", "", str(exc)))
    assert shortcut == walked


@SETTINGS
@given(st.lists(st.dictionaries(flat_keys, flat_values, max_size=3) | json_objects | st.sampled_from([None, [], "{}"])))
def test_payloads_encoded_together_have_the_bytes_each_has_alone(payloads: list[Any]) -> None:
    """Each payload the batch encodes gets `check_payload`'s bytes; the batch leaves every other one to it."""
    for payload, encoded in zip(payloads, check_flat_payloads(payloads), strict=True):
        if encoded is not None:
            assert encoded == check_payload(payload)


@pytest.mark.parametrize(
    ("payloads", "taken"),
    [
        ([{"a": 1}, {"a": 2, "b": "x"}, {}], [True, True, True]),
        ([{"a": 1}, {"b": 1, "a": 2}, {"c": None}], [True, False, True]),  # keys out of order: alone in its kind
        ([{"a": 1}, {"b": 1, "a": 2}, {"c": None, "a": 0}], [False, True, True]),  # those sorted together
        ([{"a": "},{"}, {"a": 1}], [False, False]),  # a string holding the cut: none taken
        ([{"a": "\ud800"}, {"a": 1}], [False, False]),  # not encodable: checked alone, and named there
        ([{"a": math.nan}, {"a": 1}], [False, False]),
        ([{"a": {"b": 1}}, {"a": 1}], [False, False]),  # not flat, and a batch of one is not encoded together
        ([{"a": "x" * 5000}, {"a": 1}], [False, True]),  # past the flat payload's bound
    ],
)
def test_the_batch_encodes_only_flat_payloads_in_key_order_it_can_cut_back(
    payloads: list[Any], taken: list[bool]
) -> None:
    assert [encoded is not None for encoded in check_flat_payloads(payloads)] == taken


@SETTINGS
@given(st.dictionaries(st.text(max_size=4), json_scalars, max_size=6), st.randoms(use_true_random=False))
def test_a_flat_payload_has_the_same_bytes_whatever_the_order_of_its_keys(payload: dict[str, Any], random: Any) -> None:
    """Keys built in canonical order are encoded without the sort; any other order is sorted: the same bytes."""
    shuffled = list(payload.items())
    random.shuffle(shuffled)
    orders = [dict(sorted(payload.items())), dict(sorted(payload.items(), reverse=True)), dict(shuffled)]
    assert {check_payload(ordered) for ordered in orders} == {canonical_json(payload)}


@SETTINGS
@given(
    st.text(max_size=MAX_NAME_BYTES + 2)
    | st.text(st.characters(min_codepoint=0x80), min_size=300, max_size=600)
    | st.sampled_from(
        ["", "\ud800", "a" * MAX_NAME_BYTES, "a" * (MAX_NAME_BYTES + 1), "é" * 512, "é" * 513, 1, None, b"x"]
    )
)
def test_check_name_accepts_exactly_the_exact_strs_of_1_to_max_utf8_bytes(value: object) -> None:
    """The ASCII shortcut inside `check_name` changes no verdict: the rule, stated plainly, agrees."""
    try:
        size = len(value.encode("utf-8")) if type(value) is str else None
    except UnicodeEncodeError:
        size = None
    expected = size is not None and 1 <= size <= MAX_NAME_BYTES
    try:
        check_name(value, "name")
    except (TypeError, ValueError):
        assert not expected
    else:
        assert expected
