"""Epochs: which master wrote which range of the commit log (RocketMQ 5's epoch file), and
where a slave's log stops agreeing with its master's. Pure: the bytes on the wire and in the
epochs file are ha/epochs.py's.

An epoch is (number, start offset, leader id): the broker `leader id` was master from `start
offset` on, until the next epoch's start. A broker begins a new epoch every time it starts as
master (after recovery, which may have cleared bytes) and when a slave is promoted. Histories
only grow at the end, except that a restarting master first drops the epochs that start past
its recovered max offset (it no longer holds any of their bytes).

A slave keeps a copy of its master's history. On connect, master and slave compare histories:
the last epoch both hold (same number, start and leader) tells how far their logs agree,
and the slave cuts its log back to that offset before it is streamed anything. So a slave
that holds bytes its master lost, or bytes of a deposed master, is repaired instead of
diverging silently. Ranges are half-open: epoch i covers [start_i, start_(i+1)).
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass

EPOCHS_MAX = 4096  # a history longer than this drops its oldest epochs


@dataclass(frozen=True, slots=True)
class Epoch:
    number: int
    start_offset: int
    leader_id: bytes

    def view(self) -> dict[str, int | str]:
        return {"epoch": self.number, "start_offset": self.start_offset,
                "leader_id": self.leader_id.hex()}


class Agreement(enum.Enum):
    AGREED = 0  # stream from the agreed offset (after the slave cut its log back to it)
    NEEDS_RESET = 1  # the agreed offset is below what the master still holds
    DIVERGED = 2  # no epoch in common: the slave's bytes are not this master's history


@dataclass(frozen=True, slots=True)
class Decision:
    agreement: Agreement
    agreed_offset: int


def begin_epoch(history: Sequence[Epoch], max_offset: int, leader_id: bytes) -> list[Epoch]:
    """The history of a broker that becomes master with `max_offset` bytes."""
    kept = [epoch for epoch in history if epoch.start_offset <= max_offset]
    number = max((epoch.number for epoch in history), default=0) + 1
    return [*kept, Epoch(number, max_offset, leader_id)][-EPOCHS_MAX:]


def decide(master: Sequence[Epoch], master_max: int, master_min: int,
           slave: Sequence[Epoch], slave_max: int) -> Decision:
    """Where a slave's log stops agreeing with its master's, and whether it can be streamed."""
    if slave_max == 0:
        return Decision(Agreement.AGREED, 0)
    agreed = _agreed_offset(master, master_max, slave, slave_max)
    if agreed is None:
        return Decision(Agreement.DIVERGED, -1)
    if agreed < master_min:
        return Decision(Agreement.NEEDS_RESET, agreed)
    return Decision(Agreement.AGREED, agreed)


def _agreed_offset(master: Sequence[Epoch], master_max: int, slave: Sequence[Epoch],
                   slave_max: int) -> int | None:
    master_index = {epoch: index for index, epoch in enumerate(master)}
    for slave_index in range(len(slave) - 1, -1, -1):
        index = master_index.get(slave[slave_index])
        if index is not None:
            return min(_end(slave, slave_index, slave_max), _end(master, index, master_max))
    return None


def _end(history: Sequence[Epoch], index: int, max_offset: int) -> int:
    following = history[index + 1].start_offset if index + 1 < len(history) else max_offset
    return min(following, max_offset)
