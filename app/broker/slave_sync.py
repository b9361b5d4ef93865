"""Slave metadata sync (RocketMQ's SlaveSynchronize): a slave pulls the master's topic config,
consumer offsets, delay offsets and subscription groups from the master's admin API, at start
and every `slave_sync_interval_s`. A failure is logged, kept for `/admin/diff`, and retried
sooner (bounded backoff).

Topics, groups and consumer offsets travel in the replicated log (app/broker/metadata_log.py):
the slave's dispatch applies their records in log order, so its tables never hold what its log
does not. The pull is only the bootstrap for a slave whose position in the log's metadata
records is below what the master's log still holds (retention removed records it lacks): it
then takes the three tables (each export says which records it reflects), offsets clamped to
its own queues, and applies records from the earliest of those positions on. Delay offsets are
still replaced from the pull. A master of another broker group (its `broker_group` differs) is
refused, named in the sync's error, and makes the slave not ready.
"""

from __future__ import annotations

import json
import logging
import ssl
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from app.api.schemas.sync import MetadataSyncStatus
from app.broker.sync_transport import (
    HttpTransport,
    MasterRefused,
    MasterUnreachable,
    SyncRequest,
    SyncTransport,
    refusal,
)
from store import MessageStore
from store.clock import wall_ms
from store.metadata import MetadataError, MetadataStore
from store.metadata.models import LogPosition
from store.service import ServiceThread

log = logging.getLogger(__name__)

RETRY_FIRST_S = 1.0
ERROR_TEXT_MAX = 500


@dataclass(frozen=True, slots=True)
class SyncedTable:
    path: str  # under /admin/sync/
    apply: Callable[[MetadataStore, Mapping[str, Any]], bool | int]
    in_the_log: bool = True  # its changes are records of the log: pulled only to bootstrap


class ForeignMaster(ValueError):
    """The master serves another broker group: its tables are not this slave's."""


# RocketMQ's order: topics, consumer offsets, delay offsets, subscription groups.
SYNCED_TABLES = (
    SyncedTable("topics", lambda metadata, export: metadata.import_topics(export)),
    SyncedTable("consumer-offsets",
                lambda metadata, export: metadata.merge_consumer_offsets(export)),
    # Derived from the log on every replica (store/timers/state.py): pulled only to bootstrap.
    SyncedTable("delay-offsets", lambda metadata, export: metadata.import_delay_offsets(export)),
    SyncedTable("subscription-groups", lambda metadata, export: metadata.import_groups(export)),
)


@dataclass(slots=True)
class SyncState:
    last_attempt_ms: int | None = None
    last_success_ms: int | None = None
    last_error: str | None = None
    consecutive_failures: int = 0
    sync_count: int = 0
    tables_applied: dict[str, int] = field(default_factory=dict)


class SlaveSync(ServiceThread):
    name = "slave-metadata-sync"

    def __init__(self, master_http_address: str, metadata: MetadataStore, *,
                 interval_s: float, timeout_s: float, auth_token: str | None,
                 ca_file: Path | None = None,
                 transport: SyncTransport | None = None,
                 broker_group: str | None = None,
                 queue_max_offset: Callable[[str, int], int] | None = None,
                 log_min_offset: Callable[[], int] | None = None,
                 start_queues: Callable[[int, list[tuple[str, int, int]]], int] | None = None,
                 load_pops: Callable[[dict[str, Any]], bool] | None = None,
                 tables_in_the_log: bool = False) -> None:
        """`tables_in_the_log`: the master writes topic, group and offset changes as records
        of the log (the classic modes), so they are pulled only to bootstrap. `start_queues`
        (the master's min offset, its queue starts there): a bootstrap starts this slave's
        queues where the master's stand at the offset its log begins at. `load_pops` (the
        consumer offsets' export): a bootstrap takes the master's group consumption states."""
        self._start_queues = start_queues
        self._load_pops = load_pops
        super().__init__()
        self._tables_in_the_log = tables_in_the_log
        self._broker_group = broker_group
        # A bootstrapped offset is never past this slave's own queue.
        self._queue_max_offset = queue_max_offset
        # Where this slave's log starts: a queue whose records all lie below it never fills.
        self._log_min_offset = log_min_offset
        # Set when the master serves another broker group (readiness reports it).
        self.foreign_master: str | None = None
        self.master_http_address = master_http_address.rstrip("/")
        self._metadata = metadata
        self._interval_s = interval_s
        self._headers = {"authorization": f"Bearer {auth_token}"} if auth_token else {}
        if transport is None:
            # An https master's certificate is always verified: against `ca_file` when given
            # (a private CA), else the system's CAs. A failure is a sync error naming it. An
            # http master needs no TLS context (loading the system's CAs costs about 1 MB).
            context = None
            if ca_file is not None:
                context = ssl.create_default_context(cafile=str(ca_file))
            elif self.master_http_address.startswith("https:"):
                context = ssl.create_default_context()
            transport = HttpTransport(self.master_http_address, timeout_s=timeout_s,
                                      ssl_context=context)
        self._transport = transport
        self.state = SyncState()
        # Held while a pulled table is applied; `retire()` takes it to set the stop event, so
        # once `retire()` returns nothing more is applied.
        self._apply_lock = threading.Lock()

    def retire(self) -> None:
        """Stop applying at once without waiting for a request in flight (a leader that died
        mid-request holds it for up to `timeout_s`); `stop()` later joins the thread."""
        with self._apply_lock:
            self._stop_event.set()
        self.wake()

    def stop(self) -> None:
        self.retire()
        super().stop()

    def run_once(self) -> float:
        self.state.last_attempt_ms = wall_ms()
        try:
            self.sync_once()
        except ForeignMaster as error:
            self.foreign_master = str(error)
            return self._failed(error)
        except (MasterUnreachable, MasterRefused, MetadataError, ValueError) as error:
            return self._failed(error)
        return self._interval_s

    def _failed(self, error: Exception) -> float:
        state = self.state
        state.consecutive_failures += 1
        state.last_error = f"{type(error).__name__}: {error}"[:ERROR_TEXT_MAX]
        retry_s = min(self._interval_s,
                      RETRY_FIRST_S * 2.0 ** (state.consecutive_failures - 1))
        log.warning("slave sync from %s failed (%d in a row), retrying in %.1f s: %s",
                    self.master_http_address, state.consecutive_failures, retry_s,
                    state.last_error)
        return retry_s

    def sync_once(self) -> None:
        """Pull the four tables in order and apply what the log does not carry; the first
        failure stops the round."""
        exports: list[tuple[SyncedTable, dict[str, Any]]] = []
        for table in SYNCED_TABLES:
            if self._stop_event.is_set():
                return
            export = self._pull(f"/admin/sync/{table.path}")
            group = export.get("broker_group")
            if self._broker_group is not None and group is not None \
                    and group != self._broker_group:
                raise ForeignMaster(f"the master at {self.master_http_address} serves broker "
                                    f"group {group!r}, this slave is of {self._broker_group!r}: "
                                    "its metadata is refused")
            exports.append((table, export))
        self.foreign_master = None
        positions = [export["log_position"] for table, export in exports
                     if self._tables_in_the_log and table.in_the_log
                     and export.get("log_position") is not None]
        bootstrap = bool(positions) and self._metadata.log_position.queue_offset < max(
            export.get("metadata_min_queue_offset") or 0 for _, export in exports)
        for table, export in exports:
            if table.in_the_log and positions and not bootstrap:
                continue  # the log brings these changes, in order
            if table.path == "consumer-offsets" and self._queue_max_offset is not None:
                if bootstrap:
                    self._started_queues(export)
                    if self._load_pops is not None and self._load_pops(export):
                        log.info("slave sync took the master's group consumption states")
                export = self._clamped(export)
            with self._apply_lock:
                if self._stop_event.is_set():
                    return  # retired while a request was in flight: apply nothing
                applied = table.apply(self._metadata, export)
            if applied:
                self.state.tables_applied[table.path] = (
                    self.state.tables_applied.get(table.path, 0) + 1)
        if bootstrap:
            earliest = min(positions, key=lambda position: int(position["queue_offset"]))
            self._metadata.bootstrap_position(LogPosition(
                queue_offset=int(earliest["queue_offset"]),
                commit_log_offset=int(earliest["commit_log_offset"]), updated_at_ms=wall_ms()))
            log.info("slave sync bootstrapped the metadata tables from %s at its log position "
                     "%s", self.master_http_address, earliest)
        state = self.state
        state.last_success_ms = wall_ms()
        state.last_error = None
        state.consecutive_failures = 0
        state.sync_count += 1

    def _pull(self, path: str) -> dict[str, Any]:
        """One table's export: a JSON object, or MasterUnreachable, MasterRefused, ValueError."""
        answer = self._transport(SyncRequest(path, self._headers))
        if answer.status != 200:
            raise refusal(self.master_http_address + path, answer)
        export = json.loads(answer.body)
        if not isinstance(export, dict):
            raise ValueError(f"GET {self.master_http_address}{path}: expected a JSON object")
        return export

    def _started_queues(self, export: dict[str, Any]) -> None:
        """The master's queue starts at its min offset, taken before offsets are clamped to
        this slave's queues: a queue whose records all lie below where this log begins has
        no entry here, yet starts at the master's next offset (not at 0)."""
        starts = export.get("queue_starts")
        min_offset = export.get("min_offset")
        if self._start_queues is None or not isinstance(starts, list) or \
                not isinstance(min_offset, int):
            return
        started = self._start_queues(min_offset, [
            (str(start["topic"]), int(start["queue_id"]), int(start["queue_offset"]))
            for start in starts])
        if started:
            log.info("slave sync started %d queues at the master's next offsets at %d",
                     started, min_offset)

    def _clamped(self, export: dict[str, Any]) -> dict[str, Any]:
        """A master's offsets, none past this slave's own queue (its log may be behind),
        except for a queue whose last record on the master lies below where this slave's
        log starts (a DLedger member reset to its leader's base, a slave bootstrapped at its
        master's min offset): those records never come, and a rewound offset would deliver
        the group's messages again (or skip none it never had)."""
        assert self._queue_max_offset is not None
        log_start = self._log_min_offset() if self._log_min_offset is not None else 0
        below = {(end["topic"], int(end["queue_id"]))
                 for end in export.get("queue_ends") or []
                 if int(end["last_record_offset"]) < log_start}
        rows = [row if (row["topic"], int(row["queue_id"])) in below
                else {**row, "queue_offset": min(int(row["queue_offset"]),
                                                 self._queue_max_offset(row["topic"],
                                                                        int(row["queue_id"])))}
                for row in export.get("rows", [])]
        return {**export, "rows": rows}

    def status(self) -> MetadataSyncStatus:
        state = self.state
        return MetadataSyncStatus(
            master_http_address=self.master_http_address,
            interval_s=self._interval_s,
            last_attempt_ms=state.last_attempt_ms,
            last_success_ms=state.last_success_ms,
            last_error=state.last_error,
            consecutive_failures=state.consecutive_failures,
            sync_count=state.sync_count,
            tables_applied=dict(state.tables_applied),
        )


def queue_max_offset(store: MessageStore, topic: str, queue_id: int) -> int:
    """The slave's own next offset of a queue (0 for none): a synced offset never passes it."""
    bounds = store.queue_offset_range(topic, queue_id)
    return bounds[1] if bounds is not None else 0


def start_queues(store: MessageStore, master_min_offset: int,
                 starts: list[tuple[str, int, int]]) -> int:
    """The bootstrap: a log that is empty (it begins at its master's min offset) or begins
    there starts every queue at the master's next offset there; returns how many queues
    started."""
    if store.max_offset > store.min_offset and store.min_offset != master_min_offset:
        return 0
    return sum(store.queues.start_at(topic, queue_id, queue_offset)
               for topic, queue_id, queue_offset in starts)
