"""DLedgerCommitLog: a broker's write path in DLedger mode (RocketMQ's DLedgerCommitLog).

It owns one group member (ha/dledger/host/server.py: the peer transport and the host loop) over the
broker's own store (StoredDLedgerStorage, commit-limited: reads, dispatch and snapshots stop
at the committed position). A put is one host append: the record is encoded on the host
thread at the log's end (StoredLog.encode), replicated, and answered once the node decides
(committed, refused or indeterminate: ha/dledger/core/put_status.py). Nothing here blocks: a put
returns a `DLedgerPut` whose future completes on the host thread.
"""

from __future__ import annotations

import socket
import struct
from collections import Counter
from collections.abc import Callable, Generator, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from ha.dledger.core.actions import TransferStatus
from ha.dledger.core.put_status import put_status_of
from ha.dledger.host.append_future import AppendFuture
from ha.dledger.host.host import AppendResult, HostState
from ha.dledger.host.host_config import HostConfig
from ha.dledger.host.host_status import HostStatus
from ha.dledger.host.server import DLedgerServer
from ha.dledger.host.transport_config import TransportConfig
from ha.dledger.stored.stored_storage import StoredDLedgerStorage
from store.message_store import MessageStore
from store.record import Message
from store.status import PutMessageResult, PutMessageStatus
from store.waits.completion import await_decision
from store.waits.once import Once

# A record holds its body plus the topic and at most 32 KiB of properties and a fixed header.
_RECORD_OVERHEAD_BYTES_MAX = 64 * 1024
# Where a record lies, from the start of its header (store/record.py's HEADER): TOTALSIZE,
# (MAGIC, BODYCRC), QUEUEID, (FLAG), QUEUEOFFSET, PHYSICALOFFSET. Read from a record the leader
# encoded itself, so unchecked: a put's answer needs these four fields, not the whole head.
_PLACE = struct.Struct(">i8xi4xqq")


class RecordRefused(Exception):  # noqa: N818 (a refusal carried through the future)
    """The leader refused to encode the message (StoredLog.encode): nothing was appended."""

    def __init__(self, status: PutMessageStatus, detail: str) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail


@dataclass(slots=True)
class PutCounts:
    """Puts answered by this member, by status, and the record bytes of the stored ones (the
    store's own counters count its direct puts, which DLedger mode never makes)."""

    by_status: Counter[PutMessageStatus] = field(default_factory=Counter)
    stored_bytes_total: int = 0

    def record(self, result: PutMessageResult, status: PutMessageStatus) -> None:
        self.by_status[status] += 1
        if status.is_stored:
            self.stored_bytes_total += result.wrote_bytes


@dataclass(slots=True)
class DLedgerPut:
    """One put in flight: `future` completes on the host thread; then `outcome()`."""

    store_host: bytes
    counts: PutCounts
    record: bytes | None = field(default=None)  # set by the encode, on the host thread
    future: AppendFuture[AppendResult] = field(init=False)  # host.append's, set by put()
    # True once the record is encoded at the leader's log end (in its log while it leads that
    # term), False when the put ended without that: decided before `future` is.
    encoded: Once[bool] = field(default_factory=Once)
    _outcome: tuple[PutMessageResult, PutMessageStatus] | None = None

    def __await__(self) -> Generator[Any, None, tuple[PutMessageResult, PutMessageStatus]]:
        """`await put` in asyncio code: the outcome once decided. Through the loop's mailbox,
        as the classic puts (store/waits/completion.py): a commit that completes many puts wakes the
        loop once, where `asyncio.wrap_future` would wake it once a put."""
        if not self.future.done():
            # The decided value itself is not needed here: outcome() reads the future.
            yield from await_decision(self.future.add_callback)
        return self.outcome()

    @property
    def end_offset(self) -> int | None:
        """Where its record ends in the commit log, once encoded."""
        if self.record is None:
            return None
        total_size, _, _, commit_log_offset = _PLACE.unpack_from(self.record)
        return int(commit_log_offset + total_size)

    def outcome(self) -> tuple[PutMessageResult, PutMessageStatus]:
        """The put's result and status (counted once); call once `future` is done."""
        if self._outcome is None:
            self._outcome = self._decide()
            self.counts.record(*self._outcome)
        return self._outcome

    def _decide(self) -> tuple[PutMessageResult, PutMessageStatus]:
        error = self.future.exception()
        if isinstance(error, RecordRefused):
            return PutMessageResult(error.status, detail=error.detail), error.status
        if error is not None:
            raise error
        status, detail = put_status_of(self.future.result().status)
        if not status.is_stored or self.record is None:
            return PutMessageResult(status, detail=detail), status
        total_size, queue_id, queue_offset, commit_log_offset = _PLACE.unpack_from(self.record)
        return PutMessageResult(status, queue_id, queue_offset, commit_log_offset, total_size,
                                self.store_host, detail), status


class DLedgerCommitLog:
    def __init__(self, store: MessageStore, transport_config: TransportConfig,
                 host_config: HostConfig, listener: socket.socket) -> None:
        """`store` is built commit-limited and not started (the member's storage starts it);
        `listener` a bound socket for the member's DLedger port."""
        self.store = store
        self.storage = StoredDLedgerStorage(store.config, store=store)
        entry_bytes_max = store.config.message_size_max_bytes + _RECORD_OVERHEAD_BYTES_MAX
        self.server = DLedgerServer(transport_config, host_config, self.storage, listener,
                                    entry_payload_bytes_max=entry_bytes_max)
        self.self_id = transport_config.self_id
        self._store_host = store.config.store_host_bytes
        self.put_counts = PutCounts()

    @property
    def listen_port(self) -> int:
        return self.server.transport.listen_port

    def start(self) -> None:
        """Recover the log (the store starts here), then join the group."""
        try:
            self.server.start()
        except BaseException:
            self.server.transport.stop()  # a failed recovery leaves no thread or port behind
            raise

    @property
    def is_started(self) -> bool:
        return self.server.host.state is HostState.RUNNING

    def stop(self) -> None:
        """Answer every pending put, leave the group, then close the store cleanly."""
        self.server.stop()

    def status(self) -> HostStatus:
        return self.server.host.status()

    def leading_term(self) -> int | None:
        return self.server.host.leading_term()

    @property
    def is_leader(self) -> bool:
        return self.leading_term() is not None

    def put(self, message: Message, term: int | None = None,
            after: DLedgerPut | None = None,
            guard: Callable[[], str | None] | None = None) -> DLedgerPut:
        """Append `message`. Given `term`, only while this member leads that term (a writer
        whose decisions belong to one term, the timer scheduler, is fenced by it); given
        `after` (a put made just before), only when that one was encoded: a run of puts is
        then appended as a prefix, never with a hole (encodes run in order on the host
        thread); given `guard`, only while it answers None (asked on the host thread right
        before the encode, after every earlier append was answered: a writer that learned
        there that an earlier record of its was not written refuses what it decided from
        it; the answer is the refusal's detail)."""
        put = DLedgerPut(self._store_host, self.put_counts)
        storage = self.storage

        def encode() -> bytes:  # on the host thread, only while the log is open
            if after is not None and after.record is None:
                raise RecordRefused(PutMessageStatus.SERVICE_NOT_AVAILABLE,
                                    "a put before this one in its run was not appended")
            refusal = guard() if guard is not None else None
            if refusal is not None:
                raise RecordRefused(PutMessageStatus.SERVICE_NOT_AVAILABLE, refusal)
            encoded = storage.log.encode(message)
            if isinstance(encoded, tuple):
                raise RecordRefused(*encoded)
            put.record = encoded
            put.encoded.set(True)
            return encoded

        put.future = self.server.host.append(encode, term)

        def decided(_value: object) -> None:
            put.encoded.set(put.record is not None)

        put.future.add_callback(decided)
        return put

    def put_run(self, count: int,
                build: Callable[[dict[tuple[str, int], int]], Sequence[Message] | str],
                term: int) -> list[DLedgerPut]:
        """`count` records appended as consecutive entries of `term` (nothing between them),
        built on the host thread right before the first is encoded, from every queue's next
        queue offset there (StoredLog.next_queue_offsets): a metadata snapshot, whose queue
        starts must be those at its place in the log. `build` answers exactly `count`
        messages, or why it cannot (every put refused, nothing appended). A put whose
        predecessor was not appended is refused too: the log holds a prefix of the run."""
        puts = [DLedgerPut(self._store_host, self.put_counts) for _ in range(count)]
        storage = self.storage
        built: list[Message] = []

        def encoder(position: int) -> Callable[[], bytes]:
            def encode() -> bytes:  # on the host thread, in order
                if position == 0:
                    messages = build(storage.log.next_queue_offsets())
                    if isinstance(messages, str):
                        raise RecordRefused(PutMessageStatus.SERVICE_NOT_AVAILABLE, messages)
                    assert len(messages) == count, (len(messages), count)
                    built.extend(messages)
                elif puts[position - 1].record is None:
                    raise RecordRefused(PutMessageStatus.SERVICE_NOT_AVAILABLE,
                                        "a put before this one in its run was not appended")
                encoded = storage.log.encode(built[position])
                if isinstance(encoded, tuple):
                    raise RecordRefused(*encoded)
                puts[position].record = encoded
                return encoded
            return encode

        futures = self.server.host.append_run([encoder(n) for n in range(count)], term)
        for put, future in zip(puts, futures, strict=True):
            put.future = future
        return puts

    def transfer_leadership(self, target_id: str) -> Future[TransferStatus]:
        return self.server.host.transfer_leadership(target_id)
