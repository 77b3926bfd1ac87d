"""A put's op: `put_op` and `put_op_from_mapping` validate a put's arguments and build its op, encoded once.

The op's payload is its carrier, the bytes `ops.plan_puts`/`plan_put` take: the op's own canonical JSON, an
`optable.CARRIER_SEPARATOR` byte, the put's identity digest and the payload's canonical JSON (those last two are
the very bytes a row stores, `rows.DATA`), computed here once, so that the planner, the frame and `apply` reuse
them instead of walking, encoding and hashing the payload again. ``carrier.partition(CARRIER_SEPARATOR)`` cuts it
back in one call: the op's JSON is UTF-8, which never holds the byte 0xFF, so the first one is the separator.
Exact bytes, so that the op stays a dict of atomic values the cyclic collector never tracks (a put_many's
thousand ops would otherwise live through the young collections their own allocation triggers, be promoted, and
bring on full ones), and so that nothing can encode it as JSON by mistake (bytes are not JSON). Pure: nothing
here reads a state.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from hashlib import sha256 as _sha256

from walqueue.engine.batchpayloads import check_flat_payloads
from walqueue.engine.laneplans import lane_fields
from walqueue.engine.optable import CARRIER_SEPARATOR, Op
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

__all__ = ["put_op", "put_op_from_mapping", "put_ops_from_mappings"]

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
    the op's payload is its carrier: the op's JSON, a separator, the identity digest and the payload's JSON (above).
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
    if usual and not lanes and key is None and len(op) == 6:  # the default put: its op's JSON is a fixed template
        op_json = _USUAL_OP % (task_json, payload_json, task_json)
    else:
        op_json = _PUT.splice(
            available_at=available_at,
            key=key_json,
            max_attempts=max_attempts,
            payload=payload_json,
            task=task_json,
            queue=canonical_str(op["queue"]) if lanes and "queue" in op else None,
            priority=op.get("priority") if lanes else None,
            put_at=op.get("put_at") if len(op) > 6 else None,  # (the op holds more than put's six keys only with them)
        )
    op["payload"] = b"".join((op_json, CARRIER_SEPARATOR, digest, payload_json))  # the carrier (the module's docstring)
    return op


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
