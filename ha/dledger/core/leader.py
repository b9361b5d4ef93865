"""A DLedger member as leader: an EntryDispatcher per peer, the QuorumAckChecker, commits and
leadership transfer (ha/dledger/core/node.py states the rules).
"""

from __future__ import annotations

from collections.abc import Sequence

from ha.dledger.core.actions import (
    AppendEntries,
    Send,
    TransferStatus,
)
from ha.dledger.core.member import Role
from ha.dledger.core.messages import (
    Entry,
    PushRequest,
    PushResponse,
    TimeoutNow,
    payload_bytes,
    within_bytes,
)
from ha.dledger.core.node_base import NodeBase
from ha.dledger.core.progress import DispatcherState, EntryDispatcher
from ha.dledger.core.quorum import PendingAppend, quorum_index
from ha.dledger.core.storage import LogWriteError


class LeaderRules(NodeBase):
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
