"""Delayed messages in the classic simulation: a master's scheduler (ha/sim_timers.py), as the
broker's (store/timers/scheduler.py): it starts from the timer state once dispatch has reached
the log's end, then keeps its own cursors; each master incarnation (a start, a restart, a
promotion) has its own. Its records are puts of the master like any client's."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from ha.classic.simulation.brokers import MasterSide, Put
from ha.classic.simulation.clients import timer_write
from ha.sim_timers import SimScheduler


class TimerWorld(Protocol):
    @property
    def now_ms(self) -> int: ...

    def next_message_id(self) -> int: ...

    def timer_put_taken(self, broker_name: str, put: Put) -> None: ...


def master_timer_rounds(world: TimerWorld, broker_name: str) -> Callable[[MasterSide], None]:
    """The rounds of one master incarnation's scheduler."""
    scheduler: list[SimScheduler] = []

    def append(master: MasterSide, records: list[bytes]) -> int:
        for record in records:
            write = timer_write(record)
            world.timer_put_taken(broker_name, master.put(
                world.next_message_id(), write.topic, write.queue_id, 0, write.op, write.body))
        return len(records)

    def round_(master: MasterSide) -> None:
        disk = master.disk
        if not scheduler:
            if disk.dispatched_end < disk.end:
                return
            scheduler.append(SimScheduler(disk.timers))
        scheduler[0].round(disk.timers, world.now_ms, lambda records: append(master, records))

    return round_
