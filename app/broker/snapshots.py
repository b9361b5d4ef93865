"""Snapshots of a running broker: one export at a time (a second request while one runs is
refused, the route answers 409), on request or every `snapshot_interval_s`.

The diff samples a snapshot takes are removed only once its directory is in place, so a failed
export loses none.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import asdict
from typing import TYPE_CHECKING

from store.service import ServiceThread
from store.snapshot import (
    ExportRequest,
    HeldLogFiles,
    Manifest,
    SnapshotError,
    export_snapshot,
    metadata_rows,
)

if TYPE_CHECKING:
    from app.broker.broker import Broker  # which builds its Snapshots: an import cycle

log = logging.getLogger(__name__)


class SnapshotBusy(Exception):
    """Another export is running."""


class Snapshots:
    def __init__(self, broker: Broker) -> None:
        self._broker = broker
        self._running = threading.Lock()
        self.last: Manifest | None = None
        self.last_error: str | None = None

    def export(self) -> Manifest:
        """Export from where the previous snapshot ended to the store's confirmed offset
        (flushed, and on a SYNC_MASTER replicated), reading the store's own files."""
        if not self._running.acquire(blocking=False):
            raise SnapshotBusy("a snapshot export is already running")
        try:
            return self._export_locked()
        finally:
            self._running.release()

    def _export_locked(self) -> Manifest:
        broker = self._broker
        settings = broker.settings
        sampler = broker.replication.sampler if broker.replication is not None else None
        samples = sampler.peek_samples() if sampler is not None else []
        request = ExportRequest(
            data_dir=settings.data_dir,
            out_root=settings.snapshot_root,
            broker_name=f"{settings.http_host}:{settings.http_port}",
            broker_role=broker.role_name,
            broker_group=settings.broker_group,
            range_to=broker.store.confirmed_offset,
            include_bodies=settings.snapshot_include_bodies,
            metadata_rows=metadata_rows(broker.metadata_store),
            replication_samples=[asdict(sample) for sample in samples],
            log_files=HeldLogFiles(broker.store.commit_log.files),
            bytes_per_s=settings.snapshot_export_bytes_per_s,
            workers=settings.snapshot_export_workers,
        )
        try:
            manifest = export_snapshot(request)
        except SnapshotError as error:
            self.last_error = str(error)
            raise
        if sampler is not None:
            sampler.drop_samples(len(samples))
        self.last, self.last_error = manifest, None
        log.info("snapshot %s: [%d, %d), %d messages", manifest.snapshot_id,
                 manifest.range_from, manifest.range_to, manifest.message_count)
        return manifest


class PeriodicSnapshots(ServiceThread):
    """Exports every `interval_s`; "nothing new" is not an error."""

    name = "snapshots"

    def __init__(self, snapshots: Snapshots, interval_s: float) -> None:
        super().__init__()
        self._snapshots = snapshots
        self._interval_s = interval_s
        self._first = True

    def run_once(self) -> float:
        if self._first:  # the first round only waits
            self._first = False
            return self._interval_s
        try:
            self._snapshots.export()
        except (SnapshotBusy, SnapshotError) as error:
            log.info("periodic snapshot skipped: %s", error)
        return self._interval_s
