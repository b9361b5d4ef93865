"""The store's settings: names carry units; a bad combination is refused naming the setting."""

from __future__ import annotations

import socket
import struct
from dataclasses import dataclass, field
from pathlib import Path

from store.errors import ConfigError
from store.record import END_FILE_MIN_BLANK_LENGTH, RECORD_OVERHEAD
from store.status import BrokerRole, FlushDiskType
from store.timers.lanes import TimerPlan
from store.topic import TOPIC_LENGTH_MAX

GIB = 1 << 30
MIB = 1 << 20
CONSUME_QUEUE_ENTRY_SIZE_BYTES = 20


@dataclass(frozen=True, slots=True)
class StoreConfig:
    data_dir: Path
    broker_role: BrokerRole = BrokerRole.ASYNC_MASTER
    flush_disk_type: FlushDiskType = FlushDiskType.ASYNC_FLUSH
    mapped_file_size_bytes: int = GIB
    consume_queue_entries_per_file: int = 300_000
    # Consume-queue files mapped at once (2 descriptors each); idle queues are closed past it.
    # 512 descriptors: well inside the usual soft limit of 1024, with room for connections.
    consume_queue_open_files_max: int = 256
    message_size_max_bytes: int = 4 * MIB
    flush_interval_ms: int = 500
    flush_consume_queue_interval_ms: int = 1000
    sync_flush_timeout_ms: int = 5000
    max_pending_puts: int = 10_000
    default_queue_count: int = 4
    queue_count_max: int = 1024
    file_reserved_hours: float = 72.0
    disk_max_used_ratio: float = 0.75
    retention_interval_ms: int = 10_000
    store_host: tuple[str, int] = ("127.0.0.1", 10911)
    check_crc_on_recover: bool = True
    # The encoded forms of records consume reads keep (store/encoded_reads.py), in bytes.
    encoded_records_bytes_max: int = 32 * MIB
    # Long-poll readers parked at once (each holds a connection open); past it, no wait.
    long_poll_waiters_max: int = 4096
    # Key index files: hash slots and entries per file (4 and 24 bytes each, reserved whole).
    key_index_slot_count: int = 250_000
    key_index_entries_per_file: int = 1_000_000
    # Free space the commit log leaves on the disk when it creates a file: what the consume
    # queues and indexes of the messages it acknowledged need, so that no acknowledged message
    # goes unindexed for want of space (about a fifth of a file of the smallest records).
    disk_reserve_bytes: int = 64 * MIB
    # Consume-queue files (6 MB at 300,000 entries) reserve blocks in steps of this many bytes,
    # not whole: one message to each of thousands of queues takes one step each.
    consume_queue_reserve_step_bytes: int = 16 * 1024
    # Delay levels and timer lanes (store/timers/lanes.py).
    timers: TimerPlan = field(default_factory=TimerPlan)
    extra: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        record_size_max = RECORD_OVERHEAD + TOPIC_LENGTH_MAX + 32767 + self.message_size_max_bytes
        checks: list[tuple[bool, str, str]] = [
            (self.mapped_file_size_bytes >= 4096, "mapped_file_size_bytes", "must be >= 4096"),
            (
                self.mapped_file_size_bytes >= record_size_max + END_FILE_MIN_BLANK_LENGTH,
                "mapped_file_size_bytes",
                f"must hold the largest record ({record_size_max} bytes for "
                f"message_size_max_bytes={self.message_size_max_bytes}) plus the end marker",
            ),
            (self.consume_queue_entries_per_file >= 1, "consume_queue_entries_per_file", ">= 1"),
            (self.disk_reserve_bytes >= 0, "disk_reserve_bytes", "must be >= 0"),
            (self.consume_queue_reserve_step_bytes >= 4096, "consume_queue_reserve_step_bytes",
             "must be >= 4096"),
            (self.consume_queue_open_files_max >= 1, "consume_queue_open_files_max", ">= 1"),
            (self.message_size_max_bytes >= 0, "message_size_max_bytes", "must be >= 0"),
            (self.flush_interval_ms > 0, "flush_interval_ms", "must be > 0"),
            (self.flush_consume_queue_interval_ms > 0, "flush_consume_queue_interval_ms", "> 0"),
            (self.sync_flush_timeout_ms > 0, "sync_flush_timeout_ms", "must be > 0"),
            (self.max_pending_puts >= 1, "max_pending_puts", "must be >= 1"),
            (1 <= self.default_queue_count <= self.queue_count_max, "default_queue_count",
             f"must be in [1, queue_count_max={self.queue_count_max}]"),
            (self.file_reserved_hours > 0, "file_reserved_hours", "must be > 0"),
            (0 < self.disk_max_used_ratio <= 1, "disk_max_used_ratio", "must be in (0, 1]"),
            (self.retention_interval_ms > 0, "retention_interval_ms", "must be > 0"),
            (0 <= self.store_host[1] < 65536, "store_host", "port must be in [0, 65535]"),
            (self.long_poll_waiters_max >= 0, "long_poll_waiters_max", "must be >= 0"),
            (self.encoded_records_bytes_max >= 0, "encoded_records_bytes_max", "must be >= 0"),
            (1 <= self.key_index_slot_count <= 2**31, "key_index_slot_count",
             "must be in [1, 2**31]"),
            (1 <= self.key_index_entries_per_file < 2**32 - 1, "key_index_entries_per_file",
             "must be in [1, 2**32 - 1)"),
        ]
        for ok, name, rule in checks:
            if not ok:
                raise ConfigError(f"{name}: {rule} (got {getattr(self, name)!r})")
        try:
            socket.inet_aton(self.store_host[0])
        except OSError as error:
            raise ConfigError(
                f"store_host: {self.store_host[0]!r} is not an IPv4 address"
            ) from error

    @property
    def consume_queue_file_size_bytes(self) -> int:
        return self.consume_queue_entries_per_file * CONSUME_QUEUE_ENTRY_SIZE_BYTES

    @property
    def store_host_bytes(self) -> bytes:
        """The 8-byte STOREHOST field: IPv4 address and port."""
        return socket.inet_aton(self.store_host[0]) + struct.pack(">i", self.store_host[1])
