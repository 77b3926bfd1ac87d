"""The retry policy: exponential backoff with full jitter, in clock units.

The delay before attempt n + 1, after attempt n failed (n >= 1), is drawn
uniformly from ``[0, min(cap, base * factor ** (n - 1))]``. Full jitter
(rather than a fixed schedule or a +-10 % wiggle) spreads the retries of
many tasks that failed together, say when a database came back, over the
whole window; that is the variant AWS's "Exponential Backoff and Jitter"
found to finish the work soonest with the fewest collisions. The defaults
and how they compare with Sidekiq's, River's, Oban's and Celery's are in
docs/DECISIONS.md ("The worker").

Pass a seeded `random.Random` as `rng` to get a reproducible schedule.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

__all__ = ["DEFAULT_BASE", "DEFAULT_CAP", "DEFAULT_FACTOR", "RetryPolicy"]

#: Defaults in milliseconds (the default clock's unit): 1 s, doubling, at most 10 min.
DEFAULT_BASE = 1_000
DEFAULT_FACTOR = 2.0
DEFAULT_CAP = 600_000


@dataclass(frozen=True)
class RetryPolicy:
    """`delay(attempts)`: how long a task waits before its next attempt, after `attempts` failed ones.

    `base` and `cap` are in clock units (ints >= 0, base <= cap), `factor` a
    number >= 1. With a clock other than milliseconds, scale base and cap.
    """

    base: int = DEFAULT_BASE
    factor: float = DEFAULT_FACTOR
    cap: int = DEFAULT_CAP
    rng: random.Random = field(default_factory=random.Random, compare=False, repr=False)

    def __post_init__(self) -> None:
        for name in ("base", "cap"):
            value = getattr(self, name)
            if type(value) is not int or value < 0:
                raise ValueError(f"RetryPolicy.{name} must be an int >= 0 (clock units), not {value!r}")
        if self.base > self.cap:
            raise ValueError(f"RetryPolicy.base ({self.base}) must not exceed its cap ({self.cap})")
        if type(self.factor) not in (int, float) or not self.factor >= 1:
            raise ValueError(f"RetryPolicy.factor must be a number >= 1, not {self.factor!r}")

    def ceiling(self, attempts: int) -> int:
        """The largest delay after `attempts` (>= 1) failed attempts: ``min(cap, base * factor**(attempts-1))``."""
        exponent = max(0, attempts - 1)
        # Stop multiplying once past the cap: factor ** 5000 would overflow a float.
        ceiling = float(self.base)
        for _ in range(exponent):
            if ceiling >= self.cap:
                break
            ceiling *= self.factor
        return min(self.cap, int(ceiling))

    def delay(self, attempts: int) -> int:
        """A delay drawn uniformly from ``[0, ceiling(attempts)]`` (full jitter), in clock units."""
        return self.rng.randint(0, self.ceiling(attempts))
