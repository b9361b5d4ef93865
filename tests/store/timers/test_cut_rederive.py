"""A slave's log cut back derives its timer state again from the newest state a save left
at or below the cut, redispatching from there: not from the log's first offset."""

from __future__ import annotations

import shutil
from pathlib import Path

from store import BrokerRole, Message, MessageStore
from store.status import AppendRawStatus
from store.timers.scheduling import Delay
from tests.support.store import wait_dispatched
from tests.support.timers import open_rig, timer_config


def test_a_cut_rederives_the_timer_state_from_the_saved_copy_below_it(
        tmp_path: Path) -> None:
    """The master delivers `a`, its log is copied to the slave's dir; then it delivers `b`.
    The slave starts on the copy (its start saves the state: a copy at that end), takes the
    rest of the master's log, saves again, and is cut back to `b`'s delivery. The state is
    the first copy's plus what follows it up to the cut (`b` scheduled, not delivered), and
    no timer record below that copy is handed to it again (redispatching the whole log
    hands `a`'s delivery again)."""
    master_dir, slave_dir = tmp_path / "master", tmp_path / "slave"
    rig = open_rig(master_dir)
    rig.put(b"a", Delay(delay_level=1))
    rig.start_scheduler()
    rig.advance(1000)
    wait_dispatched(rig.store)
    rig.store.shutdown()
    shutil.copytree(master_dir, slave_dir)
    rig = open_rig(master_dir, rig.clock)
    try:
        rig.put(b"b", Delay(delay_level=1))
        rig.start_scheduler()
        rig.advance(1000)
        delivered_b = next(m for m in rig.delivered() if m.body == b"b")
        slave = MessageStore(timer_config(slave_dir, broker_role=BrokerRole.SLAVE))
        slave.start()
        try:
            end = slave.max_offset
            tail = rig.store.commit_log.read_bytes(end, rig.store.max_offset)
            slave.append_raw(end, tail)
            wait_dispatched(slave)
            slave.save_timer_state()
            assert slave.timer_state.counts().delivered_total == 2
            handed: list[bytes] = []
            apply = slave.dispatch.on_timer_record
            assert apply is not None
            slave.dispatch.on_timer_record = lambda raw: (handed.append(raw), apply(raw))[1]
            slave.truncate_log(delivered_b.commit_log_offset)
            wait_dispatched(slave)
            assert slave.timer_state.counts().delivered_total == 1
            assert slave.timer_state.progress() == {"S:0": 1}
            assert handed == []  # the whole log's redispatch hands `a`'s delivery again
        finally:
            slave.shutdown()
    finally:
        rig.store.shutdown()


def test_a_start_after_a_cut_and_a_crash_has_the_state_of_a_run_without_restart(
        tmp_path: Path) -> None:
    """A slave took the master's log (`a` and `b` delivered) and saved its timer state there;
    it is cut back to `b`'s delivery, takes a new master's log past the old end, and
    crashes before the next save. Started again, its timer state is the one it had before
    the crash (`b` not delivered): the cut rewrote the file with the state it derived (before:
    the file still covered the old end, which the new log passes, so the start took `b`'s
    cut delivery as done)."""
    rig = open_rig(tmp_path / "master")
    new = MessageStore(timer_config(tmp_path / "new", broker_role=BrokerRole.SLAVE))
    new.start()
    # No periodic checkpoint (each saves the timer state): only the test and the cut save.
    quiet = {"broker_role": BrokerRole.SLAVE, "flush_interval_ms": 3_600_000,
             "flush_consume_queue_interval_ms": 3_600_000}
    slave = MessageStore(timer_config(tmp_path / "slave", **quiet))
    slave.start()
    try:
        rig.put(b"a", Delay(delay_level=1))
        rig.put(b"b", Delay(delay_level=2))
        rig.start_scheduler()
        rig.advance(1000)
        rig.advance(5000)
        delivered_b = next(m for m in rig.delivered() if m.body == b"b")
        cut, end = delivered_b.commit_log_offset, rig.store.max_offset
        log = rig.store.commit_log.read_bytes(0, end)
        assert slave.append_raw(0, log) is AppendRawStatus.OK
        wait_dispatched(slave)
        slave.save_timer_state()
        assert slave.timer_state.counts().delivered_total == 2
        # The new master shares the log up to `b`'s delivery, then takes a larger message.
        assert new.append_raw(0, log[:cut]) is AppendRawStatus.OK
        new.change_role(BrokerRole.ASYNC_MASTER)
        new.put_message(Message("Other", b"x" * (end - cut + 100), queue_id=0))
        assert new.max_offset > end
        slave.truncate_log(cut)
        assert slave.append_raw(cut, new.commit_log.read_bytes(cut, new.max_offset)) is \
            AppendRawStatus.OK
        wait_dispatched(slave)
        before = (slave.timer_state.counts(), slave.timer_state.progress())
        assert before[0].delivered_total == 1
        slave.halt()
        slave = MessageStore(timer_config(tmp_path / "slave", **quiet))
        slave.start()
        wait_dispatched(slave)
        assert (slave.timer_state.counts(), slave.timer_state.progress()) == before
    finally:
        for store in (slave, new, rig.store):
            if store.state.value == "RUNNING":
                store.shutdown()
