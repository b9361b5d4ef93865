"""The at-least-once rules the DLedger leader-kill test checks its clients' journal with
(tests/support/consumption_journal.py), on journals of what its runs met: the CI failure of
issue 30 (one body received twice at attempt 1, 27 ms apart, as two stored messages: a
producer's resend), two retry copies of one delivery across a kill, an ack whose answer was
lost; and the double deliveries the rules must still catch."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.consumption_journal import Journal, check

# The figures of the CI failure: (answered at ms, attempt, invisible until ms).
_FIRST = (1795875040866.8884, 1, 1795875042353)
_SECOND = (1795875040885.077, 1, 1795875042380)


def _message(body: str, queue_offset: int, attempt: int, until_ms: int, copy: int,
             queue_id: int = 0) -> dict[str, Any]:
    return {"body": body, "queue_id": queue_id, "queue_offset": queue_offset,
            "delivery_attempt": attempt, "invisible_until_ms": until_ms,
            "commit_log_offset": copy}


def _journal(*produced: str) -> Journal:
    journal = Journal()
    journal.produced.update(produced)
    return journal


def test_one_body_stored_twice_is_two_messages() -> None:
    """The CI failure's deliveries, of two stored messages (the body resent after a lost
    answer): each delivered once, then acked; nothing came back early."""
    journal = _journal("w0119")
    for (answered_ms, attempt, until_ms), offset in ((_FIRST, 30), (_SECOND, 31)):
        message = _message("w0119", offset, attempt, until_ms, copy=1000 + offset)
        delivery = journal.delivered(message, 200, answered_ms)
        journal.acked(message, delivery, answered_ms + 5)
    check(journal)


def test_one_stored_message_delivered_twice_in_flight_is_caught() -> None:
    """The same figures as one stored message: the double delivery the test exists for."""
    journal = _journal("w0119")
    for answered_ms, attempt, until_ms in (_FIRST, _SECOND):
        message = _message("w0119", 30, attempt, until_ms, copy=1030)
        journal.acked(message, journal.delivered(message, 200, answered_ms), until_ms)
    with pytest.raises(AssertionError, match="came back before its invisible time"):
        check(journal)


def test_a_receive_answered_202_may_come_back_at_once() -> None:
    """A receive answered 202 (its record may be lost with the leader): the next leader may
    deliver the message again at once, at attempt 1."""
    journal = _journal("w0007")
    first = _message("w0007", 7, 1, 20_000, copy=700)
    journal.delivered(first, 202, 18_500)
    again = _message("w0007", 7, 1, 22_100, copy=700)
    journal.acked(again, journal.delivered(again, 200, 20_600), 20_610)
    check(journal)


def test_two_retry_copies_of_one_delivery_are_a_duplicate_not_an_early_return() -> None:
    """A kill between a retry copy and the record ending the delivery: the next leader ends
    it again and puts a second copy; both come back (attempt 2, one answer) after the first
    delivery's invisible time, and each is acked."""
    journal = _journal("w0033")
    first = _message("w0033", 8, 1, 1795876358681, copy=800, queue_id=1)
    journal.delivered(first, 200, 1795876357185.194)
    for copy in (9100, 9200):
        message = _message("w0033", 8, 2, 1795876362118, copy=copy, queue_id=1)
        journal.acked(message, journal.delivered(message, 200, 1795876360621.6765),
                      1795876360700)
    check(journal)


def test_a_later_attempt_before_the_invisible_time_is_caught() -> None:
    journal = _journal("w0040")
    first = _message("w0040", 40, 1, 10_000, copy=4000)
    journal.delivered(first, 200, 8_500)
    early = _message("w0040", 40, 2, 11_000, copy=9000)
    journal.acked(early, journal.delivered(early, 200, 9_500), 9_600)
    with pytest.raises(AssertionError, match="came back before its invisible time"):
        check(journal)


def test_a_delivery_after_an_ack_answered_200_is_caught() -> None:
    journal = _journal("w0050")
    first = _message("w0050", 50, 1, 10_000, copy=5000)
    journal.acked(first, journal.delivered(first, 200, 8_500), 8_600)
    again = _message("w0050", 50, 2, 13_000, copy=9500)
    journal.delivered(again, 200, 11_000)
    with pytest.raises(AssertionError, match="delivered again after its ack"):
        check(journal)


def test_an_ack_whose_answer_was_lost_counts_and_a_missing_ack_is_caught() -> None:
    journal = _journal("w0108", "w0109")
    journal.delivered(_message("w0108", 27, 1, 10_000, copy=2700), 200, 8_500)
    journal.unanswered_acks.add("w0108")  # the leader applied it, then died unanswered
    with pytest.raises(AssertionError, match=r"1 produced messages never acked: \['w0109'\]"):
        check(journal)
    journal.unanswered_acks.add("w0109")
    check(journal)
