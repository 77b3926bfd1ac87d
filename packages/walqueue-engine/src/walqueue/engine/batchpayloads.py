"""A put_many's payloads encoded together: one call of the encoder for many small flat payloads.

A put_many's payloads are mostly small flat dicts built alike, and one call of the encoder costs about a third of
encoding one (the call, its writer, the join). `check_flat_payloads` encodes the batch's flat payloads
(`validate.flat_encoder`) as one list and cuts its JSON back into each payload's bytes: the very bytes
`check_payload` would return for each, or None where it must decide alone. Pure: it encodes, nothing else.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from walqueue.engine.validate import SHORT_PAYLOAD_BYTES, flat_encoder
from walqueue.format.canonical import encode_chunks, encode_chunks_in_order

__all__ = ["check_flat_payloads"]


def check_flat_payloads(payloads: Sequence[object]) -> list[bytes | None]:
    """`check_payload`'s bytes of each flat payload (`flat_encoder`), from one call of the encoder per kind of order.

    None for every other payload: `check_payload` decides it alone. The flat payloads whose keys are in order go
    in one list, encoded without the sort, the others in another, sorted (`_encode_together`).
    """
    found: list[bytes | None] = [None] * len(payloads)
    encoders = list(map(flat_encoder, payloads))
    for encode in {encode_chunks_in_order, encode_chunks}:  # (one when there is no C encoder: it sorts)
        _encode_together(payloads, [index for index, used in enumerate(encoders) if used is encode], encode, found)
    return found


def _encode_together(
    payloads: Sequence[object], at: list[int], encode: Callable[[Any, int], Sequence[str]], found: list[bytes | None]
) -> None:
    """Set ``found[i]`` for each ``i`` of `at` to the bytes of ``payloads[i]``, from the JSON of their list.

    The list's JSON is cut back at ``},{`` (a payload's closing brace, the list's comma, the next one's opening
    brace): those are the n-1 places between n payloads exactly when the list holds n-1 of them (a string holding
    one adds one: then none is set). The flat payload's bound is `check_payload`'s: shorter than
    `SHORT_PAYLOAD_BYTES`. A payload that is not JSON (a float out of range, a lone surrogate) sets none either,
    and `check_payload` then names it.
    """
    if len(at) < 2:
        return
    try:
        text = "".join(encode([payloads[index] for index in at], 0)).encode()
    except ValueError:
        return
    parts = text[2:-2].split(b"},{")  # (the list's ``[{`` and ``}]`` cut first)
    if len(parts) == len(at):
        for index, part in zip(at, parts, strict=True):
            if len(part) + 2 < SHORT_PAYLOAD_BYTES:
                found[index] = b"{%b}" % part
