"""A forward offset commit is shown before dispatch applies its record (app/broker/
metadata_log.py, store/metadata/offset_table.py), on real stores and the real MetadataStore:
its answer does not wait for the apply, nothing of it is persisted before the apply, and a cut
of the log that removes its record takes it back.

The seam: the metadata layer is attached through a gate that refuses records while it is
closed (an apply that fails leaves dispatch at that record and retries), so the record stays
appended and unapplied for as long as a test needs, without sleeps."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from app.broker.metadata_log import MetadataLog, MetadataWriteFailed, record_of
from store import BrokerRole, MessageStore, PutMessageStatus
from store.dispatch import SystemRecord
from store.metadata import MetadataStore, MetadataTable, store_log
from store.metadata.log_records import (
    GroupPut,
    MetadataChange,
    OffsetSet,
    TopicPut,
    decode,
    encode,
    op_of,
)
from tests.support.store import wait_dispatched, wait_until

# Short: on the old code the answer waited this long for an apply the gate never lets through.
APPLY_TIMEOUT_MS = 300


class Gate:
    """Dispatch's hand-off to the tables, refused while closed."""

    def __init__(self, store: MessageStore, metadata: MetadataStore) -> None:
        self._store = store
        self._metadata = metadata
        self.closed = threading.Event()

    def __call__(self, record: SystemRecord) -> None:
        if self.closed.is_set():
            raise RuntimeError("held by the test")
        self._metadata.apply_record(record)

    def open(self) -> None:
        """Let records through, and dispatch try again now: after a refused round it waits
        up to 1 s for a wake (how it retries by itself is test_system_records')."""
        self.closed.clear()
        self._store.dispatch.wake()


@pytest.fixture
def master(open_store: Callable[..., MessageStore], tmp_path: Path) -> MessageStore:
    return open_store(data_dir=tmp_path / "master", broker_role=BrokerRole.ASYNC_MASTER)


def _attached(store: MessageStore, metadata: MetadataStore) -> tuple[Gate, MetadataLog]:
    """The tables attached through a gate, the group g committed at 1 in T/0 (applied), and
    the metadata log of a classic broker."""
    gate = Gate(store, metadata)
    applied = metadata.log_position
    store.attach_system_records(gate, applied.queue_offset, applied.commit_log_offset,
                                reset=metadata.reset_applied_state, cut=metadata.cut_ahead)
    changes: list[MetadataChange] = [TopicPut("T", 1, 1, 6, 1, 1),
                                     GroupPut("g", True, False, 1, 16, 1, 1),
                                     OffsetSet("g", "T", 0, 1, False, 1)]
    for change in changes:
        result, _ = store.put_system_message(record_of(change))
        assert result.status is PutMessageStatus.PUT_OK
    wait_dispatched(store)
    log = MetadataLog(store, apply_timeout_ms=APPLY_TIMEOUT_MS)
    log.apply_ahead = metadata.apply_ahead
    return gate, log


def _committed_5_held(store: MessageStore, metadata: MetadataStore) -> tuple[Gate, int]:
    """g's commit of 5 in T/0 answered PUT_OK with its apply held (the gate closed) and
    shown, and where its record begins; the old code waited for the apply and raised
    MetadataWriteFailed (SERVICE_NOT_AVAILABLE) after the timeout."""
    gate, log = _attached(store, metadata)
    gate.closed.set()
    record_offset = store.max_offset
    assert log.write_blocking([OffsetSet("g", "T", 0, 5, False, 2)]).status is \
        PutMessageStatus.PUT_OK
    assert _offset(metadata) == 5
    return gate, record_offset


def _stored_offsets(metadata: MetadataStore) -> list[tuple[str, str, int, int]]:
    """The offsets the database holds (the export flushes first)."""
    rows = metadata.export_table(MetadataTable.CONSUMER_OFFSET)["rows"]
    return [(row["group_name"], row["topic"], row["queue_id"], row["queue_offset"])
            for row in rows]


def _offset(metadata: MetadataStore) -> int | None:
    return metadata.get_consumer_offset(group_name="g", topic="T", queue_id=0)


def test_a_forward_commit_is_answered_and_shown_before_its_apply(
        master: MessageStore, metadata: MetadataStore) -> None:
    """With its apply held, the commit answers PUT_OK at once (the old code waited for the
    apply and answered SERVICE_NOT_AVAILABLE after the timeout) and readers see it; the
    database and the persisted position do not have it until dispatch applies the record,
    and then they do."""
    gate, _ = _committed_5_held(master, metadata)
    assert [o.queue_offset for o in metadata.list_consumer_offsets(group_name="g")] == [5]
    assert _stored_offsets(metadata) == [("g", "T", 0, 1)]  # flushed: only what applied
    assert metadata.log_position.queue_offset == 3  # the three records before it
    gate.open()
    wait_until(lambda: metadata.log_position.queue_offset == 4)
    assert _offset(metadata) == 5
    assert _stored_offsets(metadata) == [("g", "T", 0, 5)]


def test_a_cut_that_removes_the_record_takes_the_commit_back(
        master: MessageStore, metadata: MetadataStore) -> None:
    """The master is demoted and cut back (to agree with a new master) below the commit's
    record before its apply: what readers saw goes with the record, and nothing of it was
    persisted."""
    gate, record_offset = _committed_5_held(master, metadata)
    master.change_role(BrokerRole.SLAVE)
    master.truncate_log(record_offset)
    assert _offset(metadata) == 1
    gate.open()
    wait_dispatched(master)
    assert _offset(metadata) == 1
    assert _stored_offsets(metadata) == [("g", "T", 0, 1)]


def test_a_reset_still_waits_for_its_apply(master: MessageStore,
                                            metadata: MetadataStore) -> None:
    """Only forward commits are shown ahead: a reset (either direction) is answered once
    applied, so with its apply held it is not shown and its answer times out."""
    gate, log = _attached(master, metadata)
    gate.closed.set()
    with pytest.raises(MetadataWriteFailed) as failed:
        log.write_blocking([OffsetSet("g", "T", 0, 0, True, 2)])
    assert failed.value.outcome.status is PutMessageStatus.SERVICE_NOT_AVAILABLE
    assert _offset(metadata) == 1
    gate.open()
    wait_until(lambda: _offset(metadata) == 0)


def test_a_commit_shown_ahead_gives_way_to_a_greater_one_applied(
        master: MessageStore, metadata: MetadataStore) -> None:
    """Two commits of one queue from two connections, the greater one appended first: each
    answer reads the greater offset, before and after both applies (forward only)."""
    gate, log = _attached(master, metadata)
    gate.closed.set()
    log.write_blocking([OffsetSet("g", "T", 0, 7, False, 2)])
    log.write_blocking([OffsetSet("g", "T", 0, 6, False, 3)])
    assert _offset(metadata) == 7
    gate.open()
    wait_dispatched(master)
    wait_until(lambda: metadata.log_position.queue_offset == 5)
    assert _offset(metadata) == 7
    assert _stored_offsets(metadata) == [("g", "T", 0, 7)]


def test_the_apply_of_a_commit_shown_ahead_takes_its_change_without_decoding(
        master: MessageStore, metadata: MetadataStore,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Dispatch on the broker that appended the commits applies the changes it kept for
    them (every replica decodes each record; this one wrote it): no decode for the two
    commits, one for the reset, which is not shown ahead."""
    gate, log = _attached(master, metadata)
    decoded: list[str] = []

    def counting(op: str, body: bytes) -> MetadataChange:
        decoded.append(op)
        return decode(op, body)

    monkeypatch.setattr(store_log, "decode", counting)
    gate.closed.set()
    log.write_blocking([OffsetSet("g", "T", 0, 5, False, 2)])
    log.write_blocking([OffsetSet("g", "T", 0, 6, False, 3)])
    gate.open()
    wait_until(lambda: metadata.log_position.queue_offset == 5)
    assert decoded == [] and _offset(metadata) == 6
    # The default timeout: this test's is short for the ones that expect it to pass.
    MetadataLog(master).write_blocking([OffsetSet("g", "T", 0, 2, True, 4)])
    assert len(decoded) == 1 and _offset(metadata) == 2


class _GrownWhileIterated(dict[int, OffsetSet]):
    """The kept changes, with a seam: once, when dispatch iterates them, `step` runs (the
    appender on another thread, as it can run on the event loop at any moment)."""

    step: Callable[[], None] | None = None

    def __iter__(self):  # type: ignore[no-untyped-def]
        iterator = super().__iter__()
        step, self.step = self.step, None
        if step is not None:
            step()
        return iterator


def test_dispatch_drops_kept_changes_while_the_appender_keeps_one(
        metadata: MetadataStore) -> None:
    """Dispatch drops a kept change whose record it passed first while the appender keeps
    the next commit: neither sees the other's half-done work (on the old code the appender
    grew the dict dispatch was iterating: RuntimeError, and dispatch failed for a second)."""
    for offset, change in enumerate([TopicPut("T", 1, 1, 6, 1, 1),
                                     GroupPut("g", True, False, 1, 16, 1, 1)]):
        metadata.apply_record(SystemRecord(offset * 100, offset, op_of(change),
                                           encode(change)))
    kept = _GrownWhileIterated()
    metadata._appended = kept  # the seam; what the appender keeps goes in it
    metadata.apply_ahead(OffsetSet("g", "T", 0, 3, False, 2), 1000)  # passed by dispatch
    appender = threading.Thread(target=metadata.apply_ahead,
                                args=(OffsetSet("g", "T", 0, 5, False, 3), 3000))

    def keep_the_next_commit() -> None:
        appender.start()
        appender.join(0.5)  # on the old code it is done at once; now it waits for dispatch

    kept.step = keep_the_next_commit
    applied = OffsetSet("g", "T", 0, 4, False, 2)
    metadata.apply_record(SystemRecord(2000, 2, op_of(applied), encode(applied)))
    appender.join(5)
    assert not appender.is_alive()
    assert list(kept) == [3000]
    assert metadata.get_consumer_offset(group_name="g", topic="T", queue_id=0) == 5
