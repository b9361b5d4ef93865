"""Admin: `/admin/ha`, `/admin/diff`, `/admin/broker`, `/admin/store`, `/admin/sync/*`.

On a master the HA and diff views list every slave, numbers in bytes; a slave answers with
its own view of the link (and, in the diff, its metadata sync status). `/admin/sync/*` serve
the four metadata tables as the slave's metadata sync pulls them.
"""

from __future__ import annotations

import os
import platform
import time
from dataclasses import asdict
from importlib import metadata as package_metadata
from pathlib import Path

from fastapi import APIRouter
from pydantic import TypeAdapter
from starlette.types import Receive, Scope, Send

from app.api.deps import BrokerDep, GatewayDep, requires
from app.api.dledger_views import dledger_view, leader_diff
from app.api.errors import ApiError
from app.api.gateway import Gateway
from app.api.lean_lane import LeanRoute, admit, send_json
from app.api.openapi import problem_responses
from app.api.schemas.broker import (
    BrokerView,
    CommitLogFile,
    DataVersionView,
    DispatchFailureView,
    SnapshotManifestView,
    StoreView,
    TableExportView,
)
from app.api.schemas.ha import (
    DemoteRequest,
    DiffView,
    HaView,
    MasterDiffView,
    MasterHaView,
    PromoteRequest,
    RejectedSlaveView,
    RoleChangeView,
    SlaveConnection,
    SlaveDiff,
    SlaveDiffView,
)
from app.broker.broker import Broker, RoleChangeRefused
from app.broker.snapshots import SnapshotBusy
from app.broker.sync_export import LogStartMoved, table_export
from app.settings import Scope as TokenScope
from ha import MasterDiff, SlaveLinkView
from store import BrokerRole
from store.metadata import MetadataTable, head_revision
from store.retention import disk_used_ratio
from store.snapshot import SnapshotError, SnapshotRangeRemoved
from store.snapshot.manifest import snapshot_dir_name

# Reads are for dashboards too (the monitor scope, which admin includes); what changes the
# broker needs admin. Per route, so that the body guard (app/api/body_guard.py) sees the scope.
_READ = [requires(TokenScope.MONITOR)]
_CHANGE = [requires(TokenScope.ADMIN)]

router = APIRouter(prefix="/admin", tags=["admin"],
                   responses=problem_responses(401, 403, 503))

_PACKAGES = ("fastapi", "starlette", "pydantic", "uvicorn", "sqlalchemy", "sqlmodel", "alembic",
             "httpx")


def _slave_view(broker: Broker, link: SlaveLinkView) -> SlaveDiffView:
    sync = broker.slave_sync.status() if broker.slave_sync is not None else None
    return SlaveDiffView(**asdict(link), metadata_sync=sync)


@router.get("/diff", dependencies=_READ, operation_id="admin-diff")
def admin_diff(broker: BrokerDep) -> DiffView:
    """Master: max offset and, per slave, diff_bytes = master max offset - the slave's ack
    offset; 0 everywhere when the slaves have everything. Slave: its link and metadata sync.
    DLedger mode: a leader's peers as the master's slaves, and every peer in `dledger`."""
    return diff_view(broker)


async def diff_lean(scope: Scope, path_params: dict[str, str], receive: Receive, send: Send,
                    gateway: Gateway) -> None:
    """The lean lane's /admin/diff (app/api/lean_lane.py): polled by dashboards and by
    scripts waiting for a slave, it is all in memory; serialized without validating again."""
    view = diff_view(admit(scope, gateway, TokenScope.MONITOR))
    await send_json(send, _DIFF_VIEW.dump_json(view, by_alias=True))


_DIFF_VIEW = TypeAdapter(DiffView)
LEAN_ROUTES = (LeanRoute("GET", "/admin/diff", diff_lean),)


def diff_view(broker: Broker) -> DiffView:
    if broker.dledger is not None:
        view = dledger_view(broker, broker.dledger)
        return DiffView(role=view.role, master=leader_diff(view), dledger=view)
    assert broker.replication is not None
    diff = broker.replication.diff()
    role = broker.role.value
    if isinstance(diff, MasterDiff):
        return DiffView(role=role, master=MasterDiffView(
            master_max_offset=diff.master_max_offset, epoch=diff.epoch,
            max_diff_bytes=diff.max_diff_bytes,
            in_sync_slave_count=diff.in_sync_slave_count, slaves_needed=diff.slaves_needed,
            slaves=[SlaveDiff(address=s.address, slave_id=s.slave_id, state=s.state,
                              ack_offset=s.ack_offset,
                              diff_bytes=s.diff_bytes, in_sync=s.in_sync)
                    for s in diff.slaves]))
    return DiffView(role=role, slave=_slave_view(broker, diff))


@router.get("/ha", dependencies=_READ, operation_id="admin-ha")
def admin_ha(broker: BrokerDep) -> HaView:
    """Replication state: per slave connection (ack offset, diff, in-sync, transfer rate) on a
    master; the HA link on a slave."""
    if broker.dledger is not None:
        view = dledger_view(broker, broker.dledger)
        return HaView(role=view.role, dledger=view)
    replication = broker.replication
    assert replication is not None
    diff = replication.diff()
    role = broker.role.value
    if isinstance(diff, MasterDiff):
        service = replication.service
        assert service is not None
        host, port = service.listen_address
        return HaView(role=role, master=MasterHaView(
            listen_address=f"{host}:{port}", epoch=diff.epoch,
            authenticated=service.config.secret_bytes is not None,
            connection_count=service.connection_count,
            master_max_offset=diff.master_max_offset,
            in_sync_slave_count=diff.in_sync_slave_count, slaves_needed=diff.slaves_needed,
            slaves=[SlaveConnection(**asdict(slave)) for slave in diff.slaves],
            rejected=[RejectedSlaveView(**asdict(rejected)) for rejected in diff.rejected]))
    return HaView(role=role, slave=_slave_view(broker, diff))


@router.post("/ha/promote", dependencies=_CHANGE, operation_id="admin-ha-promote",
             responses=problem_responses(409))
def admin_ha_promote(request: PromoteRequest, gateway: GatewayDep) -> RoleChangeView:
    """Failover by hand: this slave becomes a master in a new epoch. 409 while its master is
    still connected (unless `force`) or when this broker is not a slave."""
    broker = gateway.running_broker()
    try:
        epoch = broker.promote(BrokerRole(request.role), force=request.force)
    except RoleChangeRefused as error:
        raise ApiError("ROLE_CHANGE_REFUSED", str(error)) from error
    return RoleChangeView(role=broker.role.value, epoch=epoch)


@router.post("/ha/demote", dependencies=_CHANGE, operation_id="admin-ha-demote",
             responses=problem_responses(409))
def admin_ha_demote(request: DemoteRequest, gateway: GatewayDep) -> RoleChangeView:
    """This master becomes a slave of the given master (an old master rejoining after a
    failover); it cuts back whatever its log holds that the new master's does not."""
    broker = gateway.running_broker()
    try:
        broker.demote(request.master_ha_address, request.master_http_address)
    except RoleChangeRefused as error:
        raise ApiError("ROLE_CHANGE_REFUSED", str(error)) from error
    return RoleChangeView(role=broker.role.value, epoch=None)


@router.get("/broker", dependencies=_READ, operation_id="admin-broker")
def admin_broker(broker: BrokerDep) -> BrokerView:
    """Role, flush type, versions, data versions, the settings that matter, the recovery."""
    versions = {"twinlog": _version("twinlog"), "python": platform.python_version()}
    versions.update({name: _version(name) for name in _PACKAGES})
    data_versions = broker.metadata_store.data_versions()
    recovery = broker.store.recovery
    now_ms = time.time_ns() // 1_000_000
    return BrokerView(
        role=broker.role_name, flush_disk_type=broker.settings.flush_disk_type.value,
        versions=versions, metadata_schema_revision=head_revision(),
        data_versions={table.value: DataVersionView(counter=version.counter,
                                                    timestamp_ms=version.timestamp_ms)
                       for table, version in data_versions.items()},
        settings=broker.settings.public_view(),
        recovery=asdict(recovery) if recovery is not None else None,
        started_at_ms=broker.started_at_ms, uptime_ms=now_ms - broker.started_at_ms)


@router.get("/store", dependencies=_READ, operation_id="admin-store")
def admin_store(broker: BrokerDep) -> StoreView:
    """Offsets, commit-log files, disk use, put counts and rates (over the last ~10 s)."""
    store = broker.store
    files = store.commit_log.files.files
    counts = {"PUT_OK": 0} | {status.value: count for status, count in broker.put_counts().items()}
    rates = broker.put_rates.sample()
    topics = store.queues.topics()
    return StoreView(
        min_offset=store.min_offset, max_offset=store.max_offset,
        flushed_offset=store.commit_log.flushed_offset,
        dispatch_behind_bytes=store.dispatch.behind_bytes,
        dispatch_failed_queues=[DispatchFailureView.model_validate(failure, from_attributes=True)
                                for failure in store.dispatch.failures.failed_queues()],
        consume_queue_open_files=store.queues.open_files.open_file_count,
        commit_log_files=[CommitLogFile(name=mapped.path.name, start_offset=mapped.start_offset,
                                        write_offset=mapped.write_offset,
                                        size_bytes=mapped.size_bytes) for mapped in files],
        consume_queue_count=sum(len(queue_ids) for queue_ids in topics.values()),
        topic_count=len(topics), disk_used_bytes=_disk_used_bytes(store.paths.root),
        disk_used_ratio=disk_used_ratio(store.paths.root), put_counts=counts,
        put_bytes_total=broker.put_bytes_total(), put_messages_per_s=rates.messages_per_s,
        put_bytes_per_s=rates.bytes_per_s)


def _export(broker: Broker, table: MetadataTable) -> TableExportView:
    try:
        return TableExportView.model_validate(table_export(broker, table))
    except LogStartMoved as error:
        raise ApiError("LOG_START_MOVED", str(error)) from error


@router.get("/sync/topics", dependencies=_READ, operation_id="admin-sync-topics",
            responses=problem_responses(503))
def sync_topics(broker: BrokerDep) -> TableExportView:
    """The topic config table and its data version (what a slave pulls)."""
    return _export(broker, MetadataTable.TOPIC_CONFIG)


@router.get("/sync/subscription-groups", dependencies=_READ,
            operation_id="admin-sync-subscription-groups",
            responses=problem_responses(503))
def sync_subscription_groups(broker: BrokerDep) -> TableExportView:
    return _export(broker, MetadataTable.SUBSCRIPTION_GROUP)


@router.get("/sync/consumer-offsets", dependencies=_READ,
            operation_id="admin-sync-consumer-offsets",
            responses=problem_responses(503))
def sync_consumer_offsets(broker: BrokerDep) -> TableExportView:
    return _export(broker, MetadataTable.CONSUMER_OFFSET)


@router.get("/sync/delay-offsets", dependencies=_READ, operation_id="admin-sync-delay-offsets",
            responses=problem_responses(503))
def sync_delay_offsets(broker: BrokerDep) -> TableExportView:
    return _export(broker, MetadataTable.DELAY_OFFSET)


def _version(package: str) -> str:
    try:
        return package_metadata.version(package)
    except package_metadata.PackageNotFoundError:
        return "unknown"


def _disk_used_bytes(root: Path) -> int:
    """Blocks allocated under the data dir (mapped files are sparse until written)."""
    total = 0
    for directory, _, names in os.walk(root):
        for name in names:
            try:
                total += os.stat(os.path.join(directory, name)).st_blocks * 512
            except FileNotFoundError:
                continue  # removed by retention meanwhile
    return total


@router.post("/snapshots", dependencies=_CHANGE, operation_id="admin-create-snapshot",
             status_code=201, responses=problem_responses(409))
def admin_create_snapshot(gateway: GatewayDep) -> SnapshotManifestView:
    """Export the commit log since the previous snapshot (and the metadata and diff samples)
    as Parquet under the snapshot dir, up to the confirmed offset (flushed, and on a
    SYNC_MASTER replicated); 409 while another export runs, when nothing is new, or when
    retention removed the range's start during the export. A file that retention removes
    later in the export ends the snapshot there (a shorter range; the next snapshot's
    `skipped_before_bytes` counts what retention took first)."""
    gateway.master_broker()
    snapshots = gateway.snapshots
    assert snapshots is not None
    try:
        manifest = snapshots.export()
    except SnapshotBusy as error:
        raise ApiError("SNAPSHOT_RUNNING", str(error)) from error
    except SnapshotRangeRemoved as error:
        raise ApiError("SNAPSHOT_RANGE_REMOVED", str(error)) from error
    except SnapshotError as error:
        raise ApiError("NOTHING_TO_SNAPSHOT", str(error)) from error
    # Absolute: the broker's working directory means nothing to the client.
    path = gateway.settings.snapshot_root.absolute() / snapshot_dir_name(manifest.range_from,
                                                                         manifest.range_to)
    fields = {k: v for k, v in asdict(manifest).items() if k != "extra"}
    return SnapshotManifestView(path=str(path), **fields)
