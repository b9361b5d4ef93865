"""A hypothesis state machine over the store-backed DLedger log: leader appends (encode +
append), follower appends (records built outside the log at the model's own position rule),
truncate, reset, term and vote, commit, sync, clean restart and power cut, across file rolls
of the commit log and of the index.

A power cut (tests/support/power.py) halts the store and drops or keeps each page of every
commit-log, consume-queue and index file that differs from what was made durable. After it
the recovered log must be (1) a prefix of a state the log went through since the last sync,
(2) at least the part of the synced log no truncation or reset touched since, byte for byte,
(3) in agreement with the commit log: every entry's record readable and the commit log ending
at the last record. Readers never see an uncommitted record. TWINLOG_STATEFUL_EXAMPLES sets
the number of examples (default 25).
"""

from __future__ import annotations

import os
import random
import shutil
import tempfile
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import hypothesis.strategies as st
from hypothesis import event, settings
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from ha.dledger.core.messages import Entry
from ha.dledger.stored.placement import next_position
from ha.dledger.stored.stored_log import StoredLog
from ha.dledger.stored.stored_storage import StoredDLedgerStorage
from store import Lifecycle, Message
from store.files import durability
from store.record import encode_message, stamp_offsets
from tests.support.dledger.stored import FILE_SIZE_BYTES, body, dledger_config
from tests.support.examples import MEMORY_DIR
from tests.support.power import DurableImage
from tests.support.store import wait_until

EXAMPLES = int(os.environ.get("TWINLOG_STATEFUL_EXAMPLES", "25"))
INDEX_ENTRIES_PER_FILE = 16  # an index file per 16 entries: rolls often
TOPIC = "Model"
COUNTS: Counter[str] = Counter()

BODY_SIZES = st.one_of(st.integers(0, 64), st.integers(2000, 4000))
BATCH = st.lists(st.tuples(st.integers(0, 1 << 16), BODY_SIZES), min_size=1, max_size=6)


@dataclass(frozen=True, slots=True)
class LogState:
    """What the node sees of its log: the base and the entries after it."""

    base_index: int
    base_term: int
    entries: tuple[Entry, ...]

    @property
    def last_index(self) -> int:
        return self.base_index + len(self.entries)


def _state_of(log: StoredLog) -> LogState:
    return LogState(log.base_index, log.base_term,
                    tuple(log.entry(i) for i in range(log.base_index + 1, log.last_index + 1)))


def _common_prefix(left: LogState, right: LogState) -> int:
    """How many entries after the base the two states share (0 when bases differ)."""
    if (left.base_index, left.base_term) != (right.base_index, right.base_term):
        return 0
    count = 0
    for a, b in zip(left.entries, right.entries, strict=False):
        if a != b:
            break
        count += 1
    return count


class StoredLogMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.root = Path(tempfile.mkdtemp(prefix="twinlog-dlog-", dir=MEMORY_DIR))
        self.image = DurableImage()
        durability.add_listener(self.image)
        self.term = 1
        self.vote: tuple[int, str | None] = (0, None)
        self.committed = 0
        self.queue_offset = 0  # the follower path's own numbering (a leader elsewhere)
        self.highest_offset = 0  # past every record ever written: where a reset restarts
        self.storage, self.log = self._open()
        self.synced = _state_of(self.log)
        self.history = [self.synced]  # every state since the last sync
        self.untouched = 0  # entries of `synced` no truncation or reset removed since

    def _open(self) -> tuple[StoredDLedgerStorage, StoredLog]:
        storage = StoredDLedgerStorage(dledger_config(self.root, default_queue_count=1),
                                       index_entries_per_file=INDEX_ENTRIES_PER_FILE)
        hard_state, log = storage.open()
        assert (hard_state.term, hard_state.voted_for) == self.vote
        return storage, log

    def _changed(self) -> None:
        self.history.append(_state_of(self.log))
        self.highest_offset = max(self.highest_offset, self.storage.store.max_offset)

    # -- rules -----------------------------------------------------------------------------

    @rule(batch=BATCH, noop=st.booleans())
    def leader_append(self, batch: list[tuple[int, int]], noop: bool) -> None:
        if noop:
            self.log.append(Entry(self.log.last_index + 1, self.term, b""))
        for seed, size in batch:
            payload = self.log.encode(Message(TOPIC, body(seed, size)))
            assert isinstance(payload, bytes)
            self.log.append(Entry(self.log.last_index + 1, self.term, payload))
            self.queue_offset += 1
        self._changed()

    @rule(batch=BATCH)
    def follower_append(self, batch: list[tuple[int, int]]) -> None:
        """Records built at the position the model computes, as a leader would send them."""
        end = self.log.end_position
        for seed, size in batch:
            record = encode_message(Message(TOPIC, body(seed, size)), 0, 1, b"\0" * 8, 4096)
            assert isinstance(record, bytes)
            position = next_position(end, len(record), FILE_SIZE_BYTES)
            if position < 0:
                position = self.highest_offset + (-self.highest_offset) % FILE_SIZE_BYTES
            stamped = bytearray(record)
            stamp_offsets(stamped, 0, self.queue_offset, position)
            self.log.append(Entry(self.log.last_index + 1, self.term, bytes(stamped)))
            self.queue_offset += 1
            end = position + len(record)
        self._changed()

    @rule()
    def new_term(self) -> None:
        self.term += 1

    @rule(term_step=st.integers(0, 2), vote=st.sampled_from([None, "n0", "n1"]))
    def persist_term_vote(self, term_step: int, vote: str | None) -> None:
        self.vote = (self.vote[0] + term_step, vote)
        self.storage.persist_term_vote(*self.vote)

    @precondition(lambda self: self.log.last_index > max(self.committed, self.log.base_index))
    @rule(data=st.data())
    def truncate(self, data: st.DataObject) -> None:
        low = max(self.committed, self.log.base_index) + 1
        index = data.draw(st.integers(low, self.log.last_index))
        self.log.truncate_from(index)
        self.untouched = min(self.untouched, index - 1 - self.synced.base_index)
        self._changed()

    @rule(gap=st.integers(0, 3))
    def reset(self, gap: int) -> None:
        """A follower restarting from a leader's base past its own log."""
        base_index = max(self.log.last_index, self.committed) + gap
        self.log.reset(base_index, self.term)
        self.committed = base_index
        self.untouched = 0
        self._changed()

    @rule()
    def sync(self) -> None:
        self.storage.sync()
        self.synced = _state_of(self.log)
        self.history = [self.synced]
        self.untouched = len(self.synced.entries)

    @precondition(lambda self: self.synced.last_index > self.committed)
    @rule(data=st.data())
    def commit(self, data: st.DataObject) -> None:
        """Commit within what is durable and untouched, as a leader's quorum would."""
        last = self.synced.base_index + self.untouched
        if last > self.committed and last > self.log.base_index:
            self.committed = data.draw(st.integers(self.committed + 1, last))
            self.storage.set_committed(self.committed)

    @rule()
    def restart(self) -> None:
        self.storage.close()  # syncs first
        self.sync_model_after_recovery()

    @rule(keep_ratio=st.sampled_from([0.0, 0.0, 0.3, 0.7, 1.0]), seed=st.integers(0, 1 << 32))
    def power_cut(self, keep_ratio: float, seed: int) -> None:
        chooser = random.Random(seed)
        self.storage.halt()
        report = self.image.cut(self.root, lambda _path, _page: chooser.random() < keep_ratio,
                                lambda _path: chooser.random() < keep_ratio)
        self.storage, self.log = self._open()
        recovered = _state_of(self.log)
        assert any(_common_prefix(recovered, state) == len(recovered.entries)
                   and (recovered.base_index, recovered.base_term)
                   == (state.base_index, state.base_term) for state in self.history), \
            "the recovered log is not a prefix of any state since the last sync"
        kept = _common_prefix(recovered, self.synced)
        assert kept >= self.untouched, f"synced entries lost: {kept} < {self.untouched}"
        self._count(recovered, report.dropped_page_count, len(report.files_lost))
        self._after_reopen(recovered)

    def _count(self, recovered: LogState, dropped_pages: int, files_lost: int) -> None:
        """Tally what this cut covered (COUNTS, and hypothesis events)."""
        unsynced = len(self.history) > 1
        labels = ["power cut"]
        if dropped_pages:
            labels.append("pages dropped")
        if files_lost:
            labels.append("a new file lost (its name was not durable)")
        if unsynced:
            labels.append("with unsynced changes")
            if recovered != self.history[-1]:
                labels.append("unsynced changes lost")
            if recovered == self.history[-1] and dropped_pages:
                labels.append("pages dropped, every change kept")
        if self.untouched < len(self.synced.entries):
            labels.append("after a truncate or reset")
        for label in labels:
            COUNTS[label] += 1
            event(label)

    def sync_model_after_recovery(self) -> None:
        self.storage, self.log = self._open()
        recovered = _state_of(self.log)
        assert recovered == self.history[-1], "a clean restart changed the log"
        self._after_reopen(recovered)

    def _after_reopen(self, recovered: LogState) -> None:
        self.synced = recovered
        self.history = [recovered]
        self.untouched = len(recovered.entries)
        if self.committed > self.log.base_index:
            self.storage.set_committed(self.committed)  # the leader tells it again

    # -- invariants ------------------------------------------------------------------------

    @precondition(lambda self: self.storage.store.state is Lifecycle.RUNNING)
    @invariant()
    def commit_log_agrees_with_the_index(self) -> None:
        store = self.storage.store
        if self.log.end_position >= 0:
            assert store.max_offset == self.log.end_position
        for index in range(self.log.base_index + 1, self.log.last_index + 1):
            found = self.log.index_entry(index)
            if found.size_bytes:
                assert store.commit_log.read_record(found.position).total_size \
                    == found.size_bytes

    @precondition(lambda self: self.storage.store.state is Lifecycle.RUNNING)
    @invariant()
    def readers_see_only_committed_records(self) -> None:
        store = self.storage.store
        limit = store.commit_limit
        assert limit is not None
        wait_until(lambda: store.dispatch.dispatched_offset >= min(limit, store.max_offset))
        first = self.log.base_index + 1
        committed_end = min(self.committed, self.log.last_index)
        positions = {index: self.log.index_entry(index).position
                     for index in range(first, self.log.last_index + 1)
                     if self.log.index_entry(index).size_bytes}
        committed = {p for i, p in positions.items() if i <= committed_end}
        uncommitted = {p for i, p in positions.items() if i > committed_end}
        read = store.get_messages(TOPIC, 0, 0, 1000, max_bytes=1 << 30)
        read_positions = {m.commit_log_offset for m in read.messages}
        assert not read_positions & uncommitted, "an uncommitted record was read"
        assert committed <= read_positions, "a committed record is not readable"

    def teardown(self) -> None:
        try:
            if self.storage.store.state is Lifecycle.RUNNING:
                self.storage.close()
        except Exception:  # noqa: BLE001 - teardown of a failed example: clean up regardless
            pass
        durability.remove_listener(self.image)
        shutil.rmtree(self.root, ignore_errors=True)


def test_stored_log_survives_power_cuts() -> None:
    """Synced entries survive any power cut byte for byte, nothing unsynced is half-present,
    the index and the commit log agree, and readers never pass the commit."""
    run_state_machine_as_test(
        StoredLogMachine,
        # Derandomized: the coverage bound below must hold on every run, not on 3 runs in 4
        # (25 random examples met no lost unsynced change in 2 of 8 runs); raise
        # TWINLOG_STATEFUL_EXAMPLES to explore further.
        settings=settings(max_examples=EXAMPLES, stateful_step_count=30, deadline=None,
                          database=None, derandomize=True),
    )
    print(f"\ncoverage of {EXAMPLES} examples: {dict(COUNTS)}")
    assert COUNTS["unsynced changes lost"] > 0
