"""The stored log's CPU per entry, single-threaded, no network (bench/dledger.py log-append).

Four write paths over N 100-byte messages, each timed on its own fresh store, all in one run:

(a) the baseline: `MessageStore.put_message` on a SYNC_MASTER store, as the classic leader
    puts (its replication wait is network time, left out here as it is for DLedger);
(b) the DLedger leader: `StoredLog.encode` then `StoredLog.append` of that record, as the
    host does for a client append;
(c) the DLedger follower: `StoredLog.append` of the entries taken from (b)'s log, one call
    per entry;
(d) the same follower path as the node takes it: `StoredLog.append_many` of a push's entries
    (DLedgerConfig's push_entries_max at a time);
(e) the leader as the host takes a round of client appends: `start_encoding`, the round's
    encodes (each record placed after the one before), one `append_many` (ROUND_APPENDS at a
    time, about the run a 64-producer bench hands the node).

Every store is commit-limited (nothing committed, so nothing dispatched): the figures are the
write path only, not consume-queue dispatch running beside it. Each figure is the CPU time of
the bench's thread (`time.thread_time`: the time other processes of a shared machine take
from it does not count, nor the store's own background threads), best of `rounds` runs on
fresh directories.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from bench.common import header, row
from ha.dledger.core.config import DLedgerConfig
from ha.dledger.core.messages import Entry
from ha.dledger.stored.stored_log import StoredLog
from ha.dledger.stored.stored_storage import StoredDLedgerStorage
from store import BrokerRole, MessageStore, PutMessageStatus, StoreConfig
from store import Message as StoreMessage

BODY = b"x" * 100
FILE_SIZE_BYTES = 64 << 20
PUSH_ENTRIES = DLedgerConfig().push_entries_max
ROUND_APPENDS = 32


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
        started = time.thread_time()
        for message in messages:
            result, _ = store.put_message(message)
            if result.status is not PutMessageStatus.PUT_OK:
                raise RuntimeError(f"a put answered {result.status.value}")
        return time.thread_time() - started
    finally:
        store.shutdown()


def _timed_log(data_dir: Path, run: Callable[[StoredLog], None]) -> float:
    storage = StoredDLedgerStorage(_config(data_dir))
    _, log = storage.open()
    try:
        started = time.thread_time()
        run(log)
        return time.thread_time() - started
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


def leader_round_s(data_dir: Path, messages: list[StoreMessage], run_size: int) -> float:
    """(e): seconds to encode and append every message, `run_size` a round."""

    def run(log: StoredLog) -> None:
        for start in range(0, len(messages), run_size):
            log.start_encoding()
            first_index = log.last_index + 1
            payloads = [log.encode(message) for message in messages[start:start + run_size]]
            log.append_many([Entry(first_index + offset, 1, payload)
                             for offset, payload in enumerate(payloads)
                             if isinstance(payload, bytes)])

    return _timed_log(data_dir, run)


def follower_append_s(data_dir: Path, entries: list[Entry]) -> float:
    """(c): seconds to append the leader's entries one by one."""

    def run(log: StoredLog) -> None:
        for entry in entries:
            log.append(entry)

    return _timed_log(data_dir, run)


def follower_append_many_s(data_dir: Path, entries: list[Entry], run_size: int) -> float:
    """(d): seconds to append the leader's entries `run_size` at a time, as a push's."""

    def run(log: StoredLog) -> None:
        for start in range(0, len(entries), run_size):
            log.append_many(entries[start:start + run_size])

    return _timed_log(data_dir, run)


def log_append(count: int, rounds: int = 5) -> None:
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
                "pushes": follower_append_many_s(root / "pushes", entries, PUSH_ENTRIES),
                "rounds": leader_round_s(root / "rounds", messages, ROUND_APPENDS),
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
    row(f"(d) follower: append_many, {PUSH_ENTRIES} per push", best["pushes"] / count * 1e6,
        "us/entry", baseline_us)
    row(f"(e) leader: a round of {ROUND_APPENDS} encodes, one append_many",
        best["rounds"] / count * 1e6, "us/entry", baseline_us)
