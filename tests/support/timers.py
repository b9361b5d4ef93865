"""Delayed messages on a real store, driven by a fake clock: put, run the scheduler's rounds
until it has nothing to do now, read what was delivered."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from store import Message, MessageStore, PutMessageStatus
from store.timers.lanes import TimerPlan, parse_delay_levels
from store.timers.scheduler import TimerScheduler
from store.timers.scheduling import Delay, delayed
from tests.support.store import small_config, wait_dispatched

# Two levels (1 s, 5 s); timer lanes of 100 ms doubling up to 10 s (7 lanes).
TEST_PLAN = TimerPlan(parse_delay_levels("1s 5s"), precision_ms=100, max_delay_ms=10_000)
START_MS = 1_700_000_000_000
ROUNDS_MAX = 10_000


@dataclass
class FakeClock:
    now_ms: int = START_MS

    def __call__(self) -> int:
        return self.now_ms


@dataclass
class TimerRig:
    """A store, its scheduler on a fake clock, and the topics that exist (4 queues each)."""

    store: MessageStore
    clock: FakeClock
    topics: set[str] = field(default_factory=lambda: {"Orders"})
    scheduler: TimerScheduler | None = None

    def start_scheduler(self, **options: Any) -> TimerScheduler:
        self.scheduler = self.store.timer_scheduler(self.queue_count_of, clock=self.clock,
                                                    **options)
        self.scheduler.activate()
        return self.scheduler

    def queue_count_of(self, topic: str) -> int | None:
        return 4 if topic in self.topics else None

    def put(self, body: bytes, delay: Delay, topic: str = "Orders",
            properties: dict[str, str] | None = None, queue_id: int | None = None) -> str:
        """Store a delayed message as produce does; its msg id."""
        message = Message(topic, body, dict(properties or {}), queue_id)
        stored, due_ms = delayed(self.store.config.timers, message, delay, self.clock.now_ms)
        assert due_ms is not None and stored is not message
        result, _ = self.store.put_message(stored)
        assert result.status is PutMessageStatus.PUT_OK
        assert result.msg_id is not None
        return result.msg_id

    def settle(self) -> None:
        """Rounds until the scheduler waits (what is due now is written and dispatched)."""
        assert self.scheduler is not None
        for _ in range(ROUNDS_MAX):
            wait_dispatched(self.store)
            if self.scheduler.run_once() > 0:
                wait_dispatched(self.store)
                return
        raise AssertionError("the scheduler never settled")

    def advance(self, ms: int) -> None:
        self.clock.now_ms += ms
        self.settle()

    def delivered(self, topic: str = "Orders") -> list[Any]:
        """Every message in the topic's queues."""
        found = []
        for queue_id in range(4):
            offset = 0
            while True:
                result = self.store.get_messages(topic, queue_id, offset, 256)
                if not result.messages:
                    break
                found.extend(result.messages)
                offset = result.next_offset
        return found


def timer_config(data_dir: Path, **overrides: Any) -> Any:
    return small_config(data_dir, timers=TEST_PLAN, **overrides)


def open_rig(data_dir: Path, clock: FakeClock | None = None, **overrides: Any) -> TimerRig:
    store = MessageStore(timer_config(data_dir, **overrides))
    store.start()
    return TimerRig(store, clock if clock is not None else FakeClock())
