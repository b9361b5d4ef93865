"""The admin views of a DLedger member, from the snapshot its host publishes every round:
`GET /admin/dledger`, and `/admin/diff` in the shape dashboards already read (a leader's
peers as the master's slaves) plus the per-peer list."""

from __future__ import annotations

from typing import TYPE_CHECKING

from app.api.schemas.dledger import DLedgerPeerView, DLedgerView
from app.api.schemas.ha import MasterDiffView, SlaveDiff
from app.api.schemas.sync import MetadataSyncStatus
from app.broker.broker import Broker

if TYPE_CHECKING:
    from ha.dledger.commit_log import DLedgerCommitLog  # loaded by a broker in DLedger mode only


def dledger_view(broker: Broker, member: DLedgerCommitLog) -> DLedgerView:
    status = member.status()
    settings = broker.settings
    http_urls = settings.dledger_http_urls()
    dledger_addresses = {peer.node_id: peer.address for peer in settings.dledger_peer_list}
    leader_id = status.leader_id
    return DLedgerView(
        self_id=status.self_id, group=settings.dledger_group, role=status.role,
        accepting_writes=not broker.is_slave,
        term=status.term, leader_id=leader_id,
        leader_http_address=http_urls.get(leader_id) if leader_id else None,
        leader_dledger_address=dledger_addresses.get(leader_id) if leader_id else None,
        committed_index=status.committed_index, end_index=status.end_index,
        base_index=status.base_index, min_offset=broker.store.min_offset,
        retention_blocked_offset=broker.store.retention.blocked_offset,
        committed_offset=broker.store.commit_limit or None,
        max_offset=broker.store.max_offset, pending_appends=status.pending_appends,
        inbox_dropped_count=status.inbox_dropped_count,
        elections_started_count=status.elections_started_count, last_error=status.last_error,
        diverged=status.diverged, forks_cut_count=status.forks_cut_count,
        metadata_sync=_metadata_sync(broker),
        peers=[DLedgerPeerView(
            peer_id=peer.peer_id, dledger_address=dledger_addresses[peer.peer_id],
            http_address=http_urls[peer.peer_id], match_index=peer.match_index,
            lag_entries=peer.lag_entries, lag_bytes=peer.lag_bytes,
            inflight_pushes=peer.inflight_pushes, dispatcher_state=peer.dispatcher_state,
            last_contact_ms_ago=peer.last_contact_ms_ago) for peer in status.peers])


def leader_diff(view: DLedgerView) -> MasterDiffView | None:
    """A leader's peers as a master's slaves (None on a member that does not lead): epoch is
    the term, diff_bytes the commit-log bytes past the peer's match (the whole log when the
    match is below the leader's base), in sync when the peer holds every committed entry."""
    if view.role != "LEADER":
        return None
    slaves = [_peer_diff(peer, view) for peer in view.peers]
    return MasterDiffView(
        master_max_offset=view.max_offset, epoch=view.term,
        max_diff_bytes=max((slave.diff_bytes for slave in slaves), default=0),
        in_sync_slave_count=sum(slave.in_sync for slave in slaves),
        slaves_needed=(len(view.peers) + 1) // 2, slaves=slaves)


def _peer_diff(peer: DLedgerPeerView, view: DLedgerView) -> SlaveDiff:
    diff_bytes = view.max_offset if peer.lag_bytes is None else peer.lag_bytes
    return SlaveDiff(address=peer.dledger_address, slave_id=peer.peer_id,
                     state=peer.dispatcher_state or "UNKNOWN",
                     ack_offset=view.max_offset - diff_bytes, diff_bytes=diff_bytes,
                     in_sync=(peer.match_index or 0) >= view.committed_index)


def _metadata_sync(broker: Broker) -> MetadataSyncStatus | None:
    sync = broker.leader_sync.sync if broker.leader_sync is not None else None
    return sync.status() if sync is not None else None
