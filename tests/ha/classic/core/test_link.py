"""One slave's link on the master, as a pure state machine: each report, batch and close is an
event with the time as an argument, and each answer is seen without a socket."""

from __future__ import annotations

import pytest

from ha.classic.core.epochs import Agreement, Decision
from ha.classic.core.link import LinkState, ReportOutcome, SlaveLink

MASTER_MAX = 10_000
MASTER_MIN = 0


def agreed_link(agreed_offset: int = 0, slave_id: str = "aa") -> SlaveLink:
    """A link past the handshake and the epoch exchange, waiting for its first report."""
    link = SlaveLink("slave-1", connected_ms=1_000)
    link.identified(slave_id)
    link.slotted()
    assert link.agreed(Decision(Agreement.AGREED, agreed_offset), agreed_offset) == ""
    return link


def streaming_link(sent_end_offset: int = 0) -> SlaveLink:
    """A link that reported 0 and was sent [0, sent_end_offset)."""
    link = agreed_link()
    assert link.report(0, MASTER_MAX, MASTER_MIN, 1_000) == ReportOutcome(acked=True,
                                                                           started=True)
    if sent_end_offset:
        link.sending(0, sent_end_offset)
        link.sent(0, sent_end_offset, 1_000)
    return link


def test_a_new_link_is_in_the_handshake_with_nothing_known() -> None:
    """Before the handshake the link names no slave, holds no slot and has acked nothing."""
    link = SlaveLink("slave-1", connected_ms=5)
    assert (link.address, link.state, link.slave_id) == ("slave-1", LinkState.HANDSHAKE, "")
    assert link.is_open is True and link.ack_beyond_max is False
    assert link.missing_below_offset == 0
    assert (link.agreed_offset, link.request_offset, link.ack_offset) == (-1, -1, -1)
    assert (link.transfer_from_offset, link.sent_end_offset, link.bytes_sent_total) == (-1, -1, 0)
    assert (link.last_ack_ms, link.last_write_ms, link.connected_ms) == (None, 5, 5)
    assert not link.ack_beyond_max and link.close_reason == ""


def test_the_handshake_names_the_slave_and_the_slot_moves_it_on() -> None:
    """`identified` names it, `slotted` moves it to waiting for a report, once."""
    link = SlaveLink("slave-1", connected_ms=0)
    link.identified("ab")
    assert link.slave_id == "ab" and link.state is LinkState.HANDSHAKE
    link.slotted()
    assert link.state.value == "waiting_report"
    link.state = LinkState.TRANSFERRING
    link.slotted()  # a second slot call changes nothing past the handshake
    assert link.state is LinkState.TRANSFERRING


def test_an_agreement_keeps_the_offset_and_a_refusal_names_the_state() -> None:
    """AGREED keeps the agreed offset and goes on; NEEDS_RESET and DIVERGED are refused by
    name with the slave's max offset recorded."""
    link = agreed_link(agreed_offset=700)
    assert (link.agreed_offset, link.request_offset, link.state) == (
        700, -1, LinkState.WAITING_REPORT)
    reset = SlaveLink("s", 0)
    reason = reset.agreed(Decision(Agreement.NEEDS_RESET, 50), 900)
    assert reason == ("slave at 900 agrees with the master only up to 50, which the master "
                      "no longer holds; it needs a reset")
    assert (reset.state, reset.request_offset, reset.agreed_offset) == (
        LinkState.NEEDS_RESET, 900, 50)
    diverged = SlaveLink("s", 0)
    reason = diverged.agreed(Decision(Agreement.DIVERGED, -1), 300)
    assert reason == ("slave at 300 shares no epoch with the master: its log is not this "
                      "master's history (a foreign or reset master); it needs a reset")
    assert (diverged.state, diverged.request_offset) == (LinkState.DIVERGED, 300)


def test_an_empty_slave_is_streamed_from_the_masters_min_offset() -> None:
    """A first report of 0 starts the stream at the master's min offset; it counts as an ack
    of 0 at the report's time."""
    link = agreed_link()
    outcome = link.report(0, MASTER_MAX, 4096, now_ms=77)
    assert outcome == ReportOutcome(close_reason="", acked=True, started=True)
    assert (link.state, link.request_offset, link.ack_offset, link.last_ack_ms) == (
        LinkState.TRANSFERRING, 0, 0, 77)
    assert (link.transfer_from_offset, link.sent_end_offset) == (4096, 4096)
    # It never gets what retention removed below 4096: the master is told (MasterCore).
    assert link.missing_below_offset == 4096


def test_an_empty_slave_of_an_empty_master_starts_at_zero() -> None:
    """A first report of 0 on a master holding nothing starts the stream at 0, with nothing
    missing below it."""
    link = agreed_link()
    assert link.report(0, 0, 0, now_ms=1).started
    assert (link.transfer_from_offset, link.missing_below_offset) == (0, 0)


def test_a_slave_with_data_is_streamed_from_its_report() -> None:
    """A first report at or above the min offset (and within the agreement) starts there,
    the min offset itself included."""
    link = agreed_link(agreed_offset=5000)
    assert link.report(4096, MASTER_MAX, 4096, 1).started
    assert (link.transfer_from_offset, link.ack_offset) == (4096, 4096)
    assert link.missing_below_offset == 0  # it holds what came before, from its own log


def test_a_first_report_below_the_min_offset_needs_a_reset() -> None:
    """A slave wanting bytes retention removed is refused as needs_reset, one byte below the
    min offset included."""
    link = agreed_link(agreed_offset=5000)
    outcome = link.report(4095, MASTER_MAX, 4096, 1)
    assert outcome.close_reason == ("slave at 4095 wants data the master no longer holds "
                                    "(min offset 4096); it needs a reset")
    assert not outcome.acked and not outcome.started
    assert (link.state, link.request_offset, link.ack_offset) == (LinkState.NEEDS_RESET,
                                                                  4095, -1)


@pytest.mark.parametrize("beyond_bytes", [1, 1000])
def test_a_first_report_past_the_agreed_offset_is_ahead_of_master(beyond_bytes: int) -> None:
    """A slave that did not cut back reports more than it agreed to keep: refused, never an
    ack; at exactly the agreed offset it is streamed."""
    link = agreed_link(agreed_offset=700)
    outcome = link.report(700 + beyond_bytes, MASTER_MAX, MASTER_MIN, 1)
    assert outcome.close_reason == (f"slave at {700 + beyond_bytes} is ahead of the offset "
                                    "700 where its log agrees with the master's (it did not "
                                    "cut back)")
    assert (link.state, link.ack_offset, link.request_offset) == (
        LinkState.AHEAD_OF_MASTER, -1, 700 + beyond_bytes)
    assert agreed_link(agreed_offset=700).report(700, MASTER_MAX, MASTER_MIN, 1).started


def test_acks_only_move_forward_and_each_counts() -> None:
    """Every report after the first is an ack; an older one keeps the ack offset, but still
    counts (it is the slave's heartbeat) and stamps its time."""
    link = streaming_link(sent_end_offset=500)
    assert link.report(500, MASTER_MAX, MASTER_MIN, 10) == ReportOutcome(acked=True)
    assert (link.ack_offset, link.last_ack_ms) == (500, 10)
    assert link.report(100, MASTER_MAX, MASTER_MIN, 20) == ReportOutcome(acked=True)
    assert (link.ack_offset, link.last_ack_ms) == (500, 20)
    assert link.report(500, MASTER_MAX, MASTER_MIN, 30).acked and link.ack_offset == 500


def test_an_ack_beyond_what_was_sent_closes() -> None:
    """An ack within the log but one byte past what this link was sent is a fake: closed and
    flagged; an ack exactly at the sent end is taken."""
    link = streaming_link(sent_end_offset=500)
    assert link.report(500, MASTER_MAX, MASTER_MIN, 1).acked
    outcome = link.report(501, MASTER_MAX, MASTER_MIN, 2)
    assert outcome == ReportOutcome("ack 501 is beyond what this connection was sent (500)",
                                    acked=False, started=False)
    assert link.ack_beyond_max is True and link.ack_offset == 500


def test_an_ack_beyond_the_masters_max_closes() -> None:
    """An ack above the master's max offset closes with its own reason (checked first)."""
    link = streaming_link(sent_end_offset=500)
    outcome = link.report(MASTER_MAX + 1, MASTER_MAX, MASTER_MIN, 1)
    assert outcome.close_reason == (f"ack {MASTER_MAX + 1} is beyond the master's max offset "
                                    f"{MASTER_MAX}")
    assert link.ack_beyond_max and link.ack_offset == 0
    at_max = streaming_link(sent_end_offset=MASTER_MAX)
    assert at_max.report(MASTER_MAX, MASTER_MAX, MASTER_MIN, 1).acked


def test_an_ack_counts_from_the_moment_the_batch_is_handed_over() -> None:
    """`sending` moves the sent end before the bytes go out, so an ack that beats `sent`
    (the writer still returning from its send) is taken, not refused."""
    link = streaming_link()
    link.sending(0, 300)
    assert link.report(300, MASTER_MAX, MASTER_MIN, 1).acked
    assert link.transfer_from_offset == 0  # the writer has not returned yet
    link.sent(0, 300, now_ms=9)
    assert (link.transfer_from_offset, link.bytes_sent_total, link.last_write_ms) == (300, 300, 9)
    link.sending(300, 1)  # down to a single byte
    link.sent(300, 1, now_ms=10)
    assert (link.transfer_from_offset, link.bytes_sent_total) == (301, 301)


def test_a_batch_must_follow_the_last_and_hold_bytes() -> None:
    """`sending` takes only the next batch, and only one with bytes (pair assertions: a
    writer that skipped or repeated bytes is a bug, not a condition)."""
    link = streaming_link(sent_end_offset=100)
    with pytest.raises(AssertionError):
        link.sending(100, 0)
    with pytest.raises(AssertionError):
        link.sending(99, 5)
    with pytest.raises(AssertionError):
        SlaveLink("s", 0).identified("")


def test_bytes_to_send_only_while_transferring() -> None:
    """Nothing is sent before the first report, nor when caught up; otherwise what the master
    holds past the next byte to send."""
    waiting = agreed_link()
    assert waiting.bytes_to_send(MASTER_MAX) == 0
    link = streaming_link(sent_end_offset=400)
    assert link.bytes_to_send(1000) == 600
    assert link.bytes_to_send(400) == 0
    assert link.bytes_to_send(399) == 0


def test_heartbeats_follow_writes() -> None:
    """A heartbeat is due once nothing was written for its interval, counted from the last
    batch or heartbeat (from the connection at first)."""
    link = SlaveLink("s", connected_ms=1_000)
    assert not link.heartbeat_due(1_099, 100)
    assert link.heartbeat_due(1_100, 100)
    link.heartbeat_sent(1_150)
    assert not link.heartbeat_due(1_249, 100) and link.heartbeat_due(1_250, 100)
    streaming = streaming_link(sent_end_offset=10)  # sent at 1_000
    assert not streaming.heartbeat_due(1_099, 100)


def test_a_source_gone_needs_a_reset_and_the_close_keeps_it() -> None:
    """Retention removed the next bytes to send: needs_reset, and closing keeps that name."""
    link = streaming_link(sent_end_offset=100)
    reason = link.source_gone(100)
    assert reason == "offset 100 is no longer held by the master"
    assert link.close(reason) and link.state is LinkState.NEEDS_RESET and link.is_refused


def test_close_happens_once_and_keeps_a_refusal() -> None:
    """The first close wins (reason and state); a refused link keeps its state on a plain
    close, and any other link becomes CLOSED or the state asked for."""
    link = streaming_link()
    assert link.close("gone") and link.is_open is False
    assert not link.close("again", LinkState.NEEDS_RESET)
    assert (link.close_reason, link.state) == ("gone", LinkState.CLOSED)
    ahead = agreed_link(agreed_offset=0)
    ahead.report(5, MASTER_MAX, MASTER_MIN, 1)
    ahead.close("ahead")
    assert ahead.state is LinkState.AHEAD_OF_MASTER
    other = streaming_link()
    other.close("asked", LinkState.NEEDS_RESET)
    assert other.state is LinkState.NEEDS_RESET
    assert not streaming_link().is_refused


def test_eligibility_and_diff() -> None:
    """In sync: open, transferring, and less than the bound behind; the diff counts from 0
    before any ack and never goes below 0."""
    link = agreed_link()
    assert not link.is_eligible(0, 10) and link.diff_bytes(300) == 300
    link.report(0, MASTER_MAX, MASTER_MIN, 1)
    assert link.is_eligible(9, 10) and not link.is_eligible(10, 10)
    link.sending(0, 50)
    link.report(50, MASTER_MAX, MASTER_MIN, 1)
    assert link.diff_bytes(60) == 10 and link.diff_bytes(40) == 0
    assert link.is_eligible(59, 10) and not link.is_eligible(60, 10)
    link.close("done")
    assert not link.is_eligible(50, 10)


def test_state_names_are_the_ones_the_admin_views_show() -> None:
    """The states' values are the names /admin/ha and the rejected-slave list report."""
    assert [state.value for state in LinkState] == [
        "handshake", "waiting_report", "transferring", "needs_reset", "ahead_of_master",
        "diverged", "closed"]
