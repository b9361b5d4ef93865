"""QuorumAckChecker: the commit rule and the bounded table of client appends awaiting it.

The quorum index is the highest index durable on a majority (the leader counts its own durable
end); it commits only if that entry is of the current term (no Figure 8: DLedger #4). Earlier
entries commit with it.
"""

from __future__ import annotations

from dataclasses import dataclass

from ha.dledger.core.actions import AppendStatus, CompleteAppend


def quorum_index(match_indexes: list[int]) -> int:
    """The largest index that a majority of `match_indexes` has reached."""
    ordered = sorted(match_indexes, reverse=True)
    return ordered[len(ordered) // 2]


@dataclass(slots=True)
class PendingAppend:  # never changed; one per client append, so not frozen (messages.Entry)
    request_id: int
    index: int
    term: int
    deadline_tick: int


class QuorumAckChecker:
    def __init__(self, pending_max: int) -> None:
        self.pending_max = pending_max
        self._pending: dict[int, PendingAppend] = {}  # by index, in index order

    @property
    def pending_count(self) -> int:
        return len(self._pending)

    @property
    def room(self) -> int:
        """How many more appends may wait."""
        return max(0, self.pending_max - len(self._pending))

    def is_full(self) -> bool:
        return len(self._pending) >= self.pending_max

    def add(self, pending: PendingAppend) -> None:
        assert not self.is_full() and pending.index not in self._pending
        self._pending[pending.index] = pending

    def complete_committed(self, commit_index: int) -> list[CompleteAppend]:
        done: list[PendingAppend] = []
        for pending in self._pending.values():  # in index order: stop at the first above
            if pending.index > commit_index:
                break
            done.append(pending)
        return [self._complete(p, AppendStatus.OK) for p in done]

    def complete_expired(self, now_tick: int) -> list[CompleteAppend]:
        done = [p for p in self._pending.values() if p.deadline_tick <= now_tick]
        return [self._complete(p, AppendStatus.WAIT_QUORUM_ACK_TIMEOUT) for p in done]

    def complete_all(self, status: AppendStatus) -> list[CompleteAppend]:
        """A deposed leader answers every waiting client at once (DLedger #309 leaked them)."""
        return [self._complete(p, status) for p in list(self._pending.values())]

    def _complete(self, pending: PendingAppend, status: AppendStatus) -> CompleteAppend:
        del self._pending[pending.index]
        return CompleteAppend(pending.request_id, status, pending.index, pending.term)
