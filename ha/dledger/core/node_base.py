"""A DLedger member's state and what every role shares: the writes it issues, its output,
stepping down, the election timer and the commit index (ha/dledger/core/node.py).
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Sequence

from ha.dledger.core.actions import (
    Action,
    AdvanceCommit,
    AppendStatus,
    CompleteTransfer,
    PersistTermVote,
    Send,
    TransferStatus,
    Write,
)
from ha.dledger.core.config import DLedgerConfig
from ha.dledger.core.member import HardState, MemberState, Role
from ha.dledger.core.messages import (
    Message,
)
from ha.dledger.core.progress import EntryDispatcher
from ha.dledger.core.quorum import QuorumAckChecker
from ha.dledger.core.storage import NodeLog
from ha.dledger.core.transfer import LeadershipTransfer


class NodeBase:
    def __init__(self, self_id: str, member_ids: Sequence[str], config: DLedgerConfig,
                 rng: random.Random, hard_state: HardState, log: NodeLog) -> None:
        assert self_id in member_ids and len(set(member_ids)) == len(member_ids)
        self.config = config
        self.member = MemberState(self_id, hard_state.term, hard_state.voted_for)
        self.peer_ids = sorted(m for m in member_ids if m != self_id)
        self.quorum_size = (len(member_ids)) // 2 + 1
        self.log = log
        # Entries up to the base were committed before retention removed them.
        self.commit_index = log.base_index
        self._rng = rng
        self._now_tick = 0
        self._election_elapsed_ticks = 0
        self._heartbeat_elapsed_ticks = 0
        self._election_timeout_ticks = self._draw_election_timeout()
        self._votes: set[str] = set()
        self.dispatchers: dict[str, EntryDispatcher] = {}
        self._checker = QuorumAckChecker(config.pending_appends_max)
        self._out: list[Action] = []
        self._last_write_id = 0
        self._persisted_write_id = 0
        self.durable_index = log.last_index
        self._write_ends: deque[tuple[int, int]] = deque()  # (write id, log end after it)
        self._deferred: deque[tuple[int, Send]] = deque()  # sends waiting for a write
        self.transfer: LeadershipTransfer | None = None
        # Why our committed prefix is not our leader's (a fork), while it is not: reported.
        self.diverged: str | None = None

    # ----- views -----

    @property
    def role(self) -> Role:
        return self.member.role

    @property
    def term(self) -> int:
        return self.member.term

    @property
    def pending_count(self) -> int:
        return self._checker.pending_count

    def _become_follower(self, term: int, leader_id: str | None) -> None:
        was_leader = self.member.is_leader
        if self.transfer is not None:
            handed_over = self.transfer.timeout_now_sent and term > self.member.term
            self._end_transfer(TransferStatus.OK if handed_over
                               else TransferStatus.LEADERSHIP_LOST)
        if term > self.member.term:
            self.member.term = term
            self.member.voted_for = None
            self._persist_hard_state()
        self.member.role = Role.FOLLOWER
        self.member.leader_id = leader_id
        self._reset_timer()
        self.dispatchers = {}
        if was_leader:
            self._out.extend(self._checker.complete_all(AppendStatus.LEADERSHIP_LOST))

    def _end_transfer(self, status: TransferStatus) -> None:
        assert self.transfer is not None
        self._out.append(CompleteTransfer(self.transfer.target_id, status))
        self.transfer = None

    def _reset_timer(self) -> None:
        self._election_elapsed_ticks = 0
        self._election_timeout_ticks = self._draw_election_timeout()

    def _draw_election_timeout(self) -> int:
        timeout = self.config.election_timeout_ticks
        return self._rng.randrange(timeout, 2 * timeout)

    def _set_commit(self, index: int) -> None:
        assert self.commit_index < index <= self.log.last_index
        self.commit_index = index
        self._out.append(AdvanceCommit(index))

    # ----- writes and output -----

    def _next_write_id(self) -> int:
        self._last_write_id += 1
        return self._last_write_id

    def _persist_hard_state(self) -> None:
        self._record_write(PersistTermVote(self._next_write_id(), self.member.term,
                                           self.member.voted_for))

    def _record_write(self, write: Write) -> None:
        self._out.append(write)
        self._write_ends.append((write.write_id, self.log.last_index))

    def _clamp_durable(self, index: int) -> None:
        """Entries past `index` are gone: writes still in flight no longer make them durable."""
        self.durable_index = min(self.durable_index, index)
        self._write_ends = deque((w, min(end, index)) for w, end in self._write_ends)

    def _send_after_writes(self, target_id: str, message: Message) -> None:
        """Votes and acks rest on writes: they leave once every write issued so far is durable.
        Past the bound they are dropped; the peer asks again."""
        send = Send(target_id, message)
        if self._persisted_write_id == self._last_write_id:
            self._out.append(send)
        elif len(self._deferred) < self.config.deferred_messages_max:
            self._deferred.append((self._last_write_id, send))

    def _drain(self) -> list[Action]:
        out, self._out = self._out, []
        return out
