"""EntryDispatcher states, the quorum checker and the log's fast back-up search."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from ha.dledger.core.actions import AppendStatus
from ha.dledger.core.entry_log import EntryLog
from ha.dledger.core.progress import DispatcherState, EntryDispatcher
from ha.dledger.core.quorum import PendingAppend, QuorumAckChecker, quorum_index
from tests.support.dledger.harness import entries


def test_compare_then_append_then_commit() -> None:
    """A probe's ack moves COMPARE to APPEND; acks up to the leader's end move it to COMMIT."""
    dispatcher = EntryDispatcher("n1", last_index=5, inflight_max=4)
    assert dispatcher.state is DispatcherState.COMPARE and dispatcher.next_index == 6
    dispatcher.sent(5, now_tick=0)
    assert not dispatcher.can_send()  # one probe at a time
    dispatcher.acked(5, follower_last_index=5, leader_last_index=5, now_tick=1)
    assert dispatcher.state is DispatcherState.APPEND
    dispatcher.caught_up(leader_last_index=5)
    assert dispatcher.state is DispatcherState.COMMIT
    dispatcher.caught_up(leader_last_index=6)
    assert dispatcher.state is DispatcherState.APPEND


def test_a_match_below_a_longer_follower_log_goes_through_truncate() -> None:
    """A follower longer than the match needs one TRUNCATE push before pipelining resumes."""
    dispatcher = EntryDispatcher("n1", last_index=8, inflight_max=4)
    dispatcher.sent(8, now_tick=0)
    dispatcher.acked(3, follower_last_index=9, leader_last_index=8, now_tick=1)
    assert dispatcher.state is DispatcherState.TRUNCATE and dispatcher.next_index == 4
    dispatcher.sent(8, now_tick=1)
    assert not dispatcher.can_send()
    dispatcher.acked(8, follower_last_index=8, leader_last_index=8, now_tick=2)
    assert dispatcher.state is DispatcherState.APPEND and dispatcher.match_index == 8


def test_a_reordered_or_duplicate_reply_never_moves_progress_back() -> None:
    """An old ack after a newer one leaves the match; a reject at or below it is ignored."""
    dispatcher = EntryDispatcher("n1", last_index=0, inflight_max=8)
    dispatcher.acked(0, 0, 10, now_tick=0)
    for last in (4, 8, 10):
        dispatcher.sent(last, now_tick=0)
    dispatcher.acked(8, 8, 10, now_tick=1)
    dispatcher.acked(4, 4, 10, now_tick=2)
    assert dispatcher.match_index == 8 and dispatcher.inflight_count == 1
    assert not dispatcher.rejected(6, 3, follower_last_index=8)
    assert dispatcher.state is DispatcherState.APPEND and dispatcher.match_index == 8


def test_an_unanswered_window_times_out_back_to_compare_from_the_match() -> None:
    """Lost pushes never leave a peer stuck (DLedger #331): past the timeout it probes again."""
    dispatcher = EntryDispatcher("n1", last_index=0, inflight_max=2)
    dispatcher.acked(0, 0, 10, now_tick=0)
    dispatcher.sent(5, now_tick=1)
    dispatcher.sent(10, now_tick=2)
    assert not dispatcher.can_send()
    assert not dispatcher.timed_out(now_tick=3, push_timeout_ticks=5)
    assert dispatcher.timed_out(now_tick=6, push_timeout_ticks=5)
    assert dispatcher.state is DispatcherState.COMPARE and dispatcher.next_index == 1
    assert dispatcher.can_send()


def test_a_reject_backs_up_to_the_hint_but_never_below_the_match() -> None:
    """Fast back-up moves next to the hint in one step, bounded below by match + 1."""
    dispatcher = EntryDispatcher("n1", last_index=50, inflight_max=2)
    dispatcher.sent(50, now_tick=0)
    assert dispatcher.rejected(50, next_probe_index=3, follower_last_index=60)
    assert dispatcher.next_index == 3 and dispatcher.state is DispatcherState.COMPARE
    assert not dispatcher.rejected(40, next_probe_index=1, follower_last_index=60)  # stale


def test_the_quorum_checker_answers_each_pending_append_exactly_once() -> None:
    """Committed appends complete OK, expired ones WAIT_QUORUM_ACK_TIMEOUT, the rest
    LEADERSHIP_LOST on step-down; nothing is answered twice."""
    checker = QuorumAckChecker(pending_max=3)
    for index, deadline in ((1, 10), (2, 5), (3, 10)):
        checker.add(PendingAppend(index * 10, index, 2, deadline))
    assert checker.is_full()
    assert [c.request_id for c in checker.complete_committed(1)] == [10]
    assert [(c.request_id, c.status) for c in checker.complete_expired(5)] == [
        (20, AppendStatus.WAIT_QUORUM_ACK_TIMEOUT)]
    assert [(c.request_id, c.status) for c in checker.complete_all(
        AppendStatus.LEADERSHIP_LOST)] == [(30, AppendStatus.LEADERSHIP_LOST)]
    assert checker.pending_count == 0 and checker.complete_committed(9) == []


@given(st.lists(st.integers(min_value=0, max_value=50), min_size=1, max_size=7))
def test_the_quorum_index_is_the_highest_index_a_majority_reached(matches: list[int]) -> None:
    """quorum_index is reached by a majority, and one more is not."""
    index = quorum_index(matches)
    majority = len(matches) // 2 + 1
    assert sum(m >= index for m in matches) >= majority
    assert sum(m >= index + 1 for m in matches) < majority


@given(st.lists(st.integers(min_value=0, max_value=3), max_size=30),
       st.integers(min_value=0, max_value=40), st.integers(min_value=0, max_value=5))
def test_conflict_hint_is_the_last_index_with_a_term_no_higher(
        increments: list[int], index: int, term: int) -> None:
    """The hint is <= index, its term <= term, and no later index up to `index` qualifies."""
    terms, current = [], 1
    for step in increments:
        current += step
        terms.append(current)
    log = EntryLog(entries=entries(*terms))
    hint_index, hint_term = log.conflict_hint(index, term)
    assert hint_index <= min(index, log.last_index) and log.term_at(hint_index) == hint_term
    assert hint_index == 0 or hint_term <= term
    later = range(hint_index + 1, min(index, log.last_index) + 1)
    assert all((log.term_at(i) or 0) > term for i in later)
