"""A group's backoff (store/consumption/policy.py): the delay rule for attempt n, its stored
text, its bounds, and the group policy falling back to the broker's default."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from store.consumption.policy import (
    BACKOFF_CAP_MS,
    DELAY_LEVELS_MS,
    Backoff,
    BackoffKind,
    group_policy,
)

EXPONENTIALS = st.builds(
    lambda initial_ms, extra_ms, multiplier: Backoff.exponential(
        initial_ms, multiplier, min(initial_ms + extra_ms, BACKOFF_CAP_MS)),
    st.integers(1, BACKOFF_CAP_MS), st.integers(0, BACKOFF_CAP_MS),
    st.floats(1.0, 10.0, allow_nan=False))
BACKOFFS = st.one_of(st.just(Backoff()), EXPONENTIALS)


@given(EXPONENTIALS, st.integers(1, 10_000))
def test_an_exponential_delay_is_initial_times_multiplier_to_the_attempt_capped(
        backoff: Backoff, attempt: int) -> None:
    # multiplier^(attempt - 1) through its logarithm, bounded past any cap (e^50 > 2 h in ms)
    # and exact for multipliers near 1, which need hundreds of attempts to reach the cap
    growth = math.exp(min((attempt - 1) * math.log(backoff.multiplier), 50.0))
    expected = min(backoff.initial_ms * growth, backoff.max_ms)
    assert backoff.delay_ms(attempt) == pytest.approx(expected, rel=1e-9, abs=1)
    assert backoff.initial_ms <= backoff.delay_ms(attempt) <= backoff.max_ms


@given(BACKOFFS, st.integers(1, 300))
def test_delays_never_shrink_from_one_attempt_to_the_next(backoff: Backoff,
                                                          attempt: int) -> None:
    assert backoff.delay_ms(attempt) <= backoff.delay_ms(attempt + 1)


@given(BACKOFFS)
def test_the_stored_text_gives_the_same_backoff_back(backoff: Backoff) -> None:
    assert Backoff.parse(backoff.text) == backoff
    assert len(backoff.text) <= 64


def test_the_table_walks_rocketmqs_levels_from_ten_seconds_then_stays_at_two_hours() -> None:
    backoff = Backoff()
    assert [backoff.delay_ms(attempt) for attempt in range(1, 19)] == [
        *DELAY_LEVELS_MS, 7_200_000, 7_200_000]
    assert DELAY_LEVELS_MS[:4] == (10_000, 30_000, 60_000, 120_000)
    assert backoff.text == "table"


def test_an_exponential_backoff_with_a_fractional_multiplier() -> None:
    backoff = Backoff.exponential(1_000, 1.5, 5_000)
    assert [backoff.delay_ms(attempt) for attempt in range(1, 7)] == [
        1_000, 1_500, 2_250, 3_375, 5_000, 5_000]
    assert backoff.text == "exponential:1000:1.5:5000"


@pytest.mark.parametrize("text", [
    "", "tables", "table:1", "exponential", "exponential:1000:2.0", "exponential:0:2.0:5000",
    "exponential:6000:2.0:5000", "exponential:1000:0.5:5000", "exponential:1000:11.0:5000",
    "exponential:1000:nan:5000", "exponential:1000:inf:5000", "exponential:1000:2:5000",
    "exponential:01000:2.0:5000", "exponential:-1:2.0:5000", "exponential:1000:2.0:7200001",
    "exponential:1000:x:5000", "exponential:1e3:2.0:5000", "exponential:1000:2.0:5000:1",
    "exponential:١٠٠٠:2.0:5000", "table" + " " * 64])
def test_a_bad_text_is_refused_saying_why(text: str) -> None:
    with pytest.raises(ValueError) as raised:
        Backoff.parse(text)
    assert str(raised.value)


def test_the_table_takes_no_exponential_parameters() -> None:
    with pytest.raises(ValueError, match="takes no"):
        Backoff(BackoffKind.TABLE, initial_ms=1_000)


def test_attempts_are_one_based() -> None:
    with pytest.raises(ValueError, match="1-based"):
        Backoff.exponential(1_000).delay_ms(0)


def test_a_group_without_its_own_backoff_takes_the_brokers() -> None:
    default = Backoff.exponential(2_000)
    assert group_policy(None, None, default).backoff == default
    assert group_policy(None, None, default).retry_times_max == 16
    assert group_policy(3, "", default).backoff == default
    own = group_policy(3, "exponential:500:3.0:60000", default)
    assert (own.retry_times_max, own.backoff) == (3, Backoff.exponential(500, 3, 60_000))
    assert [own.backoff_ms(attempt) for attempt in (1, 2, 3, 4, 5)] == [
        500, 1_500, 4_500, 13_500, 40_500]
