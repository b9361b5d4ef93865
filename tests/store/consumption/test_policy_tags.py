"""The retry policy's backoff and attempt bound, and the tag expressions of a receive."""

from __future__ import annotations

import pytest

from store.consumption.policy import Backoff, RetryPolicy
from store.consumption.tags import TagExpressionError, TagFilter


def test_the_table_backoff_starts_at_ten_seconds_and_stops_at_two_hours() -> None:
    policy = RetryPolicy()
    assert [policy.backoff_ms(attempt) for attempt in (1, 2, 3, 16, 17, 100)] == [
        10_000, 30_000, 60_000, 7_200_000, 7_200_000, 7_200_000]


def test_the_exponential_backoff_doubles_up_to_its_cap() -> None:
    policy = RetryPolicy(backoff=Backoff.exponential(1_000, max_ms=10_000))
    assert [policy.backoff_ms(attempt) for attempt in (1, 2, 3, 4, 5, 1_000)] == [
        1_000, 2_000, 4_000, 8_000, 10_000, 10_000]


def test_retry_times_max_counts_retries() -> None:
    assert RetryPolicy(retry_times_max=0).exhausted(1)
    policy = RetryPolicy(retry_times_max=2)
    assert policy.attempts_max == 3
    assert [policy.exhausted(attempt) for attempt in (1, 2, 3)] == [False, False, True]


def test_a_bad_policy_is_refused() -> None:
    with pytest.raises(ValueError):
        RetryPolicy(retry_times_max=-1)


def test_attempts_are_one_based() -> None:
    with pytest.raises(ValueError, match="1-based"):
        RetryPolicy().backoff_ms(0)


@pytest.mark.parametrize("expression", [None, "", "*", "  *  "])
def test_star_and_empty_take_every_message(expression: str | None) -> None:
    tag_filter = TagFilter.parse(expression)
    assert tag_filter.matches(None) and tag_filter.matches("TagA")


def test_alternatives_take_their_tags_only() -> None:
    tag_filter = TagFilter.parse(" TagA ||TagB ")
    assert tag_filter.matches("TagA") and tag_filter.matches("TagB")
    assert not tag_filter.matches("TagC") and not tag_filter.matches(None)


@pytest.mark.parametrize("expression", ["TagA ||", "|| TagA", "TagA || * ", "a||||b",
                                        "x" * 1_025, " || ".join(f"t{n}" for n in range(65))])
def test_bad_expressions_are_refused(expression: str) -> None:
    with pytest.raises(TagExpressionError):
        TagFilter.parse(expression)
