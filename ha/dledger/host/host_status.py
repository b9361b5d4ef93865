"""What a DLedger host shows the admin view: a snapshot the host thread publishes each round."""

from __future__ import annotations

from dataclasses import dataclass

from ha.dledger.core.member import Role
from ha.dledger.core.progress import EntryDispatcher


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
    """A peer as the leader last sampled it (once a tick: DLedgerHost._publish). Its lags
    are worked out when viewed, against the snapshot's own end, so a view never shows a peer
    caught up with an end it has not reached."""

    peer_id: str
    match_index: int | None
    match_end_position: int | None  # where the match's record ends (a store-backed log)
    inflight_pushes: int | None
    dispatcher_state: str | None
    last_contact_ms: float | None  # on the host's clock

    @staticmethod
    def of(peer_id: str, dispatcher: EntryDispatcher | None, last_contact_ms: float | None,
           match_end_position: int | None = None) -> PeerSample:
        if dispatcher is None:
            return PeerSample(peer_id, None, None, None, None, last_contact_ms)
        return PeerSample(peer_id, dispatcher.match_index, match_end_position,
                          dispatcher.inflight_count, dispatcher.state.value, last_contact_ms)

    def view(self, now_ms: float, end_index: int, end_position: int | None) -> PeerStatus:
        ago_ms = None if self.last_contact_ms is None else int(now_ms - self.last_contact_ms)
        lag_entries = None if self.match_index is None else end_index - self.match_index
        return PeerStatus(self.peer_id, self.match_index, lag_entries,
                          _lag_bytes(end_position, self.match_end_position),
                          self.inflight_pushes, self.dispatcher_state, ago_ms)


def _lag_bytes(end_position: int | None, match_end_position: int | None) -> int | None:
    """Commit-log bytes past the peer's match; None when unknown (not a store-backed log, not
    the leader, a match below the log's base, or either end unknown after a reset)."""
    if end_position is None or match_end_position is None:
        return None
    if end_position < 0 or match_end_position < 0:
        return 0 if end_position == match_end_position else None
    return end_position - match_end_position


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
    # Why this member's committed log is not its leader's (a fork it cannot repair), or None.
    diverged: str | None = None
    forks_cut_count: int = 0  # truncations that cut records a previous run had dispatched


@dataclass(frozen=True, slots=True)
class Snapshot:
    self_id: str
    role: Role
    term: int
    leader_id: str | None
    committed_index: int
    end_index: int
    base_index: int
    end_position: int | None  # the commit log's end (a store-backed log; -1 unknown)
    pending_appends: int
    peers: tuple[PeerSample, ...]
    last_error: str | None
    diverged: str | None = None
    forks_cut_count: int = 0

    def view(self, now_ms: float, inbox_dropped_count: int,
             elections_started_count: int) -> HostStatus:
        return HostStatus(self.self_id, self.role.value, self.term, self.leader_id,
                          self.committed_index, self.end_index, self.base_index,
                          self.pending_appends,
                          tuple(peer.view(now_ms, self.end_index, self.end_position)
                                for peer in self.peers),
                          inbox_dropped_count, elections_started_count, self.last_error,
                          self.diverged, self.forks_cut_count)
