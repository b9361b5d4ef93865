"""A DLedger member as follower: the leader's pushes, checked against its log (DLedger's
EntryHandler; ha/dledger/core/node.py states the rules).
"""

from __future__ import annotations

from ha.dledger.core.actions import (
    AppendEntries,
    ResetLog,
    TruncateFrom,
)
from ha.dledger.core.member import Role
from ha.dledger.core.messages import (
    Entry,
    PushRequest,
    PushResponse,
    payload_crc,
)
from ha.dledger.core.node_base import NodeBase


class FollowerRules(NodeBase):
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
