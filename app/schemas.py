"""The API's request and response models: the OpenAPI spec is generated from them, and request
bodies are validated with them (strict: no coercion, no unknown fields).

Offsets are JSON integers; the broker never hands out one at or above 2^53 (DESIGN, HTTP API).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, StringConstraints

from app.dledger_schemas import DLedgerView
from app.sync_schemas import MetadataSyncStatus
from store import GetMessageStatus, PutMessageStatus

KEYS_PER_MESSAGE_MAX = 32
PROPERTIES_PER_MESSAGE_MAX = 64
QUEUE_ID_MAX = 1023
TOPIC_PATTERN = r"^[A-Za-z0-9_%|-]{1,127}$"
GROUP_PATTERN = r"^[A-Za-z0-9_%|-]{1,255}$"
# Property names the broker sets itself; a producer may not set them through `properties`.
PROPERTY_IDEMPOTENCY_KEY = "IDEMPOTENCY_KEY"
RESERVED_PROPERTY_NAMES = frozenset({
    "KEYS", "TAGS", PROPERTY_IDEMPOTENCY_KEY, "UNIQ_KEY", "DELAY", "WAIT", "TRAN_MSG",
    "REAL_TOPIC", "REAL_QID", "RETRY_TOPIC", "MAX_OFFSET", "MIN_OFFSET",
})

# Patterns leave out C1 controls (\x7f-\x9f) too: JSON Schema's \s and Python's differ there
# (\x85), and the spec must refuse exactly what the broker refuses.
_KEY_CHARACTER = r"[^\s,\x00-\x1f\x7f-\x9f]"
MessageKey = Annotated[str, StringConstraints(min_length=1, max_length=128,
                                              pattern=rf"^{_KEY_CHARACTER}+$")]
# The X-Twinlog-Keys header: 1 to KEYS_PER_MESSAGE_MAX keys joined by commas (spaces or tabs
# around them allowed), nothing else.
_HEADER_KEY = rf"[ \t]*{_KEY_CHARACTER}{{1,128}}[ \t]*"
KEYS_HEADER_PATTERN = rf"^{_HEADER_KEY}(,{_HEADER_KEY}){{0,{KEYS_PER_MESSAGE_MAX - 1}}}$"
MessageTag = Annotated[str, StringConstraints(min_length=1, max_length=128,
                                              pattern=r"^[^|\x00-\x1f]+$")]
PropertyName = Annotated[str, StringConstraints(min_length=1, max_length=64,
                                                pattern=r"^[A-Za-z0-9_.-]+$")]
PropertyValue = Annotated[str, StringConstraints(max_length=4096, pattern=r"^[^\x00-\x1f]*$")]
IdempotencyKey = Annotated[str, StringConstraints(min_length=1, max_length=128,
                                                  pattern=r"^[\x21-\x7e]+$")]


def _whole_number(value: Any) -> Any:
    """JSON Schema's `integer` includes 1.0: strict models take a float without a fraction as
    that integer (anything else goes on to the strict check, which refuses it). A boolean is
    refused here: it equals 0 or 1, so an enum of integers would take it."""
    if type(value) is float and value.is_integer():
        return int(value)
    if type(value) is bool:
        raise ValueError("Input should be a valid integer")
    return value


# An integer field of a request body: JSON integers, and numbers like 1.0.
WholeNumber = BeforeValidator(_whole_number)
# (The bounds come before the validator: after it, pydantic writes them into the JSON schema
# as `ge`/`le`, which JSON Schema does not know.)
QueueId = Annotated[int, Field(ge=0, le=QUEUE_ID_MAX), WholeNumber]
QueueCount = Annotated[int, Field(ge=1, le=QUEUE_ID_MAX + 1), WholeNumber]
Offset = Annotated[int, Field(ge=0, le=2**53 - 1), WholeNumber]

_STRICT = ConfigDict(extra="forbid", strict=True)


# -- produce ------------------------------------------------------------------------------------


class MessageAttributes(BaseModel):
    """What a message carries besides its body (also sent as headers with a raw body)."""

    model_config = _STRICT

    keys: list[MessageKey] = Field(
        default_factory=list, max_length=KEYS_PER_MESSAGE_MAX,
        description="Message keys (RocketMQ KEYS), for lookups; no spaces or commas.")
    tags: MessageTag | None = Field(None, description="The message tag (RocketMQ TAGS).")
    properties: dict[PropertyName, PropertyValue] = Field(
        default_factory=dict, max_length=PROPERTIES_PER_MESSAGE_MAX,
        description="User properties. Reserved names: " + ", ".join(
            sorted(RESERVED_PROPERTY_NAMES)) + ".")
    queue_id: QueueId | None = Field(
        None, description="Queue to write to; omitted: round robin over the topic's queues.")


# What binascii.a2b_base64(strict_mode=True) takes: whole quanta, padding only at the end.
BASE64_PATTERN = r"^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$"


class ProduceMessage(MessageAttributes):
    """One message as JSON. The body is text (utf8) or base64-encoded bytes."""

    model_config = ConfigDict(extra="forbid", strict=True, json_schema_extra={
        "if": {"properties": {"body_encoding": {"const": "base64"}},
               "required": ["body_encoding"]},
        "then": {"properties": {"body": {"pattern": BASE64_PATTERN}}}})

    body: str = Field(description="The message body, encoded as `body_encoding` says.")
    body_encoding: Literal["utf8", "base64"] = "utf8"


class ProduceBatchEntry(ProduceMessage):
    """One message of a batch; `idempotency_key` works as the single produce's header."""

    idempotency_key: IdempotencyKey | None = None


class ProduceBatch(BaseModel):
    """Messages stored in order under one lock hold; at most max_batch_messages (setting)."""

    model_config = _STRICT

    messages: list[ProduceBatchEntry] = Field(min_length=1)


class PutResult(BaseModel):
    """The outcome of one put. `status` is the broker's PutMessageStatus; `http_status` is the
    code the put would have alone (201 stored, 202 stored with a guarantee missing)."""

    status: PutMessageStatus
    http_status: int
    topic: str
    msg_id: str | None = None
    queue_id: int | None = None
    queue_offset: int | None = None
    commit_log_offset: int | None = None
    wrote_bytes: int = 0
    replayed: bool = Field(
        False, description="True when this is the first result of an earlier request with "
                           "the same idempotency key: nothing new was stored.")
    detail: str | None = None
    error_code: PutMessageStatus | None = Field(
        None, description="A batch entry not stored: its PutMessageStatus.")


class BatchResult(BaseModel):
    results: list[PutResult]


# -- consume ------------------------------------------------------------------------------------


class ConsumedMessage(BaseModel):
    msg_id: str
    topic: str
    queue_id: int
    queue_offset: int
    commit_log_offset: int
    size_bytes: int
    body: str
    body_encoding: Literal["utf8", "base64"]
    keys: list[str]
    tags: str | None
    properties: dict[str, str]
    idempotency_key: str | None
    born_timestamp_ms: int
    store_timestamp_ms: int
    reconsume_times: int


class KeyLookupResult(BaseModel):
    topic: str
    key: str
    messages: list[ConsumedMessage] = Field(description="Newest first.")


class ConsumeResult(BaseModel):
    topic: str
    queue_id: int
    status: GetMessageStatus
    next_offset: int = Field(description="Where the next read of this queue starts.")
    min_offset: int
    max_offset: int
    messages: list[ConsumedMessage]


# -- topics and groups --------------------------------------------------------------------------


class TopicCreate(BaseModel):
    model_config = _STRICT

    name: Annotated[str, StringConstraints(pattern=TOPIC_PATTERN)]
    read_queue_count: QueueCount | None = None
    write_queue_count: QueueCount | None = None
    permission: Annotated[Literal[0, 2, 4, 6], WholeNumber] = Field(
        6, description="RocketMQ bits: 4 read, 2 write.")


class TopicUpdate(BaseModel):
    model_config = _STRICT

    read_queue_count: QueueCount | None = Field(None, description="May only grow.")
    write_queue_count: QueueCount | None = Field(None, description="May only grow.")
    permission: Annotated[Literal[0, 2, 4, 6], WholeNumber] | None = Field(
        None, description="RocketMQ bits: 4 read, 2 write.")


# One transaction creates a batch: bounded like every batch.
TOPICS_PER_BATCH_MAX = 1000


class TopicCreateBatch(BaseModel):
    model_config = _STRICT

    topics: list[TopicCreate] = Field(min_length=1, max_length=TOPICS_PER_BATCH_MAX,
                                      description="Created all together, or none of them.")


class Topic(BaseModel):
    name: str
    read_queue_count: int
    write_queue_count: int
    permission: int
    readable: bool
    writable: bool
    created_at_ms: int
    updated_at_ms: int


class QueueOffsets(BaseModel):
    queue_id: int
    min_offset: int
    max_offset: int
    message_count: int


class TopicDetail(Topic):
    queues: list[QueueOffsets]


class TopicList(BaseModel):
    topics: list[Topic]


class GroupCreate(BaseModel):
    model_config = _STRICT

    name: Annotated[str, StringConstraints(pattern=GROUP_PATTERN)]
    consume_enabled: bool = True
    broadcast_enabled: bool = False
    retry_queue_count: Annotated[int, Field(ge=0, le=QUEUE_ID_MAX + 1), WholeNumber] = 1
    retry_times_max: Annotated[int, Field(ge=0, le=128), WholeNumber] = 16


class Group(BaseModel):
    name: str
    consume_enabled: bool
    broadcast_enabled: bool
    retry_queue_count: int
    retry_times_max: int
    created_at_ms: int
    updated_at_ms: int


class GroupList(BaseModel):
    groups: list[Group]


class OffsetCommit(BaseModel):
    model_config = _STRICT

    offset: Offset = Field(description="The next queue offset the group will consume.")
    allow_backwards: bool = Field(False, description="Reset: allow a lower offset.")


class OffsetResetByTime(BaseModel):
    model_config = _STRICT

    timestamp_ms: Offset = Field(description=(
        "Each queue's offset becomes its first message stored at or after this time (epoch "
        "ms); a queue whose messages are all older gets its max offset."))
    queue_id: QueueId | None = Field(None,
                                     description="Only this queue (default: every read queue).")


class ConsumerOffsetView(BaseModel):
    group: str
    topic: str
    queue_id: int
    offset: int
    updated_at_ms: int


class ConsumerOffsetList(BaseModel):
    offsets: list[ConsumerOffsetView]


class QueueLag(BaseModel):
    topic: str
    queue_id: int
    broker_offset: int = Field(description="The queue's max offset (log end).")
    consumer_offset: int = Field(description="The group's committed offset; -1: none yet.")
    lag: int


class TopicLag(BaseModel):
    topic: str
    max_lag: int
    total_lag: int


class LagReport(BaseModel):
    group: str
    max_lag: int
    total_lag: int
    topics: list[TopicLag]
    queues: list[QueueLag]


# -- admin --------------------------------------------------------------------------------------


class SlaveDiff(BaseModel):
    address: str
    slave_id: str = Field(description="the slave's stable id (hex), kept in its data dir")
    state: str
    ack_offset: int
    diff_bytes: int
    in_sync: bool


class MasterDiffView(BaseModel):
    master_max_offset: int
    epoch: int = Field(description="this master's current epoch (one more per start as "
                                   "master or promotion)")
    max_diff_bytes: int
    in_sync_slave_count: int
    slaves_needed: int
    slaves: list[SlaveDiff]


class SlaveDiffView(BaseModel):
    master_address: str
    connected: bool
    local_max_offset: int
    master_offset_seen: int
    diff_bytes: int
    last_read_age_ms: int | None
    last_write_age_ms: int | None
    reconnect_count: int
    last_error: str | None
    master_epoch: int = Field(description="the master's epoch at the last connect")
    refusal: str | None = Field(description="why the master last refused to stream to this "
                                            "slave: needs_reset or diverged; null when it "
                                            "streams")
    truncated_bytes_total: int = Field(description="bytes this slave cut back to agree with "
                                                   "its master's epochs, since start")
    apply_error: str | None = Field(
        None, description="Why the slave is not applying the master's bytes now (its disk is "
        "full: CREATE_MAPPED_FILE_FAILED, or a write fault); null while it applies them")
    metadata_sync: MetadataSyncStatus | None


class DiffView(BaseModel):
    """Master: per-slave diff in bytes (master max offset - slave ack offset). Slave: its own
    view of the link. Exactly one of `master` and `slave` is set, by role. DLedger mode:
    `role` is the member's (LEADER, FOLLOWER, ...), a leader's peers are `master.slaves`, and
    `dledger` lists every peer (docs/dledger.md)."""

    role: str
    master: MasterDiffView | None = None
    slave: SlaveDiffView | None = None
    dledger: DLedgerView | None = None


class SlaveConnection(BaseModel):
    address: str
    slave_id: str = Field(description="the slave's stable id (hex); empty during the handshake")
    state: str
    ack_offset: int
    transfer_from_offset: int
    diff_bytes: int
    in_sync: bool
    transfer_bytes_per_s: float
    last_ack_age_ms: int | None
    connected_for_ms: int


class RejectedSlaveView(BaseModel):
    address: str
    state: str
    reason: str
    request_offset: int


class MasterHaView(BaseModel):
    listen_address: str
    epoch: int
    authenticated: bool = Field(description="whether the HA link requires the shared secret")
    connection_count: int = Field(description="slaves holding a slot (past the handshake)")
    master_max_offset: int
    in_sync_slave_count: int
    slaves_needed: int
    slaves: list[SlaveConnection]
    rejected: list[RejectedSlaveView]


class HaView(BaseModel):
    role: str
    master: MasterHaView | None = None
    slave: SlaveDiffView | None = None
    dledger: DLedgerView | None = Field(
        default=None, description="DLedger mode: the member's view (master and slave are null)")


class PromoteRequest(BaseModel):
    """Make this slave a master, in a new epoch. Refused (409) while its master is still
    connected unless `force`: a forced promotion can lose what the old master acknowledged
    and this slave never received."""

    model_config = _STRICT
    role: Literal["SYNC_MASTER", "ASYNC_MASTER"] = "SYNC_MASTER"
    force: bool = False


class DemoteRequest(BaseModel):
    """Make this master a slave of another broker; what this log holds beyond the point
    where it agrees with the new master's epochs is cut back."""

    model_config = _STRICT
    master_ha_address: Annotated[str, StringConstraints(
        pattern=r"^[A-Za-z0-9.\-]+:[0-9]{1,5}$", max_length=255)] = Field(
        examples=["127.0.0.1:10912"])
    master_http_address: Annotated[str, StringConstraints(
        pattern=r"^https?://[^\s/]+$", max_length=255)] = Field(
        examples=["http://127.0.0.1:8080"])


class RoleChangeView(BaseModel):
    role: str
    epoch: int | None = Field(None, description="the new epoch, after a promotion")


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


class TableExportView(BaseModel):
    """One metadata table as a master serves it to slaves (RocketMQ's SlaveSynchronize)."""

    table: str
    data_version: DataVersionView
    rows: list[dict[str, Any]]


class Health(BaseModel):
    status: Literal["ok"]


class Readiness(BaseModel):
    ready: bool
    role: str
    state: str
    ha_link: SlaveDiffView | None = None
    detail: str | None = None


class ValidationProblem(BaseModel):
    loc: list[str | int]
    msg: str
    type: str


class Problem(BaseModel):
    """RFC 9457 problem details, with twinlog's extension members."""

    type: str
    title: str
    status: int
    detail: str
    error_code: str
    instance: str | None = None
    put_status: PutMessageStatus | None = None
    errors: list[ValidationProblem] | None = None
    master_http_address: str | None = None
    master_ha_address: str | None = None
    setting: str | None = Field(None, description="The broker setting whose bound was reached "
                                                  "(TOPICS_MAX_REACHED, ...)")


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
