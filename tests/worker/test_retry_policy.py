"""The retry policy: exponential backoff with full jitter, reproducible with a seeded generator."""

from __future__ import annotations

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from walqueue.worker import RetryPolicy


def test_ceilings_grow_by_the_factor_from_the_base_up_to_the_cap() -> None:
    policy = RetryPolicy(base=1_000, factor=2.0, cap=10_000)
    ceilings = [policy.ceiling(attempts) for attempts in range(1, 8)]
    assert ceilings == [1_000, 2_000, 4_000, 8_000, 10_000, 10_000, 10_000]


def test_the_backoff_schedule_with_a_seeded_jitter_is_exactly_reproducible() -> None:
    policy = RetryPolicy(base=1_000, factor=2.0, cap=10_000, rng=random.Random(7))
    assert [policy.delay(attempts) for attempts in range(1, 8)] == [331, 1_941, 617, 3_234, 791, 1_186, 8_779]


def test_the_default_policy_is_one_second_doubling_up_to_ten_minutes() -> None:
    policy = RetryPolicy()
    assert (policy.base, policy.factor, policy.cap) == (1_000, 2.0, 600_000)
    assert policy.ceiling(1) == 1_000 and policy.ceiling(11) == 600_000


@given(
    base=st.integers(0, 10**6),
    extra=st.integers(0, 10**7),
    factor=st.floats(1.0, 10.0),
    attempts=st.integers(1, 10_000),
    seed=st.integers(0, 2**32),
)
def test_every_delay_lies_between_zero_and_the_ceiling(
    base: int, extra: int, factor: float, attempts: int, seed: int
) -> None:
    policy = RetryPolicy(base=base, factor=factor, cap=base + extra, rng=random.Random(seed))
    assert 0 <= policy.delay(attempts) <= policy.ceiling(attempts) <= base + extra


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"base": -1}, "base"),
        ({"base": 5, "cap": 4}, "cap"),
        ({"factor": 0.5}, "factor"),
        ({"cap": 1.5}, "cap"),
    ],
)
def test_a_bad_policy_is_refused_by_name(arguments: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        RetryPolicy(**arguments)  # type: ignore[arg-type]
