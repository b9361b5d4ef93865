"""EntryDispatcher: the leader's replication state for one peer (etcd's Progress).

COMPARE probes one (prev_index, prev_term) at a time until the follower's log matches
(fast back-up on the follower's hint); TRUNCATE sends one push that makes the follower drop
its divergent suffix at the first conflict; APPEND pipelines pushes within a bounded window;
COMMIT means caught up: only heartbeats carrying the commit index (which still check prev, so a
follower that lost its log is found again: DLedger #61).
"""

from __future__ import annotations

import enum
from collections import deque


class DispatcherState(enum.Enum):
    COMPARE = "COMPARE"
    TRUNCATE = "TRUNCATE"
    APPEND = "APPEND"
    COMMIT = "COMMIT"


class EntryDispatcher:
    def __init__(self, peer_id: str, last_index: int, inflight_max: int) -> None:
        self.peer_id = peer_id
        self.state = DispatcherState.COMPARE
        self.match_index = 0
        self.next_index = last_index + 1
        self.inflight_max = inflight_max
        self._inflight: deque[int] = deque()  # last index of each push in flight
        self.waiting_since_tick: int | None = None  # oldest unanswered push or probe
        self.recent_active = False
        # Payload bytes this peer may still be pushed in this tick while it is far behind;
        # the leader refills it every tick (the throttle, DLedgerConfig.far_behind_*).
        self.push_budget_bytes = 0

    @property
    def inflight_count(self) -> int:
        return len(self._inflight)

    def can_send(self) -> bool:
        if self.state in (DispatcherState.COMPARE, DispatcherState.TRUNCATE):
            return self.waiting_since_tick is None
        return len(self._inflight) < self.inflight_max

    def sent(self, last_index: int, now_tick: int) -> None:
        """A push covering entries up to `last_index` went out."""
        if self.waiting_since_tick is None:
            self.waiting_since_tick = now_tick
        if self.state in (DispatcherState.APPEND, DispatcherState.COMMIT):
            self._inflight.append(last_index)
            self.next_index = max(self.next_index, last_index + 1)

    def acked(self, match_index: int, follower_last_index: int, leader_last_index: int,
              now_tick: int) -> None:
        """A success reply. A success is always a fact (the follower durably holds our prefix up
        to `match_index`), so even a reordered one is used, but the match never moves back."""
        self.recent_active = True
        advanced = match_index > self.match_index
        self.match_index = max(self.match_index, match_index)
        while self._inflight and self._inflight[0] <= self.match_index:
            self._inflight.popleft()
        if self.state is DispatcherState.COMPARE and follower_last_index > self.match_index \
                and leader_last_index > self.match_index:
            self._enter(DispatcherState.TRUNCATE, self.match_index + 1)
        elif self.state in (DispatcherState.COMPARE, DispatcherState.TRUNCATE):
            self._enter(DispatcherState.APPEND, self.match_index + 1)
        elif advanced or not self._inflight:
            self.waiting_since_tick = now_tick if self._inflight else None
        self.next_index = max(self.next_index, self.match_index + 1)

    def rejected(self, prev_index: int, next_probe_index: int,
                 follower_last_index: int) -> bool:
        """A mismatch at `prev_index`; back up to `next_probe_index` (fast back-up). Stale
        rejects (at or below the match, or not for the current probe) are ignored, except
        from a follower whose log now ends below its match: it lost its disk, and waiting
        for it to ask would leave it empty forever (DLedger #61). Lowering the match only
        delays commits, which never move back."""
        self.recent_active = True
        stale = prev_index <= self.match_index or (
            self.state is DispatcherState.COMPARE and prev_index != self.next_index - 1)
        if follower_last_index < self.match_index:
            self.match_index = follower_last_index
        elif stale:
            return False
        next_index = max(self.match_index + 1, min(prev_index, next_probe_index))
        self._enter(DispatcherState.COMPARE, next_index)
        return True

    def caught_up(self, leader_last_index: int) -> None:
        if self.state is DispatcherState.APPEND and self.match_index == leader_last_index:
            self.state = DispatcherState.COMMIT
        elif self.state is DispatcherState.COMMIT and self.match_index < leader_last_index:
            self.state = DispatcherState.APPEND

    def timed_out(self, now_tick: int, push_timeout_ticks: int) -> bool:
        """A push or probe unanswered for too long: resend from the match (no stuck state)."""
        if self.waiting_since_tick is None:
            return False
        if now_tick - self.waiting_since_tick < push_timeout_ticks:
            return False
        self._enter(DispatcherState.COMPARE, self.match_index + 1)
        return True

    def _enter(self, state: DispatcherState, next_index: int) -> None:
        self.state = state
        self.next_index = next_index
        self._inflight.clear()
        self.waiting_since_tick = None
