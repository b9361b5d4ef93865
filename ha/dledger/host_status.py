"""What a DLedger host shows the admin view: a snapshot the host thread publishes each round."""

from __future__ import annotations

from dataclasses import dataclass

from ha.dledger.member import Role
from ha.dledger.progress import EntryDispatcher


@dataclass(frozen=True, slots=True)
class PeerStatus:
    peer_id: str
    # The leader's view of the peer; None on a member that is not the leader.
    match_index: int | None
    lag_entries: int | None
    lag_bytes: int | None  # commit-log bytes past the match (a store-backed log only)
    inflight_pushes: int | None
    dispatcher_state: str | None
    last_contact_ms_ago: int | None  # since a message from the peer reached this host


@dataclass(frozen=True, slots=True)
class PeerSample:
    peer_id: str
    match_index: int | None
    lag_entries: int | None
    lag_bytes: int | None
    inflight_pushes: int | None
    dispatcher_state: str | None
    last_contact_ms: float | None  # on the host's clock

    @staticmethod
    def of(peer_id: str, dispatcher: EntryDispatcher | None, last_index: int,
           last_contact_ms: float | None, lag_bytes: int | None = None) -> PeerSample:
        if dispatcher is None:
            return PeerSample(peer_id, None, None, None, None, None, last_contact_ms)
        return PeerSample(peer_id, dispatcher.match_index, last_index - dispatcher.match_index,
                          lag_bytes, dispatcher.inflight_count, dispatcher.state.value,
                          last_contact_ms)

    def view(self, now_ms: float) -> PeerStatus:
        ago_ms = None if self.last_contact_ms is None else int(now_ms - self.last_contact_ms)
        return PeerStatus(self.peer_id, self.match_index, self.lag_entries, self.lag_bytes,
                          self.inflight_pushes, self.dispatcher_state, ago_ms)


@dataclass(frozen=True, slots=True)
class HostStatus:
    self_id: str
    role: str
    term: int
    leader_id: str | None
    committed_index: int
    end_index: int
    base_index: int  # the log holds entries after it (retention compacted the rest)
    pending_appends: int
    peers: tuple[PeerStatus, ...]
    inbox_dropped_count: int
    elections_started_count: int
    last_error: str | None


@dataclass(frozen=True, slots=True)
class Snapshot:
    self_id: str
    role: Role
    term: int
    leader_id: str | None
    committed_index: int
    end_index: int
    base_index: int
    pending_appends: int
    peers: tuple[PeerSample, ...]
    last_error: str | None

    def view(self, now_ms: float, inbox_dropped_count: int,
             elections_started_count: int) -> HostStatus:
        return HostStatus(self.self_id, self.role.value, self.term, self.leader_id,
                          self.committed_index, self.end_index, self.base_index,
                          self.pending_appends,
                          tuple(peer.view(now_ms) for peer in self.peers),
                          inbox_dropped_count, elections_started_count, self.last_error)
