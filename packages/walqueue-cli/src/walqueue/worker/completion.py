"""`Completion`: what an App's handler hands the worker instead of a bare return, and the rules for a result.

A plain handler's return value is ignored and its task is acked. An App
returns a `Completion`: the result to store and the follow-ups to put, and
the worker's completer (complete.py) commits them with the ack in one
transaction (`complete`), or acks as before when there is neither (a store that never stores a result or
a follow-up is byte for byte what it was).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from walqueue.engine.validate import check_payload

__all__ = ["DEFAULT_MAX_RESULT_BYTES", "Completion", "check_json_value"]

#: The longest result's JSON an App stores by default (a bigger one is `ResultTooLarge`, a permanent failure).
DEFAULT_MAX_RESULT_BYTES = 64 * 1024


@dataclass(frozen=True, eq=False)
class Completion:
    """`result` (a JSON value; None: nothing stored), when it expires (`result_expires`), and `puts` (follow-ups)."""

    result: Any = None
    result_expires: int | None = None
    puts: list[dict[str, Any]] = field(default_factory=list)

    @property
    def plain(self) -> bool:
        """Nothing to store and nothing to put: a plain ack does it."""
        return self.result is None and not self.puts


def check_json_value(value: Any, what: str) -> bytes:
    """The canonical JSON of `value` if the store gives it back unchanged; `TypeError` naming `what` otherwise.

    The store's own payload rule (`check_payload`), so what is refused here
    is exactly what would come back changed: a tuple (as a list), a non-str
    key, NaN, a subclass of a JSON type, a set or any other object.
    """
    try:
        wrapped = check_payload({"v": value})
    except (TypeError, ValueError) as error:
        raise TypeError(f"{what} is not JSON the store gives back unchanged: {error}") from None
    return wrapped[len(b'{"v":') : -1]
