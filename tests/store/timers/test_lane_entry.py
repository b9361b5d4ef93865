"""A lane entry's schedule in one property: round trip, entries of the earlier encoding read
back, and what a pending message costs in the log next to the same message sent plain."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from store.record import Message, encode_message
from store.timers.lane_entry import Schedule, encode_schedule, schedule_of
from store.timers.lanes import TimerPlan
from store.timers.names import PROPERTY_SCHEDULE
from store.timers.scheduling import Delay, delayed

NOW_MS = 1_790_000_000_000
HOST = b"\x7f\x00\x00\x01\x00\x00\x27\x10"


@given(st.text(min_size=1, max_size=120).filter(lambda t: "\x01" not in t and "\x02" not in t),
       st.none() | st.integers(0, 1023), st.integers(0, 10**14), st.integers(0, 10**12))
def test_a_schedule_round_trips_whatever_the_topic_name(topic: str, queue_id: int | None,
                                                        due_ms: int, early_ms: int) -> None:
    schedule = Schedule(topic, queue_id, due_ms, due_ms - early_ms)
    assert schedule_of({PROPERTY_SCHEDULE: encode_schedule(schedule)}) == schedule


def test_entries_of_the_earlier_encoding_are_read() -> None:
    """Four named properties, as entries written before carry them; a damaged one is none."""
    old = {"TWINLOG_REAL_TOPIC": "Orders", "TWINLOG_REAL_QID": "3",
           "TWINLOG_DUE_MS": "2000", "TWINLOG_WAKE_MS": "1500"}
    assert schedule_of(old) == Schedule("Orders", 3, 2000, 1500)
    level = {"TWINLOG_REAL_TOPIC": "Orders", "TWINLOG_DUE_MS": "2000"}
    assert schedule_of(level) == Schedule("Orders", None, 2000, 2000)
    assert schedule_of({"TWINLOG_DUE_MS": "x", "TWINLOG_REAL_TOPIC": "O"}) is None
    assert schedule_of({PROPERTY_SCHEDULE: "12:x::O"}) is None
    assert schedule_of({"KEYS": "k"}) is None


def test_a_pending_message_costs_at_most_56_bytes_more_in_the_log() -> None:
    """A message due in two days (the longest timer lane, with a wake time) next to the same
    message sent plain: the record is at most 56 bytes longer (the lane's topic name, and its
    schedule), so a million pending ones stay within 64 MiB of log pages more (96 bytes
    before: 92 MiB more, measured by bench/timers.py)."""
    message = Message("Many", b"x" * 100, {"KEYS": "k-1"})
    scheduled, due_ms = delayed(TimerPlan(), message, Delay(delay_ms=2 * 86_400_000), NOW_MS)
    assert due_ms is not None and scheduled.topic != message.topic

    def size(encoded: Message) -> int:
        record = encode_message(encoded, 0, NOW_MS, HOST, 1 << 20)
        assert isinstance(record, bytes)
        return len(record)

    assert size(scheduled) - size(message) <= 56
