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
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Sequence

from ha.dledger.core.actions import (
    Action,
    AdvanceCommit,
    AppendEntries,
    AppendStatus,
    CompleteAppend,
    CompleteTransfer,
    PersistTermVote,
    ResetLog,
    Send,
    TransferStatus,
    TruncateFrom,
    Write,
)
from ha.dledger.core.config import DLedgerConfig
from ha.dledger.core.member import HardState, MemberState, Role
from ha.dledger.core.messages import (
    Entry,
    Message,
    PushRequest,
    PushResponse,
    TimeoutNow,
    VoteRequest,
    VoteResponse,
    payload_bytes,
    payload_crc,
    within_bytes,
)
from ha.dledger.core.progress import DispatcherState, EntryDispatcher
from ha.dledger.core.quorum import PendingAppend, QuorumAckChecker, quorum_index
from ha.dledger.core.storage import LogWriteError, NodeLog
from ha.dledger.core.transfer import LeadershipTransfer


class DLedgerNode:
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
        self._send_after_writes(request.source_id,
                                VoteResponse(member.self_id, answer_term, granted,
                                             request.pre_vote))

    def _on_vote_response(self, response: VoteResponse) -> None:
        member = self.member
        if response.term > member.term and not (response.pre_vote and response.granted):
            self._become_follower(response.term, None)
            return
        if not response.granted:
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

    def _on_timeout_now(self, message: TimeoutNow) -> None:
        """Our leader holds no entry we lack and asks us to take over: a real election now,
        with no pre-vote (the leader itself asked) and no wait for our timeout."""
        if message.term < self.member.term or self.member.is_leader:
            return  # a stale request, or one from a deposed leader
        if message.term > self.member.term:
            self._become_follower(message.term, message.source_id)
        self._start_election(transfer=True)

    # ----- leadership transfer -----

    def _transfer_refusal(self, target_id: str) -> TransferStatus | None:
        if not self.member.is_leader:
            return TransferStatus.NOT_LEADER
        if target_id == self.member.self_id:
            return TransferStatus.TARGET_IS_SELF
        if target_id not in self.dispatchers:
            return TransferStatus.NOT_MEMBER
        if self.transfer is not None:
            return TransferStatus.IN_PROGRESS
        return None

    def _try_hand_over(self) -> None:
        """Send TimeoutNow once the target holds our whole log (appends are frozen, so the
        end no longer moves)."""
        transfer = self.transfer
        if transfer is None or transfer.timeout_now_sent:
            return
        if self.dispatchers[transfer.target_id].match_index < self.log.last_index:
            return
        transfer.timeout_now_sent = True
        transfer.deadline_tick = self._now_tick + self.config.election_timeout_ticks
        self._out.append(Send(transfer.target_id, TimeoutNow(self.member.self_id,
                                                              self.member.term)))

    def _tick_transfer(self) -> None:
        transfer = self.transfer
        if transfer is not None and self._now_tick >= transfer.deadline_tick:
            self._end_transfer(TransferStatus.TIMEOUT if transfer.timeout_now_sent
                               else TransferStatus.NOT_CAUGHT_UP)

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

    # ----- leader: EntryDispatcher per peer and QuorumAckChecker -----

    def _become_leader(self) -> None:
        self.member.role = Role.LEADER
        self.member.leader_id = self.member.self_id
        self._election_elapsed_ticks = 0
        self._heartbeat_elapsed_ticks = 0
        self.dispatchers = {
            peer_id: EntryDispatcher(peer_id, self.log.last_index,
                                     self.config.inflight_pushes_max)
            for peer_id in self.peer_ids
        }
        for dispatcher in self.dispatchers.values():
            dispatcher.push_budget_bytes = self.config.far_behind_push_bytes_per_tick
        # The no-op lets entries of earlier terms commit under a current-term entry.
        self._append_noop()
        self._dispatch_all()

    def _tick_leader(self) -> None:
        self._out.extend(self._checker.complete_expired(self._now_tick))
        self._tick_transfer()
        self._election_elapsed_ticks += 1
        if self._election_elapsed_ticks >= self.config.election_timeout_ticks:
            self._election_elapsed_ticks = 0
            if not self._quorum_active():
                self._become_follower(self.member.term, None)
                return
        self._heartbeat_elapsed_ticks += 1
        heartbeat = self._heartbeat_elapsed_ticks >= self.config.heartbeat_ticks
        if heartbeat:
            self._heartbeat_elapsed_ticks = 0
        for peer_id in self.peer_ids:
            dispatcher = self.dispatchers[peer_id]
            dispatcher.push_budget_bytes = self.config.far_behind_push_bytes_per_tick
            dispatcher.timed_out(self._now_tick, self.config.push_timeout_ticks)
            # Pushes in flight are the heartbeat of a peer being caught up.
            if heartbeat and dispatcher.state is DispatcherState.COMMIT:
                self._send_push(dispatcher, with_entries=False)
            self._dispatch(dispatcher)

    def _quorum_active(self) -> bool:
        active_count = 1 + sum(d.recent_active for d in self.dispatchers.values())
        for dispatcher in self.dispatchers.values():
            dispatcher.recent_active = False
        return active_count >= self.quorum_size

    def _append_noop(self) -> None:
        entry = Entry(self.log.last_index + 1, self.member.term, b"")
        self.log.append(entry)
        self._record_write(AppendEntries(self._next_write_id(), (entry,)))

    def _append_requests(self, requests: Sequence[tuple[int, bytes]]) -> int:
        """Append the requests' entries with one write, each awaiting its quorum; return how
        many went in (all but those from one the disk refused on)."""
        first_index = self.log.last_index + 1
        term = self.member.term
        entries = tuple(Entry(first_index + offset, term, payload)
                        for offset, (_, payload) in enumerate(requests))
        try:
            self.log.append_many(entries)
        except LogWriteError:
            entries = entries[:self.log.last_index - first_index + 1]
            if not entries:
                return 0
        self._record_write(AppendEntries(self._next_write_id(), entries))
        deadline_tick = self._now_tick + self.config.quorum_deadline_ticks
        checker = self._checker
        for (request_id, _), entry in zip(requests, entries, strict=False):  # entries: a prefix
            checker.add(PendingAppend(request_id, entry.index, term, deadline_tick))
        return len(entries)

    def _dispatch_all(self) -> None:
        for peer_id in self.peer_ids:
            self._dispatch(self.dispatchers[peer_id])

    def _dispatch(self, dispatcher: EntryDispatcher) -> None:
        dispatcher.caught_up(self.log.last_index)
        while dispatcher.can_send():
            state = dispatcher.state
            if state is DispatcherState.COMMIT:
                return
            if state is DispatcherState.APPEND and dispatcher.next_index > self.log.last_index:
                return
            with_entries = state is not DispatcherState.COMPARE
            if with_entries and self._far_behind(dispatcher) \
                    and dispatcher.push_budget_bytes <= 0:
                return  # throttled: the rest waits for the next tick's budget
            self._send_push(dispatcher, with_entries)
            if state is not DispatcherState.APPEND:
                return

    def _far_behind(self, dispatcher: EntryDispatcher) -> bool:
        return self.log.last_index - dispatcher.match_index > self.config.far_behind_entries

    def _push_entries(self, dispatcher: EntryDispatcher, first_index: int) -> tuple[Entry, ...]:
        """The next batch for a peer: at most push_entries_max entries and push_bytes_max
        payload bytes, and for a far-behind peer at most its budget left in this tick (always
        at least one entry, so one large message still goes)."""
        entries = self.log.slice(first_index, self.config.push_entries_max)
        if not self._far_behind(dispatcher):
            return within_bytes(entries, self.config.push_bytes_max)
        bytes_max = min(self.config.push_bytes_max, dispatcher.push_budget_bytes)
        entries = within_bytes(entries, bytes_max)
        dispatcher.push_budget_bytes = max(0, dispatcher.push_budget_bytes
                                           - payload_bytes(entries))
        return entries

    def _send_push(self, dispatcher: EntryDispatcher, with_entries: bool) -> None:
        if dispatcher.next_index <= self.log.base_index:
            # The follower needs entries retention removed: it restarts from our base.
            dispatcher.next_index = self.log.base_index + 1
        prev_index = dispatcher.next_index - 1
        prev_term = self.log.term_at(prev_index)
        assert prev_term is not None
        entries = self._push_entries(dispatcher, prev_index + 1) if with_entries else ()
        from_base = prev_index == self.log.base_index > 0
        request = PushRequest(self.member.self_id, self.member.term, prev_index, prev_term,
                              entries, self.commit_index, from_base,
                              self.log.crc_at(prev_index))
        self._out.append(Send(dispatcher.peer_id, request))
        dispatcher.sent(prev_index + len(entries), self._now_tick)

    def _on_push_response(self, response: PushResponse) -> None:
        if response.term > self.member.term:
            self._become_follower(response.term, None)
            return
        dispatcher = self.dispatchers.get(response.source_id)
        if not self.member.is_leader or response.term < self.member.term or dispatcher is None:
            return
        if response.match_index > self.log.last_index:
            return  # no follower of ours can hold more than we sent: drop the claim
        if response.success:
            dispatcher.acked(response.match_index, response.last_index, self.log.last_index,
                             self._now_tick)
            self._advance_commit()
            self._try_hand_over()
        else:
            next_probe_index = self.log.conflict_hint(response.hint_index,
                                                      response.hint_term)[0] + 1
            dispatcher.rejected(response.prev_index, next_probe_index, response.last_index)
        self._dispatch(dispatcher)

    def _advance_commit(self) -> None:
        matches = [self.durable_index] + [d.match_index for d in self.dispatchers.values()]
        index = quorum_index(matches)
        # Counting copies commits only an entry of our own term (Raft 5.4.2, Figure 8).
        if index > self.commit_index and self.log.term_at(index) == self.member.term:
            self._set_commit(index)
            self._out.extend(self._checker.complete_committed(index))

    def _set_commit(self, index: int) -> None:
        assert self.commit_index < index <= self.log.last_index
        self.commit_index = index
        self._out.append(AdvanceCommit(index))

    # ----- follower: EntryHandler -----

    def _on_push_request(self, request: PushRequest) -> None:
        member = self.member
        if request.term < member.term:
            # Tell a deposed leader our term so that it steps down.
            self._send_after_writes(request.source_id, self._reject(request, 0, 0))
            return
        if request.term > member.term or member.role is not Role.FOLLOWER \
                or member.leader_id != request.source_id:
            assert not (member.is_leader and request.term == member.term), "two leaders"
            self._become_follower(request.term, request.source_id)
        self._reset_timer()
        response = self._handle_push(request)
        if response is not None:
            self._send_after_writes(request.source_id, response)

    def _handle_push(self, request: PushRequest) -> PushResponse | None:
        """The answer to a push from our leader, or None when the push contradicts our
        committed prefix (see `_diverge`): nothing is changed and nothing answered."""
        prev_index = request.prev_index
        if prev_index < self.log.base_index:
            # Committed here, and retention removed them: nothing left to compare.
            return self._accept(request, self.commit_index)
        if self._prev_matches(request):
            conflict_index = self._append_from_leader(request.entries)
            if conflict_index is not None:
                self._diverge(conflict_index, request)
                return None
        elif prev_index <= self.commit_index:
            self._diverge(prev_index, request)
            return None
        elif request.from_base:
            self._reset_to_base(prev_index, request.prev_term)
            self._append_from_leader(request.entries)
        else:
            # On a payload mismatch within one term, back up past that whole term: the
            # entries of earlier terms obey Raft's log matching again.
            same_term = self.log.term_at(prev_index) == request.prev_term
            hint_index, hint_term = self.log.conflict_hint(
                prev_index, request.prev_term - 1 if same_term else request.prev_term)
            return self._reject(request, hint_index, hint_term)
        last_new_index = prev_index + len(request.entries)
        # Commit only within the prefix this request proved to match the leader's.
        commit_index = min(request.commit_index, last_new_index)
        if commit_index > self.commit_index:
            self._set_commit(commit_index)
        self.diverged = None
        return self._accept(request, last_new_index)

    def _prev_matches(self, request: PushRequest) -> bool:
        """Our entry at prev_index is the leader's: the same term and, where both are known,
        the same payload CRC (two leaders of one term, a fork, hold different entries)."""
        if not self.log.matches(request.prev_index, request.prev_term):
            return False
        if request.prev_crc is None:
            return True
        held_crc = self.log.crc_at(request.prev_index)
        return held_crc is None or held_crc == request.prev_crc

    def _holds(self, entry: Entry) -> bool:
        """We hold `entry` itself: its term, and its payload (by CRC) where we know ours."""
        if self.log.term_at(entry.index) != entry.term:
            return False
        held_crc = self.log.crc_at(entry.index)
        return held_crc is None or held_crc == payload_crc(entry.payload)

    def _diverge(self, index: int, request: PushRequest) -> None:
        """Our committed entry at `index` is not our leader's: the logs forked (a member
        that led a group of its own, with another peer list). Raft never repairs a committed
        entry: the push is refused unanswered (so our copy never counts toward the leader's
        quorum) and the divergence is reported until a push matches again."""
        self.diverged = (f"committed entry {index} (term {self.log.term_at(index)}) is not "
                         f"the one leader {request.source_id} of term {request.term} holds: "
                         f"the logs forked")

    def _append_from_leader(self, entries: tuple[Entry, ...]) -> int | None:
        """Skip entries we already hold; truncate at the first conflict only (a stale or
        duplicate push never removes anything: hashicorp/raft#113). A conflict at or below
        our commit is a fork: nothing changes, and its index is returned."""
        for position, entry in enumerate(entries):
            if self._holds(entry):
                continue
            if self.log.term_at(entry.index) is not None:
                if entry.index <= self.commit_index:
                    return entry.index
                self.log.truncate_from(entry.index)
                self._clamp_durable(entry.index - 1)
                self._record_write(TruncateFrom(self._next_write_id(), entry.index))
            self.log.append_many(entries[position:])
            self._record_write(AppendEntries(self._next_write_id(), entries[position:]))
            return None
        return None

    def _reset_to_base(self, base_index: int, base_term: int) -> None:
        assert base_index >= self.commit_index
        self.log.reset(base_index, base_term)
        self._clamp_durable(base_index)
        self._record_write(ResetLog(self._next_write_id(), base_index, base_term))
        if base_index > self.commit_index:
            self._set_commit(base_index)

    def _accept(self, request: PushRequest, match_index: int) -> PushResponse:
        return PushResponse(self.member.self_id, self.member.term, True, request.prev_index,
                            match_index, 0, 0, self.log.last_index)

    def _reject(self, request: PushRequest, hint_index: int, hint_term: int) -> PushResponse:
        return PushResponse(self.member.self_id, self.member.term, False, request.prev_index,
                            0, hint_index, hint_term, self.log.last_index)

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
