"""Slave metadata sync (RocketMQ's SlaveSynchronize): a slave pulls the master's topic config,
consumer offsets, delay offsets and subscription groups from the master's admin API, at start
and every `slave_sync_interval_s`, and applies them as reference section 6 says (topics and
groups replaced when their data version differs, consumer offsets merged, delay offsets
replaced). A failure is logged, kept for `/admin/diff`, and retried sooner (bounded backoff).
"""

from __future__ import annotations

import logging
import ssl
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from app.api.schemas.sync import MetadataSyncStatus
from store.clock import wall_ms
from store.metadata import MetadataError, MetadataStore
from store.service import ServiceThread

log = logging.getLogger(__name__)

RETRY_FIRST_S = 1.0
ERROR_TEXT_MAX = 500


@dataclass(frozen=True, slots=True)
class SyncedTable:
    path: str  # under /admin/sync/
    apply: Callable[[MetadataStore, Mapping[str, Any]], bool | int]


# RocketMQ's order: topics, consumer offsets, delay offsets, subscription groups.
SYNCED_TABLES = (
    SyncedTable("topics", lambda metadata, export: metadata.import_topics(export)),
    SyncedTable("consumer-offsets",
                lambda metadata, export: metadata.merge_consumer_offsets(export)),
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
                 transport: httpx.BaseTransport | None = None) -> None:
        super().__init__()
        self.master_http_address = master_http_address.rstrip("/")
        self._metadata = metadata
        self._interval_s = interval_s
        headers = {"authorization": f"Bearer {auth_token}"} if auth_token else {}
        # An https master's certificate is always verified: against `ca_file` when given
        # (a private CA), else the system's CAs. A failure is a sync error naming it.
        verify = ssl.create_default_context(cafile=str(ca_file)) if ca_file else True
        self._client = httpx.Client(base_url=self.master_http_address, headers=headers,
                                    timeout=timeout_s, transport=transport, verify=verify)
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
        self._client.close()

    def run_once(self) -> float:
        self.state.last_attempt_ms = wall_ms()
        try:
            self.sync_once()
        except (httpx.HTTPError, MetadataError, ValueError) as error:
            state = self.state
            state.consecutive_failures += 1
            state.last_error = f"{type(error).__name__}: {error}"[:ERROR_TEXT_MAX]
            retry_s = min(self._interval_s,
                          RETRY_FIRST_S * 2.0 ** (state.consecutive_failures - 1))
            log.warning("slave sync from %s failed (%d in a row), retrying in %.1f s: %s",
                        self.master_http_address, state.consecutive_failures, retry_s,
                        state.last_error)
            return retry_s
        return self._interval_s

    def sync_once(self) -> None:
        """Pull and apply the four tables in order; the first failure stops the round."""
        for table in SYNCED_TABLES:
            if self._stop_event.is_set():
                return
            response = self._client.get(f"/admin/sync/{table.path}")
            response.raise_for_status()
            export = response.json()
            with self._apply_lock:
                if self._stop_event.is_set():
                    return  # retired while the request was in flight: apply nothing
                applied = table.apply(self._metadata, export)
            if applied:
                self.state.tables_applied[table.path] = (
                    self.state.tables_applied.get(table.path, 0) + 1)
        state = self.state
        state.last_success_ms = wall_ms()
        state.last_error = None
        state.consecutive_failures = 0
        state.sync_count += 1

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
