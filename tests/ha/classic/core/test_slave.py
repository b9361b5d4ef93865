"""The slave's view of its master, as a pure state machine: the epoch answer, frames, the
store's answers and the report and housekeeping clocks, each seen without a socket."""

from __future__ import annotations

from typing import Any

from ha.classic.core.epochs import Agreement, Decision, Epoch
from ha.classic.core.slave import AgreementStep, ApplyOutcome, SlaveCore
from ha.config import HAConfig
from store.status import AppendRawStatus, BrokerRole

HISTORY = [Epoch(1, 0, b"m" * 16), Epoch(3, 500, b"n" * 16)]


def slave(sync_flush: bool = False, **overrides: Any) -> SlaveCore:
    return SlaveCore(HAConfig(**{"broker_role": BrokerRole.SLAVE,
                                 "ha_master_address": "127.0.0.1:1",
                                 "ha_send_heartbeat_interval_ms": 100,
                                 "ha_housekeeping_interval_ms": 1000, **overrides}),
                     sync_flush=sync_flush)


def test_a_new_slave_knows_nothing_of_its_master() -> None:
    """Before any connection: not connected, no agreement, nothing seen, read, written,
    applied or cut, epoch 0, no refusal and no apply error; ASYNC_FLUSH unless told."""
    core = SlaveCore(HAConfig(broker_role=BrokerRole.SLAVE, ha_master_address="h:1"))
    assert (core.connected, core.agreed_offset, core.master_offset_seen) == (False, -1, 0)
    assert (core.last_read_ms, core.last_write_ms) == (None, None)
    assert (core.applied_bytes_total, core.truncated_bytes_total, core.master_epoch) == (0, 0, 0)
    assert (core.refusal, core.apply_error) == (None, None)
    assert core.connected is False and core.flushes_before_reporting is False
    assert core.report_due(0)


def test_an_agreement_below_the_local_end_cuts_back_and_counts_it() -> None:
    """Agreed below what the slave holds: cut to there, counted in truncated_bytes_total;
    the master's history and last epoch are kept."""
    core = slave()
    step = core.agreement(Decision(Agreement.AGREED, 600), HISTORY, 900, 0)
    assert step == AgreementStep(None, 600, HISTORY)
    assert (core.truncated_bytes_total, core.agreed_offset, core.master_epoch) == (300, 600, 3)
    core.disconnected()
    core.agreement(Decision(Agreement.AGREED, 100), HISTORY, 150, 0)  # a log held from 0
    assert core.truncated_bytes_total == 350
    three = [*HISTORY, Epoch(7, 800, b"o" * 16)]
    core.agreement(Decision(Agreement.AGREED, 100), three, 100, 0)
    assert core.master_epoch == 7  # the last epoch's number


def test_a_cut_below_the_first_byte_held_counts_only_what_was_held() -> None:
    """A slave that started at its master's min offset (4096) agreeing at 1000 cuts its whole
    log: what it loses is what it held, [4096, 9000), not [1000, 9000)."""
    core = slave()
    step = core.agreement(Decision(Agreement.AGREED, 1000), HISTORY, 9000, 4096)
    assert step.cut_to_offset == 1000 and core.truncated_bytes_total == 4904


def test_an_agreement_at_the_local_end_cuts_nothing() -> None:
    """Agreed at the slave's end (or an empty slave at 0): nothing to cut; an empty history
    is epoch 0."""
    core = slave()
    assert core.agreement(Decision(Agreement.AGREED, 900), HISTORY, 900, 0) == AgreementStep(
        None, None, HISTORY)
    assert core.truncated_bytes_total == 0
    empty = slave()
    assert empty.agreement(Decision(Agreement.AGREED, 0), [], 0, 0).cut_to_offset is None
    assert empty.master_epoch == 0


def test_a_refusal_is_named_and_nothing_is_cut_or_kept() -> None:
    """needs_reset and diverged are refused by name; the log and history stay as they are,
    and the next agreement clears the refusal."""
    core = slave()
    assert core.agreement(Decision(Agreement.DIVERGED, -1), HISTORY, 900, 0) == AgreementStep(
        "diverged", None, ())
    assert core.refusal == "diverged" and core.agreed_offset == -1
    assert core.agreement(Decision(Agreement.NEEDS_RESET, 5), HISTORY, 900, 0).refusal == (
        "needs_reset")
    core.agreement(Decision(Agreement.AGREED, 900), HISTORY, 900, 0)
    assert core.refusal is None


def test_frames_heartbeats_and_the_master_offset_seen() -> None:
    """A frame with bytes is applied, a heartbeat is not; both move the master offset seen
    (never back)."""
    core = slave()
    assert core.frame(100, 50) and core.master_offset_seen == 150
    assert core.frame(150, 1) and core.master_offset_seen == 151
    core.frame(100, 50)
    assert not core.frame(151, 0) and core.master_offset_seen == 151
    assert not core.frame(120, 0) and core.master_offset_seen == 151
    assert core.diff_bytes(141) == 10 and core.diff_bytes(200) == 0


def test_the_stores_answers() -> None:
    """OK counts the bytes and clears an apply error; a full disk or a write fault is a
    store refusal (reconnect later); anything else is a mismatch."""
    core = slave()
    core.store_refused("CREATE_MAPPED_FILE_FAILED: full")
    assert core.apply_error == "CREATE_MAPPED_FILE_FAILED: full"
    assert core.applied(AppendRawStatus.OK, 40) is ApplyOutcome.APPLIED
    assert core.applied_bytes_total == 40 and core.apply_error is None
    assert core.applied(AppendRawStatus.OK, 2) is ApplyOutcome.APPLIED
    assert core.applied_bytes_total == 42
    for status in (AppendRawStatus.CREATE_MAPPED_FILE_FAILED,
                   AppendRawStatus.STORE_NOT_WRITABLE):
        assert core.applied(status, 40) is ApplyOutcome.STORE_REFUSED
    for status in (AppendRawStatus.OFFSET_MISMATCH, AppendRawStatus.SPANS_FILES):
        assert core.applied(status, 40) is ApplyOutcome.MISMATCH
    assert core.applied_bytes_total == 42


def test_reports_follow_writes_and_housekeeping_follows_reads() -> None:
    """A report is due before the first one and then every heartbeat interval after the
    last; the link is silent too long only past the housekeeping interval since the last
    read (RocketMQ #1082: the two clocks kept apart)."""
    core = slave()
    core.agreement(Decision(Agreement.AGREED, 0), [], 0, 0)
    core.linked(1_000)
    assert core.connected and core.report_due(1_000)
    assert core.report_offset(0, 0) == 0 and not core.flushes_before_reporting
    core.reported(1_000)
    assert not core.report_due(1_099) and core.report_due(1_100)
    assert not core.silent_too_long(2_000) and core.silent_too_long(2_001)
    core.received(1_500)
    core.reported(1_900)  # writes do not keep the link alive
    assert not core.silent_too_long(2_500) and core.silent_too_long(2_501)
    core.disconnected()
    assert core.connected is False and core.agreed_offset == -1



def test_an_async_flush_slave_reports_its_end_a_sync_flush_one_what_it_flushed() -> None:
    """Under ASYNC_FLUSH a report is the slave's max offset; under SYNC_FLUSH it is what of
    it is flushed (the caller flushes first), because a SYNC_MASTER takes the report as the
    message held there."""
    for sync_flush, expected in ((False, 900), (True, 600)):
        core = slave(sync_flush=sync_flush)
        core.agreement(Decision(Agreement.AGREED, 0), [], 0, 0)
        assert core.flushes_before_reporting is sync_flush
        assert core.report_offset(900, 600) == expected
        assert core.report_offset(900, 900) == 900
