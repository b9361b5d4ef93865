"""Snapshots of a running broker: one export at a time (a second request while one runs is
refused, the route answers 409), on request or every `snapshot_interval_s`.

A snapshot holds the log up to the store's confirmed offset (flushed, and on a SYNC_MASTER
replicated). What was put before the export was asked for is waited for first: the flush is
woken at once and awaited for at most `sync_flush_timeout_ms`, so a snapshot right after a
produce holds it (ASYNC_FLUSH would otherwise leave it out until the next periodic flush).
When the range is still empty, the refusal says what is missing and why (not flushed, not
acknowledged by the slaves, not committed by the DLedger group).

The diff samples a snapshot takes are removed only once its directory is in place, so a failed
export loses none.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import asdict
from typing import TYPE_CHECKING

from store.service import ServiceThread
from store.snapshot import Manifest, SnapshotError, SnapshotRangeRemoved  # light: no pyarrow

if TYPE_CHECKING:
    from app.broker.broker import Broker  # which builds its Snapshots: an import cycle
    from store.snapshot import ExportRequest

log = logging.getLogger(__name__)

# Past the flush's own deadline, the most a snapshot waits for the flush to answer.
_WAIT_MARGIN_S = 1.0


def export_snapshot(request: ExportRequest) -> Manifest:
    """store.snapshot's export, loaded (with pyarrow) by the first snapshot."""
    from store.snapshot import export_snapshot as export

    return export(request)


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
        from store.snapshot import ExportRequest, HeldLogFiles, metadata_rows

        broker = self._broker
        settings = broker.settings
        asked_end = broker.store.max_offset  # what was put before this export was asked for
        self._wait_confirmed(asked_end)
        sampler = broker.replication.sampler if broker.replication is not None else None
        samples = sampler.peek_samples() if sampler is not None else []
        request = ExportRequest(
            data_dir=settings.data_dir,
            out_root=settings.snapshot_root,
            broker_name=broker.name,
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
        except SnapshotRangeRemoved as error:
            self.last_error = str(error)
            raise
        except SnapshotError as error:
            gap = broker.store.confirmation_gap(asked_end)
            self.last_error = str(error) if gap is None else f"{error}: {gap}"
            if gap is None:
                raise
            raise SnapshotError(self.last_error) from error
        if sampler is not None:
            sampler.drop_samples(len(samples))
        self.last, self.last_error = manifest, None
        log.info("snapshot %s: [%d, %d), %d messages", manifest.snapshot_id,
                 manifest.range_from, manifest.range_to, manifest.message_count)
        return manifest

    def _wait_confirmed(self, end_offset: int) -> None:
        """Flush now what lies below `end_offset`, and wait for it (bounded by the flush's
        deadline, `sync_flush_timeout_ms`). The slaves' acks and a DLedger commit are not
        this export's to hasten: a put answered 201 had them already."""
        store = self._broker.store
        if store.confirmed_offset >= end_offset:
            return
        flushed = store.flush_through(end_offset)
        try:
            flushed.wait(self._broker.settings.sync_flush_timeout_ms / 1000 + _WAIT_MARGIN_S)
        except TimeoutError:  # the deadline thread is late: export what is confirmed
            log.warning("snapshot: the flush up to %d did not answer in time", end_offset)


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
