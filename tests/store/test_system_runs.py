"""Dispatch hands runs of plain metadata records (neither a topic delete nor a snapshot part) to
the layer at once (store/dispatch.py `on_system_run`, SystemRecordFeed.dispatched_run): on real
stores, over random logs of metadata records and messages, it hands exactly the records, in
the same order, with the same positions, queue entries and retries as the record-by-record
hand-off, also when the layer fails at a record in the middle of a run (dispatch then stays at
that record, the ones before it applied, and hands it again next round)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.broker.metadata_log import record_of
from store import Message, MessageStore
from store.dispatch import SystemRecord, SystemRunStopped
from store.metadata.log_records import GroupPut, OffsetSet, TopicDelete
from store.system_topics import METADATA_TOPIC, OP_SNAPSHOT, PROPERTY_OP
from tests.support.store import small_config

POISON = b"poison"

_OFFSET = OffsetSet("g", "U", 0, 7, False, 1)
_ITEMS: dict[str, Callable[[], Message]] = {
    "offset": lambda: record_of(_OFFSET),
    "group": lambda: record_of(GroupPut("g", True, False, 1, 16, 1, 1)),
    "delete": lambda: record_of(TopicDelete("U", 1)),
    "snapshot": lambda: Message(METADATA_TOPIC, b"{}", properties={PROPERTY_OP: OP_SNAPSHOT},
                                queue_id=0),
    "poison": lambda: Message(METADATA_TOPIC, POISON,
                              properties={PROPERTY_OP: "offset.set"}, queue_id=0),
    "message": lambda: Message("U", b"m", queue_id=0),
}


class Layer:
    """Applies records into a list; a poison record fails its first two hand-offs."""

    def __init__(self) -> None:
        self.applied: list[SystemRecord] = []
        self.failures: dict[int, int] = {}
        self.run_sizes: list[int] = []  # how many records each run hand-off held

    def record(self, record: SystemRecord) -> None:
        if record.body == POISON and self.failures.get(record.commit_log_offset, 0) < 2:
            self.failures[record.commit_log_offset] = \
                self.failures.get(record.commit_log_offset, 0) + 1
            raise ValueError(f"poison at {record.commit_log_offset}")
        self.applied.append(record)

    def run(self, records: Sequence[SystemRecord]) -> None:
        self.run_sizes.append(len(records))
        for index, record in enumerate(records):
            try:
                self.record(record)
            except ValueError as error:
                raise SystemRunStopped(index, error) from error


def _history(store: MessageStore, layer: Layer) -> list[object]:
    """What each dispatch round did: its error, dispatch's position after it, how far the
    feed handed, and what the layer holds."""
    history: list[object] = []
    for _ in range(200):
        try:
            progressed = store.dispatch.dispatch_available()
            error = None
        except ValueError as raised:
            progressed, error = True, str(raised)
        history.append((error, store.dispatch.dispatched_offset,
                        store.dispatch.last_record_offset,
                        store.system_feed.last_handed_offset, len(layer.applied)))
        if not progressed:
            break
    return history


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.sampled_from(sorted(_ITEMS)), min_size=1, max_size=40))
def test_runs_hand_exactly_what_one_by_one_hands(tmp_path_factory: object,
                                                 items: list[str]) -> None:
    outcomes = []
    for takes_runs in (False, True):
        directory: Path = tmp_path_factory.mktemp("runs")  # type: ignore[attr-defined]
        store = MessageStore(small_config(directory))
        store.start()
        try:
            store.dispatch.stop()  # rounds run here, one at a time
            layer = Layer()
            store.attach_system_records(layer.record, 0,
                                        run_handler=layer.run if takes_runs else None)
            for item in items:
                message = _ITEMS[item]()
                result, _ = (store.put_system_message(message) if message.topic
                             == METADATA_TOPIC else store.put_message(message))
                assert result.status.value == "PUT_OK"
            history = _history(store, layer)
            queue = store.queues.get(METADATA_TOPIC, 0)
            entries = [] if queue is None else [queue.get(offset) for offset in
                                                range(queue.min_queue_offset,
                                                      queue.max_queue_offset)]
            outcomes.append((history, layer.applied, entries, layer.run_sizes))
        finally:
            store.shutdown()
    assert outcomes[1][:3] == outcomes[0][:3]
    plain = sum(item in ("offset", "group", "poison") for item in items)
    assert sum(outcomes[1][3]) >= plain and (outcomes[0][3] == []), "runs were not used"


def test_a_run_that_fails_midway_leaves_dispatch_at_the_failing_record(tmp_path: Path) -> None:
    """Two offset commits, a poison, one more: the first round applies two and stays at
    the poison (its queue entries: the two), the next rounds fail on it once more, then
    apply it and the last."""
    store = MessageStore(small_config(tmp_path))
    store.start()
    try:
        store.dispatch.stop()
        layer = Layer()
        store.attach_system_records(layer.record, 0, run_handler=layer.run)
        offsets = []
        for item in ("offset", "offset", "poison", "offset"):
            result, _ = store.put_system_message(_ITEMS[item]())
            offsets.append(result.commit_log_offset)
        with pytest.raises(ValueError, match=f"poison at {offsets[2]}"):
            store.dispatch.dispatch_available()
        dispatch = store.dispatch
        assert (dispatch.dispatched_offset, dispatch.last_record_offset,
                store.system_feed.last_handed_offset, len(layer.applied)) == (
                    offsets[2], offsets[1], offsets[1], 2)
        queue = store.queues.get(METADATA_TOPIC, 0)
        assert queue is not None and queue.max_queue_offset == 2
        history = _history(store, layer)
        assert history[0][0] == f"poison at {offsets[2]}"
        assert history[1][:2] == (None, store.max_offset)
        assert [record.commit_log_offset for record in layer.applied] == offsets
    finally:
        store.shutdown()
