"""A put's op: `put_op` and `put_op_from_mapping` validate a put's arguments and build its op, encoded once.

The op's payload is its carrier, the bytes `ops.plan_puts`/`plan_put` take: the put's identity digest followed by
the payload's canonical JSON (`DIGEST_BYTES` + JSON: the very bytes a row stores, `rows.DATA`), computed here once,
so that the planner and `apply` reuse them instead of walking, encoding and hashing the payload again, and
`put_op_json` splices the op's JSON from them. Exact bytes, so that the op stays a dict of atomic values that the
cyclic collector never tracks (a put_many's thousand ops would otherwise be promoted by the young collections
their own allocation triggers, and bring on full ones), and that nothing can encode it as JSON by mistake (bytes
are not JSON). Pure: nothing here reads a state.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from hashlib import sha256 as _sha256
from operator import itemgetter

from walqueue.engine.batchpayloads import check_flat_payloads
from walqueue.engine.laneplans import lane_fields
from walqueue.engine.optable import Op
from walqueue.engine.rows import DIGEST_BYTES
from walqueue.engine.state import OP_KINDS, identity_digest
from walqueue.engine.validate import (
    DEFAULT_QUEUE,
    FITTING_PAYLOAD_BYTES,
    MAX_NAME_BYTES,
    check_int,
    check_name,
    check_payload,
    check_record_fits,
)
from walqueue.format.canonical import canonical_str
from walqueue.format.canonical import encode_str as _encode_str

__all__ = ["put_op", "put_op_from_mapping", "put_op_json", "put_ops_from_mappings", "put_ops_json"]

_PUT = OP_KINDS["put"]
#: put's defaults, told by identity: one that `is` is an exact, valid int (`put_op` then skips the field check).
_DEFAULT_AVAILABLE_AT, _DEFAULT_MAX_ATTEMPTS = 0, 3


def put_op(
    task_id: object,
    payload: object,
    *,
    key: object = None,
    available_at: object = _DEFAULT_AVAILABLE_AT,
    max_attempts: object = _DEFAULT_MAX_ATTEMPTS,
    build: bool = True,
    queue: object = DEFAULT_QUEUE,
    priority: object = 0,
    put_at: object = 0,
    _payload_json: bytes | None = None,
) -> Op:
    """Validate the arguments of `Queue.put` (`TypeError`/`ValueError`) and build the put's op.

    `build=False` checks only (a client's check). No request object in between (each layer costs more than its work):
    the op's payload is its carrier, the identity digest and the payload's canonical JSON (the module's docstring).
    `_payload_json`, like h11's ``_parsed``, is for `put_ops_from_mappings` alone: `check_flat_payloads`' bytes of
    this very payload, which `check_payload` would return.
    """
    if type(task_id) is not str or not (0 < len(task_id) <= MAX_NAME_BYTES and task_id.isascii()):
        task_id = check_name(task_id, "task_id")  # (the usual name passes `check_name`'s first test, made inline)
    op: Op = {"op": "put", "task": task_id, "key": task_id if key is None else key, "payload": None,
              "available_at": available_at, "max_attempts": max_attempts}  # fmt: skip
    if not ((usual := available_at is _DEFAULT_AVAILABLE_AT and max_attempts is _DEFAULT_MAX_ATTEMPTS) and key is None):
        _PUT.check_fields(op)  # key, available_at and max_attempts, as the table declares them
    if lanes := (queue is not DEFAULT_QUEUE or priority != 0 or type(priority) is not int):  # False: the default lane
        lane_fields(op, queue, priority)  # each written only when it differs from its default
    if put_at != 0 or type(put_at) is not int:  # the producer's time: written only when given, never in the identity
        op["put_at"] = check_int(put_at, "put_at")
    payload_json = check_payload(payload) if _payload_json is None else _payload_json
    task_json = _encode_str(task_id).encode()  # canonical_str, inlined: a checked name always encodes
    key_json = task_json if key is None or key == task_id else canonical_str(op["key"])
    if len(payload_json) > FITTING_PAYLOAD_BYTES:
        check_record_fits(payload_json, task_json, key_json)
    if not build:
        return op
    if lanes:
        digest = identity_digest(task_json, payload_json, available_at, max_attempts, queue, priority)  # type: ignore[arg-type]
    elif usual:  # the next case at put's default numbers: joined around the payload and task, not formatted
        digest = _sha256(b"".join((_USUAL_HEAD, payload_json, _USUAL_MIDDLE, task_json, _USUAL_TAIL))).digest()
    else:  # `identity_digest` spliced here, its lane members at their defaults (omitted): no call but sha256's
        digest = _sha256(_IDENTITY % (available_at, max_attempts, payload_json, task_json)).digest()
    op["payload"] = digest + payload_json  # the carrier (the module's docstring)
    return op


def put_op_json(op: Op) -> bytes:
    """The canonical JSON of a put op `put_op` built: its fields, and the payload's JSON from its carrier.

    A put at every default (the key its task id's very string) fills `_USUAL_OP`; any other takes the kind's
    generated encoder. Both derive from the kind's declaration (tests: equal to `canonical_json` of the op).
    """
    task_id = op["task"]
    if len(op) == 6 and op["key"] is task_id and op["available_at"] == 0 and op["max_attempts"] == 3:
        task_json = _encode_str(task_id).encode()  # (a checked name always encodes)
        return _USUAL_OP % (task_json, op["payload"][DIGEST_BYTES:], task_json)
    return _PUT.encode(op)


def put_ops_json(ops: list[Op]) -> list[bytes]:
    """`put_op_json` of each op (put_op's), a batch of puts at every default at C speed, column by column.

    Such a batch (put's six keys alone, each key its task id, `available_at` 0, `max_attempts` 3: put_op made
    them exact ints) fills `_USUAL_OP` from three columns: the task ids' JSON, the payloads' JSON cut from the
    carriers, the task ids' JSON again. Any other batch takes `put_op_json` op by op (tests: the same bytes).
    """
    task_ids = list(map(_TASK, ops))
    if (
        {*map(len, ops)} == {6}
        and {*map(_AVAILABLE_AT, ops)} == {0}
        and {*map(_MAX_ATTEMPTS, ops)} == {3}
        and list(map(_KEY, ops)) == task_ids
    ):
        task_json = list(map(str.encode, map(_encode_str, task_ids)))  # (checked names always encode)
        payload_json = map(_AFTER_DIGEST, map(_PAYLOAD, ops))
        return list(map(_USUAL_OP.__mod__, zip(task_json, payload_json, task_json, strict=True)))
    return list(map(put_op_json, ops))


_TASK, _KEY, _PAYLOAD, _AVAILABLE_AT, _MAX_ATTEMPTS = map(
    itemgetter, ("task", "key", "payload", "available_at", "max_attempts")
)
_AFTER_DIGEST = itemgetter(slice(DIGEST_BYTES, None))  # a carrier's payload JSON
_IDENTITY = b'{"available_at":%d,"max_attempts":%d,"payload":%b,"task":%b}'  # the default lane's (tests: equal)
_USUAL_HEAD, _USUAL_MIDDLE, _USUAL_TAIL = (_IDENTITY.replace(b"%b", b"%%b") % (0, 3)).split(b"%b")  # at the defaults
#: The op's JSON of a put with every argument but the task id and payload at its default (the key: the task id),
#: `_PUT.splice`'s own bytes with the key, payload and task left as ``%b`` (tests: equal to the splice).
_USUAL_OP = (
    _PUT.splice(available_at=0, key=b"\0", max_attempts=3, payload=b"\1", task=b"\2")
    .replace(b"%", b"%%")
    .replace(b"\0", b"%b")
    .replace(b"\1", b"%b")
    .replace(b"\2", b"%b")
)
_PUT_ARGUMENTS = frozenset({"task_id", "payload", "key", "available_at", "max_attempts", "queue", "priority", "put_at"})


def put_ops_from_mappings(items: Iterable[object]) -> list[Op]:
    """`put_op_from_mapping` of each item, in order (the same ops, or the first bad item's error), the batch's
    flat payloads encoded together (`check_flat_payloads`): `Queue.put_many`'s and `complete`'s follow-ups."""
    items = list(items)  # (the caller's iterable runs its code here, once)
    payloads = [item.get("payload") if type(item) is dict else None for item in items]
    return [
        put_op_from_mapping(item, _payload_json=payload_json)
        for item, payload_json in zip(items, check_flat_payloads(payloads), strict=True)
    ]


def put_op_from_mapping(item: object, build: bool = True, *, _payload_json: bytes | None = None) -> Op:
    """Validate one `put_many` item: a mapping with exactly `put`'s keyword names (`build` as for `put_op`).

    A missing `task_id` or `payload`, or any other key, is a `TypeError`,
    as the same mistake in a call to `put` would be.
    """
    # The usual item (a dict of put's names, both required ones in it: two names alone are those) is seen at C speed.
    if type(item) is not dict or not (
        "task_id" in item and "payload" in item and (len(item) == 2 or item.keys() <= _PUT_ARGUMENTS)
    ):
        if not isinstance(item, Mapping):
            raise TypeError(f"each put_many item must be a mapping, not {type(item).__name__}")
        unknown = [name for name in item if name not in _PUT_ARGUMENTS]
        if unknown:
            raise TypeError(f"unexpected put argument(s) {sorted(map(repr, unknown))}")
        missing = [name for name in ("task_id", "payload") if name not in item]
        if missing:
            raise TypeError(f"put_many item lacks {', '.join(missing)}")
    if len(item) == 2:  # the two required names alone: every other argument at its default, passed by put_op
        return put_op(item["task_id"], item["payload"], build=build, _payload_json=_payload_json)
    return put_op(
        item["task_id"],
        item["payload"],
        key=item.get("key"),
        available_at=item.get("available_at", 0),
        max_attempts=item.get("max_attempts", 3),
        build=build,
        queue=item.get("queue", DEFAULT_QUEUE),
        priority=item.get("priority", 0),
        put_at=item.get("put_at", 0),
        _payload_json=_payload_json,
    )
