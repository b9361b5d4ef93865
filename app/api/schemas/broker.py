"""The broker and its store seen from the admin API: `/admin/broker`, `/admin/store`,
snapshots."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field


class DataVersionView(BaseModel):
    counter: int
    timestamp_ms: int


class BrokerView(BaseModel):
    role: str
    flush_disk_type: str
    versions: dict[str, str]
    metadata_schema_revision: str
    data_versions: dict[str, DataVersionView]
    settings: dict[str, Any]
    recovery: dict[str, Any] | None
    started_at_ms: int
    uptime_ms: int


class CommitLogFile(BaseModel):
    name: str
    start_offset: int
    write_offset: int
    size_bytes: int


class DispatchFailureView(BaseModel):
    """A consume queue dispatch could not write; the next start rebuilds it."""

    topic: str
    queue_id: int
    error: str
    failed_at_ms: int


class StoreView(BaseModel):
    min_offset: int
    max_offset: int
    flushed_offset: int
    dispatch_behind_bytes: int
    dispatch_failed_queues: list[DispatchFailureView] = Field(
        description="Queues set aside after an I/O error; the others are dispatched as usual")
    consume_queue_open_files: int = Field(
        description="Consume-queue files mapped now (bounded by consume_queue_open_files_max)")
    commit_log_files: list[CommitLogFile]
    consume_queue_count: int
    topic_count: int
    disk_used_bytes: int
    disk_used_ratio: float
    put_counts: dict[str, int]
    put_bytes_total: int
    put_messages_per_s: float
    put_bytes_per_s: float


class LogPositionView(BaseModel):
    """How far into the log's metadata records the tables are applied: every record below
    `queue_offset` (of the metadata topic) is in them."""

    queue_offset: int
    commit_log_offset: int


class QueueEndView(BaseModel):
    topic: str
    queue_id: int
    next_offset: int
    last_record_offset: int


class QueueStartView(BaseModel):
    """A queue's next queue offset at the master's min offset (where a slave's log begins)."""

    topic: str
    queue_id: int
    queue_offset: int


class TableExportView(BaseModel):
    """One metadata table as a master serves it to slaves (RocketMQ's SlaveSynchronize). Since
    metadata changes travel in the log, a slave takes a table from here only to bootstrap: when
    the master's log no longer holds records it lacks (`metadata_min_queue_offset` is past the
    slave's own position); it then applies the log's records from `log_position` on."""

    table: str
    data_version: DataVersionView
    rows: list[dict[str, Any]]
    broker_group: str | None = None
    log_position: LogPositionView | None = None
    metadata_min_queue_offset: int | None = None
    queue_ends: list[QueueEndView] | None = Field(
        default=None, description="consumer offsets only: the queues the rows name, with "
                                  "their next offset and where their last record starts in "
                                  "the log (a slave whose log starts past that record never "
                                  "gets the queue's records, and keeps the row's offset)")
    min_offset: int | None = Field(None, description="the master's commit-log min offset: an "
                                   "empty slave's log begins there")
    queue_starts: list[QueueStartView] | None = Field(
        None, description="consumer offsets only: every queue's next queue offset at "
        "`min_offset`; a slave bootstrapped there starts its queues at them (a queue whose "
        "records all lie below has none of them, yet keeps its committed offsets)")
    pop_queues: list[dict[str, Any]] | None = Field(
        None, description="consumer offsets only: group consumption's queue states (offsets, "
        "next delivery id, entries waiting or in flight), which a slave bootstrapped here "
        "takes with the tables")
    pop_counts: list[dict[str, Any]] | None = Field(
        None, description="consumer offsets only: group consumption's counts per group and "
        "topic")


# Written out, not derived from store/snapshot/manifest.py's Manifest, though most fields are
# its: this view adds `path` second, leaves out `broker_group` and `extra`, and requires
# `schema_version` and `skipped_before_bytes` (defaults there), all fixed by the spec byte for
# byte; deriving that shape (reordered, filtered, defaults dropped) reads worse than the list.
class SnapshotManifestView(BaseModel):
    """The manifest of a snapshot just written (commit-log range [range_from, range_to))."""

    snapshot_id: str
    path: str
    broker_name: str
    broker_role: str
    range_from: int
    range_to: int
    message_count: int
    body_bytes: int
    include_bodies: bool
    topics: dict[str, int]
    metadata_rows: dict[str, int]
    replication_samples: int
    created_ms: int
    schema_version: int
    skipped_before_bytes: int
