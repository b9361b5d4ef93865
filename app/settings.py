"""The broker's settings: `TWINLOG_*` environment variables, an optional TOML file, and flags.

Precedence, highest first: values passed in code (the CLI's flags), environment variables, the
TOML file named by `load_settings(config_file=...)` or `TWINLOG_CONFIG_FILE`, defaults. Names
carry their units. A bad value or combination fails when the settings are built, naming the
setting; nothing here touches the disk beyond reading the TOML file.
"""

from __future__ import annotations

import enum
import ipaddress
import json
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import Annotated, Any, Literal, Self
from urllib.parse import urlsplit

from pydantic import Field, ValidationError, field_validator, model_validator
from pydantic_settings import (
    BaseSettings,
    NoDecode,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)

from ha import HAConfig
from ha.dledger.core.peers import Peer, parse_peers
from ha.dledger.host.host_config import HostConfig
from ha.dledger.host.transport_config import TransportConfig
from store import BrokerRole, ConfigError, FlushDiskType, StoreConfig
from store.metadata import sqlite_database_url
from store.paths import StorePaths
from store.timers.lanes import (
    DEFAULT_DELAY_LEVELS,
    DEFAULT_TIMER_MAX_DELAY_MS,
    DEFAULT_TIMER_PRECISION_MS,
    TimerPlan,
    parse_delay_levels,
)

CONFIG_FILE_VARIABLE = "TWINLOG_CONFIG_FILE"
GIB = 1 << 30
MIB = 1 << 20
KIB = 1 << 10

_HOST = HostConfig()  # the DLedger host's defaults, in ms

_config_file: ContextVar[Path | None] = ContextVar("twinlog_config_file", default=None)


class Scope(enum.StrEnum):
    """What a bearer token may do."""

    PRODUCE = "produce"
    CONSUME = "consume"
    ADMIN = "admin"
    # Read-only: the GET admin endpoints and /metrics, for dashboards (an admin token also may).
    MONITOR = "monitor"


def structured_text(text: str, name: str, compact: Callable[[str], Any]) -> Any:
    """A structured setting given as text (`--set`, environment): JSON when it starts like
    JSON, otherwise the setting's compact form."""
    stripped = text.strip()
    if stripped[:1] in ("{", "["):
        try:
            return json.loads(stripped)
        except json.JSONDecodeError as error:
            raise ValueError(f"{name}: not valid JSON ({error})") from None
    return compact(stripped)


def _split(text: str, separators: str) -> list[str]:
    for separator in separators[1:]:
        text = text.replace(separator, separators[0])
    return [part.strip() for part in text.split(separators[0]) if part.strip()]


def _compact_tokens(text: str) -> dict[str, list[str]]:
    """token:scope+scope,token:scope (a token may hold ':' but not ',')."""
    tokens: dict[str, list[str]] = {}
    for entry in _split(text, ","):
        token, separator, scopes = entry.rpartition(":")
        if not separator or not token:
            raise ValueError(f"auth_tokens: expected token:scope+scope, got {entry!r}")
        tokens[token] = _split(scopes, "+")
    return tokens


class ReplicationMode(enum.StrEnum):
    """How a broker replicates: classic master/slave (ha/), or a DLedger group (ha/dledger/)."""

    CLASSIC = "classic"
    DLEDGER = "dledger"


class SettingsError(ValueError):
    """Settings that cannot be used; the message names the setting."""


Port = Annotated[int, Field(ge=0, le=65535)]


class Settings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="TWINLOG_", extra="forbid", validate_default=True, frozen=True
    )

    # -- HTTP ----------------------------------------------------------------------------------
    http_host: str = Field("127.0.0.1", description="address the HTTP gateway listens on; an "
                           "IPv4 address here is also the STOREHOST written into message ids")
    http_port: Port = Field(8080, description="HTTP gateway port (0: the kernel picks one)")
    # NoDecode: from the environment or `--set`, the value is text the validators below
    # decode (JSON, or the compact form), not JSON that pydantic-settings would insist on.
    auth_tokens: Annotated[dict[str, list[Scope]], NoDecode] = Field(
        default_factory=dict,
        description="bearer token -> scopes; empty means open access (development only). As "
                    'text: JSON ({"t1": ["admin"], "t2": "monitor"}) or token:scope+scope,... '
                    "(t1:admin,t2:produce+consume)",
    )
    cors_allow_origins: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="browser origins (https://dash.example:3000) allowed to call the API, for "
                    'dashboards; empty: no CORS headers. As text: JSON (["https://a"]) or '
                    "comma-separated",
    )
    max_batch_messages: int = Field(1000, ge=1, le=100_000, description="messages one "
                                    "`...messages:batch` request may carry")
    max_body_size_bytes: int = Field(8 * MIB, ge=1024, description="largest produce request "
                                     "body; must be >= message_size_max_bytes")
    idempotency_window_s: float = Field(300.0, gt=0, le=7 * 24 * 3600, description="how long "
                                        "a produce's Idempotency-Key is remembered (per topic)")
    idempotency_keys_max: int = Field(100_000, ge=1, le=10_000_000, description="idempotency "
                                      "keys remembered at once; the oldest go first past it")
    # -- HTTP connection limits (docs/gateway-limits.md) ------------------------------------------
    max_metadata_body_size_bytes: int = Field(
        MIB, ge=1024, le=64 * MIB,
        description="request body limit of every route but produce (topics, groups, offsets, "
                    "admin); checked after the token and before a byte is read")
    http_header_bytes_max: int = Field(32 * KIB, ge=1024, le=MIB,
                                       description="request line and headers, in bytes")
    http_headers_max: int = Field(100, ge=8, le=10_000,
                                  description="header fields in one request")
    http_header_timeout_s: float = Field(
        10.0, gt=0, le=300, description="a request's line and headers must arrive within this "
                                        "of the connection opening or the previous response")
    http_body_timeout_s: float = Field(
        30.0, gt=0, le=3600, description="a request body must arrive whole within this of its "
                                         "headers")
    http_keep_alive_timeout_s: int = Field(5, ge=1, le=3600,
                                           description="an idle keep-alive connection is closed "
                                                       "after this")
    http_connections_max: int = Field(
        1024, ge=1, le=1_000_000,
        description="open HTTP connections; lowered at start to what the descriptor budget "
                    "leaves (app/server/fd_budget.py); past it a new connection gets 503 and a "
                    "close")
    http_event_loop: Literal["uvloop", "asyncio"] = Field(
        "uvloop", description="the HTTP server's event loop (uvloop is the faster; "
                              "bench/fair_batches.py --broker compares them)")
    http_eager_accept: bool = Field(
        True, description="accept every waiting connection at once (app/server/eager_accept.py); "
                          "off, uvloop accepts one per loop turn and a busy loop leaves new "
                          "connections queued for seconds")
    tls_cert: Path | None = Field(None, description="PEM certificate (chain): serve HTTPS")
    tls_key: Path | None = Field(None, description="PEM private key of tls_cert")
    long_poll_wait_ms_max: int = Field(
        30_000, ge=0, le=300_000,
        description="the longest a consume read waits for a message (wait_ms is cut to it)")
    long_poll_waiters_max: int = Field(
        4096, ge=0, le=1_000_000,
        description="consume reads waiting at once (each holds a connection); past it a "
                    "read that would wait answers 429 LONG_POLL_BUSY")
    # -- store ---------------------------------------------------------------------------------
    data_dir: Path = Field(Path("data"), description="commit log, consume queues, checkpoint "
                           "and (by default) the metadata database and snapshots")
    broker_role: BrokerRole = Field(BrokerRole.ASYNC_MASTER, description="ASYNC_MASTER, "
                                    "SYNC_MASTER (a put waits for in_sync_replicas) or SLAVE")
    flush_disk_type: FlushDiskType = Field(FlushDiskType.ASYNC_FLUSH, description="ASYNC_FLUSH "
                                           "(answer at once, msync every flush_interval_ms) or "
                                           "SYNC_FLUSH (a put waits for its msync); in DLedger "
                                           "mode the same for every member's acknowledgement")
    mapped_file_size_bytes: int = Field(GIB, description="size of each commit-log file (each "
                                        "is reserved on disk whole, and the next one ahead); "
                                        "must hold the largest record. A data dir keeps the "
                                        "size its files were created with; `twinlog dev` "
                                        "uses 64 MiB")
    message_size_max_bytes: int = Field(4 * MIB, description="largest message body accepted")
    flush_interval_ms: int = Field(500, description="how often the flush service msyncs the "
                                   "commit log (the group-commit period under SYNC_FLUSH)")
    sync_flush_timeout_ms: int = Field(5000, description="how long a SYNC_FLUSH put waits for "
                                       "its msync before answering FLUSH_DISK_TIMEOUT")
    max_pending_puts: int = Field(10_000, description="puts waiting for a flush or a slave at "
                                  "once; past it a put answers OS_PAGE_CACHE_BUSY")
    file_reserved_hours: float = Field(72.0, description="retention: a commit-log file older "
                                       "than this (by mtime) is removed")
    disk_max_used_ratio: float = Field(0.75, description="retention: past this used fraction "
                                       "of the data disk the oldest files are removed early")
    consume_queue_entries_per_file: int = Field(
        300_000, ge=1, le=50_000_000,
        description="20-byte entries per consume-queue file; its blocks are reserved in steps "
                    "of consume_queue_reserve_step_bytes as entries arrive, not whole")
    consume_queue_reserve_step_bytes: int = Field(
        16 * 1024, ge=4096, le=1 << 30,
        description="how much of a consume-queue file is reserved at a time (a put reserves "
                    "its entry's step before it is acknowledged)")
    disk_reserve_bytes: int = Field(
        64 << 20, ge=0, le=1 << 40,
        description="free disk the commit log leaves when it creates a file, for the consume "
                    "queues and indexes of what it acknowledged; past it puts answer 507 "
                    "CREATE_MAPPED_FILE_FAILED until space returns")
    consume_queue_open_files_max: int = Field(
        256, ge=1, le=1_000_000,
        description="consume-queue files mapped at once (2 descriptors each); the least "
                    "recently used idle queues are closed past it")
    consume_cache_bytes_max: int = Field(
        32 << 20, ge=0, le=1 << 40,
        description="memory for the consumed messages' answer documents a consume read keeps, "
                    "by record, for the next read of them (another group, a retry); the "
                    "oldest kept go first; 0 keeps none")
    key_index_slot_count: int = Field(
        250_000, ge=1, le=2**31,
        description="hash slots per key-index file (4 bytes each); more slots, shorter chains")
    key_index_entries_per_file: int = Field(
        1_000_000, ge=1, le=2**32 - 2,
        description="keys per key-index file (24 bytes each, reserved whole); a full file "
                    "rolls to a new one, removed once retention passes it")
    # -- replication ---------------------------------------------------------------------------
    ha_listen_host: str = Field("127.0.0.1", description="address a master's HA port listens "
                                "on for slaves")
    ha_listen_port: Port = Field(10912, description="a master's HA port (0: the kernel picks "
                                 "one)")
    ha_master_address: str | None = Field(None, description="host:port of the master's HA port; "
                                          "required on a SLAVE")
    ha_secret: str | None = Field(None, description="shared secret of the HA link (mutual "
                                  "authentication, every frame tagged); required unless "
                                  "ha_allow_unauthenticated")
    ha_allow_unauthenticated: bool = Field(False, description="run the HA link without a "
                                           "secret (anyone who reaches it can read the log)")
    ha_handshake_timeout_ms: int = Field(2000, description="how long a new HA connection may "
                                         "take to finish the handshake")
    ha_handshakes_max: int = Field(8, description="HA connections still in the handshake at "
                                   "once; a new one past it drops the oldest")
    ha_connections_max: int = Field(16, description="slaves connected at once (slots are "
                                    "given after the handshake); more are refused")
    in_sync_replicas: int = Field(2, description="copies a SYNC_MASTER put needs, the master "
                                  "included: in_sync_replicas - 1 distinct slaves must ack it")
    slave_timeout_ms: int = Field(3000, description="how long a SYNC_MASTER put waits for its "
                                  "slave acks before answering FLUSH_SLAVE_TIMEOUT")
    ha_slave_fall_behind_bytes_max: int = Field(
        256 * MIB, description="a slave further behind than this is not in sync; a SYNC_MASTER "
                               "put without enough in-sync slaves answers SLAVE_NOT_AVAILABLE; "
                               "retention keeps files only for slaves (DLedger: peers) within it")
    ha_send_heartbeat_interval_ms: int = Field(5000, description="an idle HA link sends a "
                                               "heartbeat (or offset report) this often")
    ha_housekeeping_interval_ms: int = Field(20_000, description="an HA link silent this long "
                                             "is closed; must be > the heartbeat interval")
    ha_reconnect_interval_ms: int = Field(5000, description="a slave waits this long before "
                                          "reconnecting to its master")
    ha_connect_timeout_ms: int = Field(3000, description="a slave's TCP connect timeout to its "
                                       "master")
    # -- DLedger mode (docs/dledger.md, "Running a DLedger group") -----------------------------
    replication_mode: ReplicationMode = Field(
        ReplicationMode.CLASSIC, description="classic (broker_role: master/slave over the HA "
        "port) or dledger (a Raft group of dledger_peers elects its leader; broker_role and "
        "the ha_* settings are not used)")
    dledger_group: str = Field("default", min_length=1, max_length=64,
                               pattern=r"^[A-Za-z0-9_.-]+$",
                               description="the DLedger group's name (bound into the peer "
                                           "handshake: members of another group are refused)")
    dledger_self_id: str | None = Field(None, description="this member's id, one of "
                                        "dledger_peers (required in dledger mode)")
    dledger_peers: str | None = Field(
        None, description="every member's DLedger port as DLedger writes it: "
                          "n0-127.0.0.1:20911;n1-127.0.0.1:20912;n2-127.0.0.1:20913")
    dledger_http_peers: str | None = Field(
        None, description="every member's HTTP gateway, same ids and format "
                          "(n0-127.0.0.1:8080;...): a follower names the leader's in its 503 "
                          "and pulls metadata from it")
    dledger_secret: str | None = Field(None, description="shared secret of the group's peer "
                                       "port (mutual authentication, every frame tagged); "
                                       "required unless dledger_allow_unauthenticated")
    dledger_allow_unauthenticated: bool = Field(False, description="run the DLedger port "
                                                "open (anyone who reaches it can vote and "
                                                "push entries)")
    dledger_membership_override: bool = Field(
        False, description="start even though dledger_group, dledger_self_id or the ids of "
        "dledger_peers differ from the membership stored in the data dir (refused otherwise), "
        "and store the new one: a deliberate change of the group")
    dledger_listen_fd: int | None = Field(
        None, ge=0, description="a bound TCP socket inherited from the parent to serve the "
                                "DLedger port on (tests, supervisors); default: bind this "
                                "member's address in dledger_peers")
    dledger_tick_ms: int = Field(_HOST.tick_ms, description="the DLedger loop's tick; every "
                                 "time below is rounded up to whole ticks")
    dledger_election_timeout_ms: int = Field(
        _HOST.election_timeout_ms, description="a follower that heard no leader for a random "
        "time in [this, 2 x this) starts an election; the leader's check-quorum window")
    dledger_heartbeat_interval_ms: int = Field(_HOST.heartbeat_interval_ms, description="an "
                                               "idle leader pushes a heartbeat this often")
    dledger_push_timeout_ms: int = Field(_HOST.push_timeout_ms, description="an unanswered "
                                         "push is sent again after this")
    dledger_quorum_deadline_ms: int = Field(
        _HOST.quorum_deadline_ms, description="a produce not committed by a quorum within this "
        "answers 202 COMMIT_INDETERMINATE (it may still commit, or be lost)")
    dledger_transfer_catchup_ms: int = Field(
        _HOST.transfer_catchup_ms, description="a leadership transfer whose target is not "
        "caught up within this is refused (NOT_CAUGHT_UP)")
    dledger_pending_appends_max: int = Field(
        _HOST.pending_appends_max, ge=1, le=1_000_000,
        description="produces waiting for a quorum at once; past it 429 OS_PAGE_CACHE_BUSY")
    # -- slave metadata sync -------------------------------------------------------------------
    master_http_address: str | None = Field(None, description="http://host:port of the "
                                            "master's gateway; a SLAVE pulls topics, groups "
                                            "and offsets from it (required on a SLAVE)")
    master_auth_token: str | None = Field(None, description="bearer token (admin scope) a "
                                          "slave sends to the master's admin API")
    slave_sync_interval_s: float = Field(60.0, gt=0, description="how often a slave pulls the "
                                         "master's metadata")
    slave_sync_timeout_s: float = Field(5.0, gt=0, le=60, description="timeout of one metadata "
                                        "request to the master")
    metadata_snapshot_records_max: int = Field(
        100_000, ge=0, description="a master writes a snapshot of its metadata tables into the "
        "log once this many metadata records (offset commits, topic and group changes) follow "
        "the last one, bounding what a rebuild or a start replays (0: only when retention "
        "needs one)")
    master_ca_file: Path | None = Field(None, description="PEM CA bundle that verifies an https "
                                        "master_http_address (default: the system's CAs)")
    # -- metadata ------------------------------------------------------------------------------
    database_url: str | None = Field(None, description="SQLAlchemy URL of the metadata "
                                     "database; default: SQLite, metadata.sqlite3 in data_dir")
    auto_create_topics: bool = Field(True, description="a produce to an unknown topic creates "
                                     "it with default_queue_count queues")
    auto_create_groups: bool = Field(True, description="an offset commit for an unknown "
                                     "consumer group creates the group")
    default_queue_count: int = Field(4, ge=1, le=1024, description="queues of a topic created "
                                     "without a count")
    # Every topic costs a metadata row, directories and, per queue, consume-queue files and
    # memory: both counts are bounded, and past them creation answers 409/400 naming them.
    topics_max: int = Field(10_000, ge=1, le=10_000_000, description="topics this broker "
                            "holds; creating one more answers 409 TOPICS_MAX_REACHED")
    queues_per_topic_max: int = Field(128, ge=1, le=1024, description="queues one topic may "
                                      "have; more answers 400 QUEUES_PER_TOPIC_MAX_EXCEEDED")
    groups_max: int = Field(10_000, ge=1, le=10_000_000, description="subscription groups "
                            "this broker holds; creating one more (or committing an offset "
                            "for a new one) answers 409 GROUPS_MAX_REACHED")
    consumer_offset_persist_interval_ms: int = Field(5000, gt=0, description="how often "
                                                     "committed consumer offsets are written "
                                                     "to the metadata database")
    # -- delayed messages ----------------------------------------------------------------------
    delay_levels: str = Field(
        DEFAULT_DELAY_LEVELS, min_length=2, max_length=512,
        description="the waits of delay levels 1..N (at most 18), e.g. \"1s 5s 1m 2h\" "
                    "(units ms, s, m, h, d); RocketMQ's messageDelayLevel by default")
    timer_precision_ms: int = Field(
        DEFAULT_TIMER_PRECISION_MS, ge=1, le=60_000,
        description="the shortest timer lane: a message sent with deliver_at_ms or delay_ms "
                    "is delivered at most this late (plus the scheduler's own time)")
    timer_max_delay_ms: int = Field(
        DEFAULT_TIMER_MAX_DELAY_MS, ge=1, le=366 * 86_400_000,
        description="the longest wait deliver_at_ms or delay_ms may ask for; more answers 400")
    timer_cancels_pending_max: int = Field(
        10_000, ge=1, le=1_000_000,
        description="cancelled delayed messages not yet due, at once; one more answers 429")
    # -- group consumption (receive / ack) ------------------------------------------------------
    pop_invisible_ms_min: int = Field(
        10_000, ge=1, le=86_400_000,
        description="the shortest invisible time a receive or a change of invisibility may ask "
                    "for (RocketMQ: 10 s); less answers 400")
    pop_invisible_ms_max: int = Field(
        12 * 3_600_000, ge=1, le=7 * 86_400_000,
        description="the longest invisible time a receive or a change may ask for (12 h)")
    pop_in_flight_per_group_max: int = Field(
        100_000, ge=1, le=10_000_000,
        description="messages received and not yet acked, per group; a receive past it answers "
                    "fewer, or 429 POP_IN_FLIGHT_MAX_REACHED when none fits")
    pop_window_max: int = Field(
        1024, ge=1, le=65_536,
        description="queue offsets one queue's in-flight window holds for a group (the same on "
                    "every replica): a queue whose window is full gives nothing new until its "
                    "oldest messages are acked")
    pop_queue_states_max: int = Field(
        65_536, ge=1, le=10_000_000,
        description="(group, topic, queue) states group consumption keeps; a receive that "
                    "needs one more answers 429")
    pop_handle_key: str = Field(
        "twinlog-receipt-handle-v1", min_length=1, max_length=256,
        description="the key of receipt handles' integrity tag: the same on every broker of a "
                    "group (master and slaves), so that a failover keeps handles valid")
    pop_backoff: str = Field(
        "table", pattern="^(table|exponential)$",
        description="the wait before a released message is receivable again: table "
                    "(RocketMQ's delay levels from 10 s: 10 s, 30 s, 1 m, 2 m, ... 2 h) or "
                    "exponential (pop_backoff_initial_ms doubling, capped at 2 h)")
    pop_backoff_initial_ms: int = Field(
        5_000, ge=1, le=7_200_000, description="the first wait of the exponential backoff")
    pop_expiry_interval_ms: int = Field(
        50, ge=1, le=60_000,
        description="how often the master looks for received messages whose invisible time "
                    "passed (a redelivery is at most about this late)")
    # -- snapshots -----------------------------------------------------------------------------
    broker_group: str = Field(
        "broker-a", min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.-]+$",
        description="the group a master and its slaves share (RocketMQ's brokerName); "
                    "snapshots carry it so that a report counts a pair's copies once")
    snapshot_dir: Path | None = Field(None, description="where Parquet snapshots go; default: "
                                      "snapshots/ in data_dir")
    snapshot_interval_s: float = Field(0.0, ge=0, description="export a snapshot this often "
                                       "on a master; 0: only on request")
    snapshot_export_bytes_per_s: int = Field(
        0, ge=0, description="the export reads the log no faster than this (0: no budget), "
        "so that produce keeps its throughput during an export on a busy broker")
    snapshot_export_workers: int = Field(
        1, ge=1, le=16, description="worker processes an export spreads its range over (1: "
        "on the broker's thread); more make an export of an idle broker faster")
    snapshot_include_bodies: bool = Field(True, description="snapshots carry message bodies "
                                          "(false: the body column is null)")
    # -- process -------------------------------------------------------------------------------
    log_level: str = Field("info", pattern="^(critical|error|warning|info|debug)$",
                           description="critical, error, warning, info or debug")
    timeout_graceful_shutdown_s: float = Field(10.0, gt=0, le=300, description="on SIGTERM or "
                                               "Ctrl-C, how long open requests may finish")
    gc_tuning: bool = Field(True, description="freeze the startup heap and collect young "
                                              "objects less often (app/server/gc_tuning.py)")

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        config_file = _config_file.get() or _env_config_file()
        if config_file is None:
            return init_settings, env_settings
        return init_settings, env_settings, TomlConfigSettingsSource(settings_cls, config_file)

    @field_validator("auth_tokens", mode="before")
    @classmethod
    def _decode_tokens(cls, value: Any) -> Any:
        if isinstance(value, str):
            value = structured_text(value, "auth_tokens", _compact_tokens)
        if isinstance(value, dict):
            return {token: (_split(scopes, "+,") if isinstance(scopes, str) else scopes)
                    for token, scopes in value.items()}
        return value

    @field_validator("cors_allow_origins", mode="before")
    @classmethod
    def _decode_origins(cls, value: Any) -> Any:
        if isinstance(value, str):
            return structured_text(value, "cors_allow_origins", lambda text: _split(text, ","))
        return value

    @field_validator("cors_allow_origins")
    @classmethod
    def _check_origins(cls, origins: list[str]) -> list[str]:
        for origin in origins:
            parts = urlsplit(origin)
            if origin != "*" and (parts.scheme not in ("http", "https") or not parts.netloc
                                  or parts.path or parts.query):
                raise ValueError(f"expected scheme://host[:port] or *, got {origin!r}")
        return origins

    @model_validator(mode="after")
    def _check_combinations(self) -> Self:
        """Checks that need several settings; each error names the setting to change."""
        is_slave = self.broker_role is BrokerRole.SLAVE
        if is_slave and not self.master_http_address:
            raise ValueError("master_http_address: required when broker_role is SLAVE "
                             "(the slave pulls metadata from the master's admin API)")
        if self.master_http_address:
            parts = urlsplit(self.master_http_address)
            if parts.scheme not in ("http", "https") or not parts.netloc:
                raise ValueError("master_http_address: expected http://host:port "
                                 f"(got {self.master_http_address!r})")
        if (self.tls_cert is None) != (self.tls_key is None):
            raise ValueError("tls_key: tls_cert and tls_key go together (got only one)")
        if self.max_body_size_bytes < self.message_size_max_bytes:
            raise ValueError(
                f"max_body_size_bytes: must be >= message_size_max_bytes "
                f"({self.message_size_max_bytes}), or a largest message cannot be sent "
                f"(got {self.max_body_size_bytes})")
        if (self.http_port == self.ha_listen_port and self.http_port != 0
                and self.http_host == self.ha_listen_host):
            raise ValueError(f"ha_listen_port: must differ from http_port ({self.http_port})")
        if self.default_queue_count > self.queues_per_topic_max:
            raise ValueError(f"default_queue_count: must be <= queues_per_topic_max "
                             f"({self.queues_per_topic_max}) (got {self.default_queue_count})")
        for scopes in self.auth_tokens.values():
            if not scopes:
                raise ValueError("auth_tokens: every token needs at least one scope")
        # The store and HA configs validate themselves; build them now so they fail here.
        self.to_store_config()
        self.to_ha_config()
        if self.replication_mode is ReplicationMode.DLEDGER:
            self._check_dledger()
        return self

    def _check_dledger(self) -> None:
        if self.broker_role is BrokerRole.SLAVE:
            raise ValueError("broker_role: a DLedger member is not a SLAVE (the group elects "
                             "its leader; leave broker_role at its default)")
        for name in ("dledger_self_id", "dledger_peers", "dledger_http_peers"):
            if not getattr(self, name):
                raise ValueError(f"{name}: required when replication_mode is dledger")
        peers = self.dledger_peer_list
        http_peers = self.dledger_http_peer_list
        if [peer.node_id for peer in peers] != [peer.node_id for peer in http_peers]:
            raise ValueError("dledger_http_peers: must name the ids of dledger_peers, in the "
                             f"same order (got {self.dledger_http_peers!r})")
        if self.dledger_self_id not in {peer.node_id for peer in peers}:
            raise ValueError(f"dledger_self_id: {self.dledger_self_id!r} is not one of the ids "
                             f"of dledger_peers ({self.dledger_peers!r})")
        # The secret is checked when the transport is built (twinlog serve), as ha_secret is.
        self.to_dledger_host_config()

    # -- derived configs -------------------------------------------------------------------------

    @property
    def store_host(self) -> tuple[str, int]:
        """The STOREHOST of records (and so of message ids): this broker's IPv4 and HTTP port."""
        try:
            address = ipaddress.ip_address(self.http_host)
        except ValueError:
            return "127.0.0.1", self.http_port
        if address.version != 4 or address.is_unspecified:
            return "127.0.0.1", self.http_port
        return str(address), self.http_port

    @property
    def snapshot_root(self) -> Path:
        return self.snapshot_dir if self.snapshot_dir is not None else self.data_dir / "snapshots"

    def to_store_config(self) -> StoreConfig:
        try:
            return StoreConfig(
                data_dir=self.data_dir,
                broker_role=self.broker_role,
                flush_disk_type=self.flush_disk_type,
                mapped_file_size_bytes=self.mapped_file_size_bytes,
                message_size_max_bytes=self.message_size_max_bytes,
                flush_interval_ms=self.flush_interval_ms,
                sync_flush_timeout_ms=self.sync_flush_timeout_ms,
                max_pending_puts=self.max_pending_puts,
                default_queue_count=self.default_queue_count,
                file_reserved_hours=self.file_reserved_hours,
                disk_max_used_ratio=self.disk_max_used_ratio,
                consume_queue_entries_per_file=self.consume_queue_entries_per_file,
                consume_queue_open_files_max=self.consume_queue_open_files_max,
                consume_queue_reserve_step_bytes=self.consume_queue_reserve_step_bytes,
                disk_reserve_bytes=self.disk_reserve_bytes,
                store_host=self.store_host,
                long_poll_waiters_max=self.long_poll_waiters_max,
                encoded_records_bytes_max=self.consume_cache_bytes_max,
                key_index_slot_count=self.key_index_slot_count,
                key_index_entries_per_file=self.key_index_entries_per_file,
                timers=self.to_timer_plan(),
            )
        except ConfigError as error:
            raise SettingsError(str(error)) from error

    def to_timer_plan(self) -> TimerPlan:
        try:
            return TimerPlan(parse_delay_levels(self.delay_levels), self.timer_precision_ms,
                             self.timer_max_delay_ms)
        except ConfigError as error:
            raise SettingsError(str(error)) from error

    def to_ha_config(self) -> HAConfig:
        try:
            return HAConfig(
                broker_role=self.broker_role,
                ha_listen_host=self.ha_listen_host,
                ha_listen_port=self.ha_listen_port,
                ha_master_address=self.ha_master_address,
                ha_secret=self.ha_secret,
                in_sync_replicas=self.in_sync_replicas,
                slave_timeout_ms=self.slave_timeout_ms,
                ha_slave_fall_behind_bytes_max=self.ha_slave_fall_behind_bytes_max,
                ha_send_heartbeat_interval_ms=self.ha_send_heartbeat_interval_ms,
                ha_housekeeping_interval_ms=self.ha_housekeeping_interval_ms,
                ha_reconnect_interval_ms=self.ha_reconnect_interval_ms,
                ha_connect_timeout_ms=self.ha_connect_timeout_ms,
                ha_allow_unauthenticated=self.ha_allow_unauthenticated,
                ha_handshake_timeout_ms=self.ha_handshake_timeout_ms,
                ha_handshakes_max=self.ha_handshakes_max,
                ha_connections_max=self.ha_connections_max,
            )
        except ConfigError as error:
            raise SettingsError(str(error)) from error

    @property
    def dledger_peer_list(self) -> tuple[Peer, ...]:
        try:
            return parse_peers(self.dledger_peers or "")
        except ConfigError as error:
            raise SettingsError(f"dledger_peers: {error}") from error

    @property
    def dledger_http_peer_list(self) -> tuple[Peer, ...]:
        try:
            return parse_peers(self.dledger_http_peers or "")
        except ConfigError as error:
            raise SettingsError(f"dledger_http_peers: {error}") from error

    def dledger_http_urls(self) -> dict[str, str]:
        """Member id -> its gateway's base URL (https when this broker serves TLS: a group
        runs one scheme)."""
        scheme = "https" if self.tls_cert is not None else "http"
        return {peer.node_id: f"{scheme}://{peer.address}" for peer in self.dledger_http_peer_list}

    def to_dledger_host_config(self) -> HostConfig:
        try:
            return HostConfig(
                tick_ms=self.dledger_tick_ms,
                election_timeout_ms=self.dledger_election_timeout_ms,
                heartbeat_interval_ms=self.dledger_heartbeat_interval_ms,
                push_timeout_ms=self.dledger_push_timeout_ms,
                quorum_deadline_ms=self.dledger_quorum_deadline_ms,
                transfer_catchup_ms=self.dledger_transfer_catchup_ms,
                pending_appends_max=self.dledger_pending_appends_max,
                # The broker's flush setting says what an acknowledgement rests on, in both
                # modes: SYNC_FLUSH syncs first, ASYNC_FLUSH answers from the page cache.
                sync_before_ack=self.flush_disk_type is FlushDiskType.SYNC_FLUSH,
                sync_interval_ms=self.flush_interval_ms,
                retention_hold_behind_bytes_max=self.ha_slave_fall_behind_bytes_max,
            )
        except ConfigError as error:
            raise SettingsError(str(error)) from error

    def to_dledger_transport_config(self) -> TransportConfig:
        assert self.dledger_self_id is not None
        secret = self.dledger_secret.encode() if self.dledger_secret is not None else None
        try:
            return TransportConfig(
                group=self.dledger_group, self_id=self.dledger_self_id,
                peers=self.dledger_peer_list, secret=secret,
                allow_unauthenticated=self.dledger_allow_unauthenticated,
                # A push holds up to 1 MiB of entries, or one largest record (with properties).
                frame_bytes_max=max(8 * MIB, self.message_size_max_bytes + 2 * MIB))
        except ConfigError as error:
            raise SettingsError(str(error)) from error

    @property
    def metadata_database_url(self) -> str:
        if self.database_url:
            return self.database_url
        return sqlite_database_url(StorePaths(self.data_dir).metadata_database)

    @property
    def auth_open(self) -> bool:
        return not self.auth_tokens

    def public_view(self) -> dict[str, Any]:
        """The settings that matter to an operator, without secrets (for /admin/broker)."""
        hidden = {"auth_tokens", "ha_secret", "master_auth_token", "database_url",
                  "dledger_secret"}
        view = self.model_dump(mode="json", exclude=hidden)
        view["auth"] = "open" if self.auth_open else f"{len(self.auth_tokens)} token(s)"
        view["ha_secret_set"] = self.ha_secret is not None
        view["dledger_secret_set"] = self.dledger_secret is not None
        return view


def _env_config_file() -> Path | None:
    value = os.environ.get(CONFIG_FILE_VARIABLE)
    return Path(value) if value else None


@contextmanager
def _using_config_file(config_file: Path | None) -> Iterator[None]:
    token = _config_file.set(config_file)
    try:
        yield
    finally:
        _config_file.reset(token)


def load_settings(config_file: Path | None = None, **overrides: Any) -> Settings:
    """Settings from overrides, env and the TOML file; SettingsError names what is wrong."""
    if config_file is not None and not config_file.is_file():
        raise SettingsError(f"config file {config_file} does not exist")
    try:
        with _using_config_file(config_file):
            return Settings(**overrides)
    except ValidationError as error:
        raise SettingsError(describe_validation_error(error)) from error


def describe_validation_error(error: ValidationError) -> str:
    """One line per problem, each starting with the setting's name."""
    lines = []
    for problem in error.errors(include_url=False):
        location = ".".join(str(part) for part in problem["loc"])
        message = str(problem["msg"]).removeprefix("Value error, ")
        lines.append(f"{location}: {message}" if location else message)
    return "; ".join(lines)
