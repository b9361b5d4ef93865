"""The broker's settings: `TWINLOG_*` environment variables, an optional TOML file, and flags.

Precedence, highest first: values passed in code (the CLI's flags), environment variables, the
TOML file named by `load_settings(config_file=...)` or `TWINLOG_CONFIG_FILE`, defaults. Names
carry their units. A bad value or combination fails when the settings are built, naming the
setting; nothing here touches the disk beyond reading the TOML file.
"""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import Any, Self
from urllib.parse import urlsplit

from pydantic import Field, ValidationError, field_validator, model_validator
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)

from app.settings.consumption import ConsumptionFields
from app.settings.gateway import GatewayFields
from app.settings.metadata import MetadataFields
from app.settings.replication import ReplicationFields
from app.settings.snapshots import SnapshotFields
from app.settings.storage import StoreFields
from app.settings.values import (
    MIB,
    ReplicationMode,
    SettingsError,
    compact_tokens,
    split_text,
    structured_text,
)
from ha import HAConfig
from ha.dledger.core.peers import Peer, parse_peers
from ha.dledger.host.host_config import HostConfig
from ha.dledger.host.transport_config import TransportConfig
from store import BrokerRole, ConfigError, FlushDiskType, StoreConfig
from store.consumption.policy import Backoff, BackoffKind
from store.metadata import sqlite_database_url
from store.paths import StorePaths
from store.timers.lanes import TimerPlan, parse_delay_levels

CONFIG_FILE_VARIABLE = "TWINLOG_CONFIG_FILE"

_config_file: ContextVar[Path | None] = ContextVar("twinlog_config_file", default=None)


# Pydantic collects fields from the last base to the first: the parts are listed in the reverse
# of the order their settings are documented in (docs/settings.md follows the fields' order).
class Settings(SnapshotFields, ConsumptionFields, MetadataFields, ReplicationFields,
               StoreFields, GatewayFields, BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="TWINLOG_", extra="forbid", validate_default=True, frozen=True
    )

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
            value = structured_text(value, "auth_tokens", compact_tokens)
        if isinstance(value, dict):
            return {token: (split_text(scopes, "+,") if isinstance(scopes, str) else scopes)
                    for token, scopes in value.items()}
        return value

    @field_validator("cors_allow_origins", mode="before")
    @classmethod
    def _decode_origins(cls, value: Any) -> Any:
        if isinstance(value, str):
            return structured_text(value, "cors_allow_origins", lambda text: split_text(text, ","))
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
    def pop_default_backoff(self) -> Backoff:
        """The backoff of a group without its own (`pop_backoff`)."""
        if self.pop_backoff == BackoffKind.TABLE.value:
            return Backoff()
        return Backoff.exponential(self.pop_backoff_initial_ms)

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
