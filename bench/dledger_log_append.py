"""The stored log's CPU per entry, single-threaded, no network (bench/dledger.py log-append).

Three write paths over N 100-byte messages, each timed on its own fresh store, all in one run:

(a) the baseline: `MessageStore.put_message` on a SYNC_MASTER store, as the classic leader
    puts (its replication wait is network time, left out here as it is for DLedger);
(b) the DLedger leader: `StoredLog.encode` then `StoredLog.append` of that record, as the
    host does for a client append;
(c) the DLedger follower: `StoredLog.append` of the entries taken from (b)'s log, one call
    per entry.

Every store is commit-limited (nothing committed, so nothing dispatched): the three figures
are the write path only, not consume-queue dispatch running beside it. Each path is run
`rounds` times on fresh directories; the best round counts (the machine is shared).
"""

from __future__ import annotations

import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from bench.common import header, row
from ha.dledger.messages import Entry
from ha.dledger.stored_log import StoredLog
from ha.dledger.stored_storage import StoredDLedgerStorage
from store import BrokerRole, MessageStore, PutMessageStatus, StoreConfig
from store import Message as StoreMessage

BODY = b"x" * 100
FILE_SIZE_BYTES = 64 << 20


def _config(data_dir: Path, role: BrokerRole = BrokerRole.SLAVE) -> StoreConfig:
    return StoreConfig(data_dir=data_dir, mapped_file_size_bytes=FILE_SIZE_BYTES,
                       broker_role=role)


def _messages(count: int) -> list[StoreMessage]:
    return [StoreMessage("Bench", BODY) for _ in range(count)]


def store_put_s(data_dir: Path, messages: list[StoreMessage]) -> float:
    """(a): seconds for the classic put of every message."""
    store = MessageStore(_config(data_dir, BrokerRole.SYNC_MASTER), commit_limited=True)
    store.start()
    try:
        started = time.perf_counter()
        for message in messages:
            result, _ = store.put_message(message)
            if result.status is not PutMessageStatus.PUT_OK:
                raise RuntimeError(f"a put answered {result.status.value}")
        return time.perf_counter() - started
    finally:
        store.shutdown()


def _timed_log(data_dir: Path, run: Callable[[StoredLog], None]) -> float:
    storage = StoredDLedgerStorage(_config(data_dir))
    _, log = storage.open()
    try:
        started = time.perf_counter()
        run(log)
        return time.perf_counter() - started
    finally:
        storage.close()


def leader_append_s(data_dir: Path, messages: list[StoreMessage],
                    entries: list[Entry]) -> float:
    """(b): seconds to encode and append every message; `entries` gets what was appended."""

    def run(log: StoredLog) -> None:
        for message in messages:
            payload = log.encode(message)
            assert isinstance(payload, bytes), payload
            entry = Entry(log.last_index + 1, 1, payload)
            log.append(entry)
            entries.append(entry)

    return _timed_log(data_dir, run)


def follower_append_s(data_dir: Path, entries: list[Entry]) -> float:
    """(c): seconds to append the leader's entries one by one."""

    def run(log: StoredLog) -> None:
        for entry in entries:
            log.append(entry)

    return _timed_log(data_dir, run)


def log_append(count: int, rounds: int = 3) -> None:
    header(f"stored log CPU per entry, {count:,} messages of {len(BODY)} B, one thread, "
           f"best of {rounds}")
    messages = _messages(count)
    best: dict[str, float] = {}
    for round_number in range(rounds):
        root = Path(tempfile.mkdtemp(prefix="twinlog-bench-log-append-"))
        try:
            entries: list[Entry] = []
            figures = {
                "store": store_put_s(root / "store", messages),
                "leader": leader_append_s(root / "leader", messages, entries),
                "follower": follower_append_s(root / "follower", entries),
            }
        finally:
            shutil.rmtree(root, ignore_errors=True)
        for name, seconds in figures.items():
            best[name] = min(best.get(name, seconds), seconds)
        print(f"    round {round_number + 1}: " + ", ".join(
            f"{name} {seconds / count * 1e6:.2f} us" for name, seconds in figures.items()))
    baseline_us = best["store"] / count * 1e6
    row("(a) MessageStore.put_message (baseline)", baseline_us, "us/entry")
    row("(b) leader: encode + StoredLog.append", best["leader"] / count * 1e6, "us/entry",
        baseline_us)
    row("(c) follower: StoredLog.append per entry", best["follower"] / count * 1e6,
        "us/entry", baseline_us)
