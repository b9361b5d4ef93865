"""Replication settings (RocketMQ's defaults, reference section 2); units in every name."""

from __future__ import annotations

from dataclasses import dataclass

from store.errors import ConfigError
from store.status import BrokerRole

MIB = 1 << 20


@dataclass(frozen=True, slots=True)
class HAConfig:
    broker_role: BrokerRole = BrokerRole.ASYNC_MASTER
    ha_listen_host: str = "127.0.0.1"
    ha_listen_port: int = 10912
    ha_master_address: str | None = None  # "host:port", for a SLAVE
    ha_transfer_batch_size_bytes: int = 32 * 1024
    ha_send_heartbeat_interval_ms: int = 5000
    ha_housekeeping_interval_ms: int = 20_000
    ha_reconnect_interval_ms: int = 5000
    ha_connect_timeout_ms: int = 3000
    ha_slave_fall_behind_bytes_max: int = 256 * MIB
    ha_connections_max: int = 16  # slots, given only to slaves that finished the handshake
    ha_handshakes_max: int = 8  # connections still in the handshake, bounded apart from slots
    ha_handshake_timeout_ms: int = 2000
    ha_secret: str | None = None
    # Without a secret anyone who reaches the HA port can read the log and acknowledge puts;
    # running so must be asked for by name.
    ha_allow_unauthenticated: bool = False
    ha_diff_log_interval_s: float = 60.0
    ha_diff_samples_max: int = 10_000
    slave_timeout_ms: int = 3000
    in_sync_replicas: int = 2

    def __post_init__(self) -> None:
        checks: list[tuple[bool, str, str]] = [
            (0 <= self.ha_listen_port < 65536, "ha_listen_port", "must be in [0, 65535]"),
            (4096 <= self.ha_transfer_batch_size_bytes <= 4 * MIB,
             "ha_transfer_batch_size_bytes", "must be in [4096, 4 MiB]"),
            (self.ha_send_heartbeat_interval_ms > 0, "ha_send_heartbeat_interval_ms", "> 0"),
            (self.ha_housekeeping_interval_ms > self.ha_send_heartbeat_interval_ms,
             "ha_housekeeping_interval_ms", "must be > ha_send_heartbeat_interval_ms"),
            (self.ha_reconnect_interval_ms > 0, "ha_reconnect_interval_ms", "must be > 0"),
            (self.ha_connect_timeout_ms > 0, "ha_connect_timeout_ms", "must be > 0"),
            (self.ha_slave_fall_behind_bytes_max > 0, "ha_slave_fall_behind_bytes_max", "> 0"),
            (1 <= self.ha_connections_max <= 1024, "ha_connections_max", "in [1, 1024]"),
            (1 <= self.ha_handshakes_max <= 1024, "ha_handshakes_max", "in [1, 1024]"),
            (0 < self.ha_handshake_timeout_ms <= 60_000, "ha_handshake_timeout_ms",
             "must be in (0, 60000]"),
            (self.slave_timeout_ms > 0, "slave_timeout_ms", "must be > 0"),
            (2 <= self.in_sync_replicas <= self.ha_connections_max + 1, "in_sync_replicas",
             "must be in [2, ha_connections_max + 1] (the master counts as one)"),
            (self.ha_diff_log_interval_s > 0, "ha_diff_log_interval_s", "must be > 0"),
            (self.ha_diff_samples_max >= 1, "ha_diff_samples_max", "must be >= 1"),
            (self.ha_secret is None or len(self.ha_secret) >= 8, "ha_secret",
             "must be at least 8 characters"),
            (self.broker_role is not BrokerRole.SLAVE or bool(self.ha_master_address),
             "ha_master_address", "is required for a SLAVE"),
        ]
        for ok, name, rule in checks:
            if not ok:
                raise ConfigError(f"{name}: {rule} (got {getattr(self, name)!r})")
        if self.ha_master_address:
            host, _, port = self.ha_master_address.rpartition(":")
            if not host or not port.isdigit() or not 0 < int(port) < 65536:
                raise ConfigError(
                    f"ha_master_address: expected host:port (got {self.ha_master_address!r})")

    def check_authentication(self) -> None:
        """Refuse an open HA link unless asked for by name. Checked when replication is
        built, not when settings load, so tools that only read settings (the OpenAPI
        export) need no secret."""
        if self.ha_secret is None and not self.ha_allow_unauthenticated:
            raise ConfigError(
                "ha_secret: is required: set a shared secret on the master and its slaves, or "
                "set ha_allow_unauthenticated to run the HA link open (anyone who reaches the "
                "port can then read the log and acknowledge puts)")

    @property
    def slaves_needed(self) -> int:
        return self.in_sync_replicas - 1

    @property
    def master_host_port(self) -> tuple[str, int]:
        assert self.ha_master_address
        host, _, port = self.ha_master_address.rpartition(":")
        return host, int(port)

    @property
    def secret_bytes(self) -> bytes | None:
        return self.ha_secret.encode() if self.ha_secret else None
