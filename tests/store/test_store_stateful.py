"""A hypothesis state machine: append / flush / crash (dropping unflushed bytes) / recover /
read, checked against a plain list model after every step."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import hypothesis.strategies as st
from hypothesis import settings
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from store import Lifecycle, Message, MessageStore, PutMessageStatus
from tests.store.conftest import small_config, wait_dispatched

QUEUES = 2


class StoreMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.root = Path(tempfile.mkdtemp(prefix="twinlog-stateful-"))
        self.store = self._open()
        self.durable: list[tuple[int, bytes]] = []  # (queue id, body), in append order
        self.volatile: list[tuple[int, bytes]] = []

    def _open(self) -> MessageStore:
        config = small_config(
            self.root, mapped_file_size_bytes=64 * 1024, message_size_max_bytes=4096,
            consume_queue_entries_per_file=16, default_queue_count=QUEUES,
            # Only the explicit flush rule makes bytes durable.
            flush_interval_ms=3_600_000, flush_consume_queue_interval_ms=3_600_000,
        )
        store = MessageStore(config)
        store.start()
        return store

    @rule(body=st.one_of(st.binary(max_size=64), st.binary(min_size=2000, max_size=4000)))
    def append(self, body: bytes) -> None:
        result, done = self.store.put_message(Message("Model", body))
        assert result.status is PutMessageStatus.PUT_OK
        assert done.result(5) is PutMessageStatus.PUT_OK
        self.volatile.append((result.queue_id, body))

    @rule()
    def flush(self) -> None:
        self.store.flush.checkpoint()
        self.durable += self.volatile
        self.volatile = []

    @rule()
    def crash(self) -> None:
        """Power loss: every byte not flushed is gone, in the log and in the queues."""
        flushed = {m.path: m.flushed_position for m in self.store.commit_log.files.files}
        for queue in self.store.queues.all():
            flushed.update({m.path: m.flushed_position for m in queue._files.files})
        self.store.halt()
        paths = [*self.root.glob("commitlog/*"), *self.root.glob("consumequeue/*/*/*")]
        for path in paths:
            keep = flushed.get(path, 0)
            size = path.stat().st_size
            with path.open("r+b") as file:
                file.seek(keep)
                file.write(bytes(size - keep))
        self.volatile = []
        self.store = self._open()

    @rule()
    def restart(self) -> None:
        self.store.shutdown()  # clean: flushes everything
        self.durable += self.volatile
        self.volatile = []
        self.store = self._open()

    @precondition(lambda self: self.store.state is Lifecycle.RUNNING)
    @invariant()
    def reads_match_model(self) -> None:
        wait_dispatched(self.store)
        expected = self.durable + self.volatile
        for queue_id in range(QUEUES):
            batch = self.store.get_messages("Model", queue_id, 0, 1000)
            assert [m.body for m in batch.messages] == [b for q, b in expected if q == queue_id]

    def teardown(self) -> None:
        if self.store.state is Lifecycle.RUNNING:
            self.store.shutdown()
        shutil.rmtree(self.root, ignore_errors=True)


StoreMachine.TestCase.settings = settings(
    max_examples=40, stateful_step_count=60, deadline=None
)
TestStoreStateful = StoreMachine.TestCase
