"""Helpers for the store-backed DLedger log tests: small stores, a leader that encodes and
appends, and the commit-log files compared byte for byte."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

from ha.dledger.core.messages import Entry
from ha.dledger.stored.stored_log import StoredLog
from ha.dledger.stored.stored_storage import StoredDLedgerStorage
from store import BrokerRole, Message, StoreConfig
from tests.support.store import small_config

FILE_SIZE_BYTES = 40 * 1024
INDEX_ENTRIES_PER_FILE = 64  # several index files in a test


def dledger_config(data_dir: Path, **overrides: Any) -> StoreConfig:
    settings: dict[str, Any] = {
        "mapped_file_size_bytes": FILE_SIZE_BYTES,
        "message_size_max_bytes": 4096,
        "default_queue_count": 2,
        # Only the tests make bytes durable (sync), apart from the flush thread's first round.
        "flush_interval_ms": 3_600_000,
        "flush_consume_queue_interval_ms": 3_600_000,
        # A member's store is a slave's (app/broker/dledger_member.py): its log is cut back
        # (truncate_log) when a fork is repaired or it is reset to its leader's base.
        "broker_role": BrokerRole.SLAVE,
    }
    settings.update(overrides)
    return small_config(data_dir, **settings)


def open_storage(data_dir: Path, **overrides: Any) -> tuple[StoredDLedgerStorage, StoredLog]:
    storage = StoredDLedgerStorage(dledger_config(data_dir, **overrides),
                                   index_entries_per_file=INDEX_ENTRIES_PER_FILE)
    _, log = storage.open()
    return storage, log


def body(seed: int, size_bytes: int) -> bytes:
    return random.Random(seed).randbytes(size_bytes)


def leader_append(log: StoredLog, term: int, message: Message | None) -> Entry:
    """What the leader's host and node do for one entry: encode, then append (a no-op when
    `message` is None)."""
    payload = b""
    if message is not None:
        encoded = log.encode(message)
        assert isinstance(encoded, bytes), encoded
        payload = encoded
    entry = Entry(log.last_index + 1, term, payload)
    log.append(entry)
    return entry


def commit_log_files(data_dir: Path) -> dict[str, bytes]:
    return {path.name: path.read_bytes()
            for path in sorted((data_dir / "commitlog").iterdir())}
