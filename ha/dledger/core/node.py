"""DLedgerNode: one member of a DLedger (Raft) group as a pure state machine.

Events in: `tick()`, `receive(message)`, `client_append(request_id, payload)` or
`client_append_many(requests)` (and `dispatch()` after appends taken with `push=False`) and
`persisted(write_id)` (the host made a write durable). Each returns the actions the host must
run, in order (ha/dledger/core/actions.py). The node never reads a clock, a socket or a file; its
only randomness is the injected `random.Random`, so a seeded simulation drives this very code.

Rules that keep it safe (reference: Raft thesis, etcd raft, DLedger's known bugs):
- Term and vote are written (PersistTermVote) before any vote request or answer leaves;
  appends are acknowledged only once durable. All writes go through one ordered queue, so
  "durable up to write N" covers every earlier write.
- Pre-vote and a check-quorum lease: a node that heard a leader within an election timeout
  ignores higher-term (pre-)vote requests, so a partitioned node cannot inflate terms.
- A leader steps down when a quorum was not active in an election timeout, or on any higher
  term, and answers every pending client append with LEADERSHIP_LOST (indeterminate).
- A new leader appends a no-op; only entries of the current term commit by counting copies.
- A follower truncates only at the first conflicting entry, never at or below its commit.
  Entries match by term and payload CRC (`PushRequest.prev_crc`): a member that led alone
  under another peer list can hold other entries of the same (index, term); it is cut back
  to the last common entry, or, where the fork reaches its commit, refuses and reports it.

The class is layered by role: what every role shares (ha/dledger/core/node_base.py), the
leader's rules (leader.py), the follower's (follower.py); the events and the election are here.
"""

from __future__ import annotations

from collections.abc import Sequence

from ha.dledger.core.actions import (
    Action,
    AppendStatus,
    CompleteAppend,
    CompleteTransfer,
    Send,
)
from ha.dledger.core.follower import FollowerRules
from ha.dledger.core.leader import LeaderRules
from ha.dledger.core.member import Role
from ha.dledger.core.messages import (
    Message,
    PushRequest,
    PushResponse,
    TimeoutNow,
    VoteRequest,
    VoteResponse,
)
from ha.dledger.core.transfer import LeadershipTransfer


class DLedgerNode(LeaderRules, FollowerRules):
    # ----- events -----

    def tick(self) -> list[Action]:
        self._now_tick += 1
        if self.member.is_leader:
            self._tick_leader()
        else:
            self._tick_election()
        return self._drain()

    def receive(self, message: Message) -> list[Action]:
        if isinstance(message, VoteRequest):
            self._on_vote_request(message)
        elif isinstance(message, VoteResponse):
            self._on_vote_response(message)
        elif isinstance(message, PushRequest):
            self._on_push_request(message)
        elif isinstance(message, PushResponse):
            self._on_push_response(message)
        else:
            self._on_timeout_now(message)
        return self._drain()

    def client_append(self, request_id: int, payload: bytes, push: bool = True) -> list[Action]:
        """`push=False`: the entry waits for `dispatch()` (or the next push answer or
        heartbeat), so that a host taking many appends at once sends them in one push."""
        return self.client_append_many(((request_id, payload),), push)

    def client_append_many(self, requests: Sequence[tuple[int, bytes]],
                           push: bool = True) -> list[Action]:
        """Client appends (request id, payload) in order, appended with one write. Refused
        at once, nothing appended: every one when not the leader or while a transfer runs;
        those past the pending bound; those from one the disk refuses on (DISK_ERROR)."""
        if not self.member.is_leader:
            refusal: AppendStatus | None = AppendStatus.NOT_LEADER
        elif self.transfer is not None:
            # Frozen so that the target can catch up; the client retries on the new leader.
            refusal = AppendStatus.LEADER_TRANSFERRING
        else:
            refusal = None
        taken_count = 0 if refusal is not None else min(len(requests), self._checker.room)
        appended_count = self._append_requests(requests[:taken_count]) if taken_count else 0
        for position in range(appended_count, len(requests)):
            status = refusal or (AppendStatus.DISK_ERROR if position < taken_count
                                 else AppendStatus.LEADER_PENDING_FULL)
            self._out.append(CompleteAppend(requests[position][0], status, 0, 0))
        if appended_count and push:
            self._dispatch_all()
        return self._drain()

    def dispatch(self) -> list[Action]:
        """Push what each peer lacks, as far as its window allows (a leader's)."""
        if self.member.is_leader:
            self._dispatch_all()
        return self._drain()

    def transfer_leadership(self, target_id: str) -> list[Action]:
        """Hand leadership to `target_id`; answered by one CompleteTransfer, at once when
        refused, else when the target took over, did not catch up, or timed out."""
        refusal = self._transfer_refusal(target_id)
        if refusal is not None:
            self._out.append(CompleteTransfer(target_id, refusal))
            return self._drain()
        deadline_tick = self._now_tick + self.config.transfer_catchup_ticks
        self.transfer = LeadershipTransfer(target_id, deadline_tick)
        self._try_hand_over()
        return self._drain()

    def persisted(self, write_id: int) -> list[Action]:
        """The host made every write up to `write_id` durable."""
        assert self._persisted_write_id < write_id <= self._last_write_id, write_id
        self._persisted_write_id = write_id
        while self._write_ends and self._write_ends[0][0] <= write_id:
            self.durable_index = self._write_ends.popleft()[1]
        while self._deferred and self._deferred[0][0] <= write_id:
            self._out.append(self._deferred.popleft()[1])
        if self.member.is_leader:
            self._advance_commit()
        return self._drain()

    def compact(self, index: int) -> None:
        """Retention removed entries up to `index`; they must be committed and durable."""
        assert index <= self.commit_index and index <= self.durable_index
        if index > self.log.base_index:
            self.log.compact_to(index)

    # ----- election -----

    def _tick_election(self) -> None:
        self._election_elapsed_ticks += 1
        if self._election_elapsed_ticks >= self._election_timeout_ticks:
            self._start_pre_vote()

    def _start_pre_vote(self) -> None:
        """Ask for term + 1 without raising our term: only a quorum of grants starts a real
        election, so a node cut off from the group never disturbs it on return."""
        self._reset_timer()
        self.member.role = Role.PRE_CANDIDATE
        self.member.leader_id = None
        self._votes = {self.member.self_id}
        if len(self._votes) >= self.quorum_size:
            self._start_election()
            return
        request = self._vote_request(self.member.term + 1, pre_vote=True)
        for peer_id in self.peer_ids:
            self._out.append(Send(peer_id, request))

    def _start_election(self, transfer: bool = False) -> None:
        self._reset_timer()
        self.member.role = Role.CANDIDATE
        self.member.term += 1
        self.member.voted_for = self.member.self_id
        self._persist_hard_state()
        self._votes = {self.member.self_id}
        if len(self._votes) >= self.quorum_size:
            self._become_leader()
            return
        request = self._vote_request(self.member.term, pre_vote=False, transfer=transfer)
        for peer_id in self.peer_ids:
            self._send_after_writes(peer_id, request)

    def _vote_request(self, term: int, pre_vote: bool, transfer: bool = False) -> VoteRequest:
        return VoteRequest(self.member.self_id, term, self.log.last_index, self.log.last_term,
                           pre_vote, transfer)

    def _in_lease(self) -> bool:
        return (self.member.leader_id is not None
                and self._election_elapsed_ticks < self.config.election_timeout_ticks)

    def _on_vote_request(self, request: VoteRequest) -> None:
        member = self.member
        if request.term < member.term:
            self._send_after_writes(request.source_id,
                                    VoteResponse(member.self_id, member.term, False,
                                                 request.pre_vote))
            return
        if request.term > member.term and self._in_lease() and not request.transfer:
            return  # check-quorum lease: a live leader is not disturbed, unless it asked
        if request.term > member.term and not request.pre_vote:
            self._become_follower(request.term, None)
        can_vote = (member.voted_for == request.source_id
                    or (member.voted_for is None and member.leader_id is None)
                    or (request.pre_vote and request.term > member.term))
        granted = can_vote and self.log.at_least_as_new(request.last_index, request.last_term)
        if granted and not request.pre_vote:
            member.voted_for = request.source_id
            self._persist_hard_state()
            self._reset_timer()
        answer_term = request.term if granted and request.pre_vote else member.term
        commit_index, commit_term, commit_crc = self._commit_mark() if granted else (0, 0, None)
        self._send_after_writes(request.source_id,
                                VoteResponse(member.self_id, answer_term, granted,
                                             request.pre_vote, commit_index, commit_term,
                                             commit_crc))

    def _commit_mark(self) -> tuple[int, int, int | None]:
        """Our commit index, its entry's term and payload CRC; (0, 0, None) at the base."""
        index = self.commit_index
        term = self.log.term_at(index)
        if index <= self.log.base_index or term is None:
            return 0, 0, None
        return index, term, self.log.crc_at(index)

    def _forks_from_commit(self, response: VoteResponse) -> bool:
        """Whether our log forks from the voter's committed prefix: it lacks the voter's
        committed entry or holds another at its index. Raft's up-to-date check compares only
        the last (index, term): a member that led alone under another peer list can pass it
        with entries of the group's own term that the group never had (PushRequest.prev_crc
        tells them apart on the next push, too late: it may lead by then). A candidate that
        holds the committed prefix never fails this check (leader completeness: its log
        holds every committed entry, and an entry of its last term lies past them all), so
        not counting such a grant costs a correct election nothing. Found, it is reported as
        `diverged` until a leader's push matches our log again."""
        index = response.commit_index
        if index <= self.log.base_index:
            return False  # nothing to compare: compacted here (or the voter's base)
        held_term = self.log.term_at(index)
        held_crc = self.log.crc_at(index)
        forked = held_term != response.commit_term or (
            held_crc is not None and response.commit_crc is not None
            and held_crc != response.commit_crc)
        if forked:
            self.diverged = (f"our log does not hold {response.source_id}'s committed entry "
                             f"{index} (term {response.commit_term}): the logs forked, its "
                             f"vote is not counted")
        return forked

    def _on_vote_response(self, response: VoteResponse) -> None:
        member = self.member
        if response.term > member.term and not (response.pre_vote and response.granted):
            self._become_follower(response.term, None)
            return
        if not response.granted or self._forks_from_commit(response):
            return
        if member.role is Role.PRE_CANDIDATE and response.pre_vote \
                and response.term == member.term + 1:
            self._votes.add(response.source_id)
            if len(self._votes) >= self.quorum_size:
                self._start_election()
        elif member.role is Role.CANDIDATE and not response.pre_vote \
                and response.term == member.term:
            self._votes.add(response.source_id)
            if len(self._votes) >= self.quorum_size:
                self._become_leader()

    def _on_timeout_now(self, message: TimeoutNow) -> None:
        """Our leader holds no entry we lack and asks us to take over: a real election now,
        with no pre-vote (the leader itself asked) and no wait for our timeout."""
        if message.term < self.member.term or self.member.is_leader:
            return  # a stale request, or one from a deposed leader
        if message.term > self.member.term:
            self._become_follower(message.term, message.source_id)
        self._start_election(transfer=True)
