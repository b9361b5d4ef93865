"""The scheduler on a real store and a fake clock: on time, never early, exactly once, across
restarts; cancels; topics gone; what the delivered message carries."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from store import BrokerRole, MessageStore
from store.property_names import PROPERTY_KEYS, PROPERTY_TAGS
from store.status import PutMessageResult, PutMessageStatus
from store.timers.lane_reader import read_lane
from store.timers.names import (
    PROPERTY_DUE_MS,
    PROPERTY_FROM,
    PROPERTY_SCHEDULED_MSG_ID,
    SCHEDULE_TOPIC,
)
from store.timers.scheduler import CancelOutcome, TimerScheduler
from store.timers.scheduling import Delay
from store.waits.completion import PutCompletion
from tests.support.store import wait_dispatched
from tests.support.timers import START_MS, TEST_PLAN, FakeClock, open_rig, timer_config


def _bodies(messages: list) -> list[bytes]:
    return sorted(message.body for message in messages)


def test_a_level_message_is_delivered_at_its_due_time_not_before(tmp_path: Path) -> None:
    rig = open_rig(tmp_path)
    try:
        msg_id = rig.put(b"a", Delay(delay_level=1), properties={
            PROPERTY_KEYS: "k1 k2", PROPERTY_TAGS: "TagA", "order": "42"}, queue_id=2)
        rig.start_scheduler()
        rig.settle()
        rig.advance(999)
        assert rig.delivered() == []
        rig.advance(1)
        (delivered,) = rig.delivered()
        assert (delivered.body, delivered.queue_id) == (b"a", 2)
        assert delivered.keys == "k1 k2" and delivered.tags == "TagA"
        assert delivered.properties["order"] == "42"
        assert delivered.properties[PROPERTY_SCHEDULED_MSG_ID] == msg_id
        assert delivered.properties[PROPERTY_DUE_MS] == str(START_MS + 1000)
        assert delivered.properties[PROPERTY_FROM] == "S:0:0"
        rig.advance(60_000)
        assert len(rig.delivered()) == 1
        assert rig.store.timer_state.counts().delivered_total == 1
        assert rig.store.timer_state.progress() == {"S:0": 1}
    finally:
        rig.store.shutdown()


def test_a_timer_rolls_through_shorter_lanes_and_is_never_early(tmp_path: Path) -> None:
    rig = open_rig(tmp_path)
    try:
        rig.put(b"t", Delay(delay_ms=7_777))
        rig.start_scheduler()
        due = START_MS + 7_777
        while rig.clock.now_ms < due - 10:
            rig.advance(10)
            assert rig.delivered() == [], rig.clock.now_ms - START_MS
        rig.advance(10)
        late_ms = rig.clock.now_ms - due
        while not rig.delivered():
            rig.advance(10)
            late_ms = rig.clock.now_ms - due
        assert 0 <= late_ms <= TEST_PLAN.precision_ms
        counts = rig.store.timer_state.counts()
        assert counts.delivered_total == 1 and counts.rolled_total >= 2
    finally:
        rig.store.shutdown()


@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(delays=st.lists(st.one_of(st.integers(1, 9_999).map(lambda ms: Delay(delay_ms=ms)),
                                 st.integers(1, 2).map(lambda level: Delay(delay_level=level))),
                       min_size=1, max_size=12),
       steps=st.lists(st.integers(1, 900), min_size=1, max_size=40))
def test_every_message_once_never_early_at_most_a_step_and_the_precision_late(
        tmp_path_factory, delays: list[Delay], steps: list[int]) -> None:
    rig = open_rig(tmp_path_factory.mktemp("timers"))
    try:
        due_of = {}
        for index, delay in enumerate(delays):
            body = str(index).encode()
            rig.put(body, delay)
            wait = (delay.delay_ms if delay.delay_ms is not None
                    else TEST_PLAN.level_waits_ms[(delay.delay_level or 1) - 1])
            due_of[body] = START_MS + wait
        rig.start_scheduler()
        seen: dict[bytes, int] = {}
        for step_ms in [*steps, *([1000] * 12)]:
            rig.advance(step_ms)
            for message in rig.delivered():
                seen.setdefault(message.body, rig.clock.now_ms)
            step_bound = step_ms + TEST_PLAN.precision_ms
            for body, at in seen.items():
                assert at >= due_of[body], "early"
                assert at - due_of[body] <= max(step_bound, 1000), "late"
        assert _bodies(rig.delivered()) == sorted(due_of)  # each exactly once
    finally:
        rig.store.shutdown()


def test_a_crash_at_any_round_loses_none_and_repeats_none(tmp_path: Path) -> None:
    """kill -9 (halt: no checkpoint, no flush) after each round of the scheduler, then a new
    store and scheduler from the files: every message is in its topic once."""
    clock = FakeClock()
    rig = open_rig(tmp_path, clock)
    for index in range(20):
        rig.put(str(index).encode(), Delay(delay_ms=200 + 450 * index))
    for _ in range(30):
        rig.start_scheduler()
        rig.advance(350)
        rig.store.halt()
        rig = open_rig(tmp_path, clock)
    rig.start_scheduler()
    rig.advance(10_000)
    try:
        assert _bodies(rig.delivered()) == sorted(str(i).encode() for i in range(20))
        assert rig.store.timer_state.counts().delivered_total == 20
    finally:
        rig.store.shutdown()


def test_a_lost_or_damaged_state_file_is_rebuilt_from_the_log(tmp_path: Path) -> None:
    rig = open_rig(tmp_path)
    rig.put(b"a", Delay(delay_level=1))
    rig.put(b"b", Delay(delay_level=2))
    rig.start_scheduler()
    rig.advance(1000)
    rig.store.shutdown()
    (tmp_path / "timers.json").write_bytes(b"{not json")
    rig = open_rig(tmp_path, rig.clock)
    try:
        assert rig.store.timer_state.progress() == {"S:0": 1}
        rig.start_scheduler()
        rig.advance(5000)
        assert _bodies(rig.delivered()) == [b"a", b"b"]
    finally:
        rig.store.shutdown()


def test_a_state_past_the_log_end_is_thrown_away(tmp_path: Path) -> None:
    """A state that saw records a power cut took is rebuilt from what the log holds."""
    rig = open_rig(tmp_path)
    rig.put(b"a", Delay(delay_level=1))
    rig.store.shutdown()
    state_path = tmp_path / "timers.json"
    state_path.write_bytes(b'{"version":1,"covered_offset":99999999,"progress":{"S:0":1},'
                           b'"cancels":{},"delivered_total":1,"rolled_total":0,"dropped":{}}')
    rig = open_rig(tmp_path, rig.clock)
    try:
        assert rig.store.timer_state.progress() == {}
        rig.start_scheduler()
        rig.advance(1000)
        assert _bodies(rig.delivered()) == [b"a"]
    finally:
        rig.store.shutdown()


def test_a_cancel_before_due_drops_it_and_after_due_is_refused(tmp_path: Path) -> None:
    rig = open_rig(tmp_path)
    try:
        kept = rig.put(b"kept", Delay(delay_ms=3000))
        gone = rig.put(b"gone", Delay(delay_ms=3000))
        scheduler = rig.start_scheduler()
        rig.advance(1000)  # rolled once: the cancel follows the original through its rolls
        gone_offset = rig.store.get_message_by_id(gone).message.commit_log_offset
        result = scheduler.cancel(gone_offset, START_MS + 3000)
        assert result.outcome is CancelOutcome.WRITTEN and result.put is not None
        assert scheduler.cancel(gone_offset, START_MS + 3000).outcome is CancelOutcome.ALREADY
        rig.advance(5000)
        assert _bodies(rig.delivered()) == [b"kept"]
        kept_offset = rig.store.get_message_by_id(kept).message.commit_log_offset
        assert scheduler.cancel(kept_offset, START_MS + 3000).outcome is CancelOutcome.DUE
        counts = rig.store.timer_state.counts()
        assert counts.dropped_totals == {"cancelled": 1} and counts.delivered_total == 1
        assert rig.store.timer_state.cancel_count == 0
    finally:
        rig.store.shutdown()


def test_pending_cancels_are_bounded(tmp_path: Path) -> None:
    rig = open_rig(tmp_path)
    try:
        ids = [rig.put(b"x", Delay(delay_ms=5000)) for _ in range(3)]
        scheduler = rig.start_scheduler(cancels_pending_max=2)
        rig.settle()
        offsets = [rig.store.get_message_by_id(i).message.commit_log_offset for i in ids]
        outcomes = [scheduler.cancel(offset, START_MS + 5000).outcome for offset in offsets]
        assert outcomes == [CancelOutcome.WRITTEN, CancelOutcome.WRITTEN, CancelOutcome.TOO_MANY]
    finally:
        rig.store.shutdown()


def test_a_topic_deleted_before_due_is_dropped_and_counted_not_created(tmp_path: Path) -> None:
    rig = open_rig(tmp_path)
    try:
        rig.put(b"x", Delay(delay_level=1), topic="Gone")
        rig.start_scheduler()
        rig.advance(2000)
        assert rig.delivered("Gone") == []
        assert rig.store.timer_state.counts().dropped_totals == {"topic_missing": 1}
        assert rig.store.queue_offset_range("Gone", 0) is None
    finally:
        rig.store.shutdown()


def test_an_inactive_scheduler_writes_nothing_and_a_new_one_continues(tmp_path: Path) -> None:
    rig = open_rig(tmp_path)
    try:
        for level in (1, 1, 2):
            rig.put(str(level).encode(), Delay(delay_level=level))
        first = rig.start_scheduler()
        rig.advance(1000)
        first.deactivate()
        assert first.run_once() > 0
        rig.clock.now_ms += 5000
        assert len(rig.delivered()) == 2
        rig.start_scheduler()  # a promoted broker's: starts from the state
        rig.settle()
        assert _bodies(rig.delivered()) == [b"1", b"1", b"2"]
        assert rig.store.timer_state.progress() == {"S:0": 2, "S:1": 1}
    finally:
        rig.store.shutdown()


def test_the_lane_topics_are_indexed_like_any_queue(tmp_path: Path) -> None:
    rig = open_rig(tmp_path)
    try:
        rig.put(b"x", Delay(delay_level=2))
        wait_dispatched(rig.store)
        assert rig.store.queue_offset_range(SCHEDULE_TOPIC, 1) == (0, 1)
    finally:
        rig.store.shutdown()


def test_a_state_saved_before_the_checkpoint_is_caught_up_from_the_log(
        tmp_path: Path) -> None:
    """The timer state saved before later deliveries (a save that failed, or a crash between
    the checkpoint and the save): recovery redispatches from where it stops, so the
    deliveries after it count and none is written again."""
    rig = open_rig(tmp_path)
    for index in range(4):
        rig.put(str(index).encode(), Delay(delay_level=1 if index < 2 else 2))
    rig.start_scheduler()
    rig.advance(1000)
    rig.store.save_timer_state()
    early_state = (tmp_path / "timers.json").read_bytes()
    rig.advance(4000)
    rig.store.shutdown()  # the checkpoint now covers the level-2 deliveries
    (tmp_path / "timers.json").write_bytes(early_state)
    rig = open_rig(tmp_path, rig.clock)
    try:
        assert rig.store.timer_state.progress() == {"S:0": 2, "S:1": 2}
        rig.start_scheduler()
        rig.advance(10_000)
        assert _bodies(rig.delivered()) == [b"0", b"1", b"2", b"3"]
        assert rig.store.timer_state.counts().delivered_total == 4
    finally:
        rig.store.shutdown()


def test_a_slave_cut_back_forgets_what_the_cut_records_did(tmp_path: Path) -> None:
    """A slave whose log is cut back to its new master's (the records past the cut were never
    the new master's) derives the timer state again: a delivery it cut is not counted, so
    promoted later it delivers that message itself."""
    rig = open_rig(tmp_path)
    rig.put(b"a", Delay(delay_level=1))
    rig.start_scheduler()
    rig.advance(1000)
    (delivered,) = rig.delivered()
    rig.store.shutdown()
    slave = MessageStore(timer_config(tmp_path, broker_role=BrokerRole.SLAVE))
    slave.start()
    try:
        assert slave.timer_state.progress() == {"S:0": 1}
        slave.truncate_log(delivered.commit_log_offset)
        wait_dispatched(slave)
        assert slave.timer_state.progress() == {}
        assert slave.timer_state.counts().delivered_total == 0
    finally:
        slave.shutdown()


def _counting_scheduler(rig, refusals: list[int]):  # type: ignore[no-untyped-def]
    """The store's scheduler with a reader that counts reads per lane and a writer that
    refuses the next `refusals[0]` writes (SERVICE_NOT_AVAILABLE, nothing appended)."""
    store = rig.store
    reads: Counter[tuple[str, int]] = Counter()

    def read(topic: str, queue_id: int, offset: int, count: int):  # type: ignore[no-untyped-def]
        reads[(topic, queue_id)] += 1
        return read_lane(store.commit_log, store.queues, topic, queue_id, offset, count)

    def write(messages):  # type: ignore[no-untyped-def]
        if refusals[0] > 0:
            refusals[0] -= 1
            refused = PutMessageResult(PutMessageStatus.SERVICE_NOT_AVAILABLE, detail="busy")
            return [(refused, PutCompletion.done(refused.status)) for _ in messages]
        return store.put_messages(messages)

    scheduler = TimerScheduler(store.config.timers, store.timer_state, read,
                               store.read_record_or_none, write, rig.queue_count_of,
                               store.dispatch_caught_up, clock=rig.clock)
    scheduler.activate()
    rig.scheduler = scheduler
    return scheduler, reads


def test_a_waiting_head_is_not_read_again_before_it_wakes(tmp_path: Path) -> None:
    rig = open_rig(tmp_path)
    try:
        rig.put(b"later", Delay(delay_level=2))
        scheduler, reads = _counting_scheduler(rig, [0])
        rig.settle()
        for _ in range(5):
            rig.clock.now_ms += 900
            scheduler.run_once()
        assert reads[(SCHEDULE_TOPIC, 1)] == 1  # its head wakes at 5 s: read once
        rig.advance(500)
        assert [m.body for m in rig.delivered()] == [b"later"]
        assert reads[(SCHEDULE_TOPIC, 1)] >= 2
    finally:
        rig.store.shutdown()


def test_a_refused_write_is_tried_again_at_the_next_round(tmp_path: Path) -> None:
    """A due head whose write is refused is the lane's head still: the next round writes it,
    though the entry behind it waits."""
    rig = open_rig(tmp_path)
    try:
        rig.put(b"a", Delay(delay_level=1))
        rig.clock.now_ms += 500
        rig.put(b"b", Delay(delay_level=1))  # same lane, due 500 ms later
        scheduler, _ = _counting_scheduler(rig, [1])
        rig.clock.now_ms += 500
        wait_dispatched(rig.store)
        scheduler.run_once()  # "a" is due, its write refused; "b" waits
        assert rig.delivered() == [] and scheduler.write_refusals_total == 1
        rig.settle()
        assert [m.body for m in rig.delivered()] == [b"a"]
    finally:
        rig.store.shutdown()
