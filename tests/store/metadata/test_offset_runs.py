"""Dispatch's run of offset.set records applied at once (MetadataStore.apply_offset_run) gives
exactly the tables and position that applying them one by one (apply_record) gives: over random
runs of forward commits, resets, backward ones, records the tables hold already, gaps, commits
shown ahead of their apply, and records that do not decode (where both stop, with the same
error)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from store.dispatch import SystemRecord
from store.metadata import MetadataStore
from store.metadata.log_records import OP_OFFSET_SET, OffsetSet, encode

NOW_MS = 1_700_000_000_000
GROUPS = ("g0", "g1", "g2")


@dataclass(frozen=True)
class Step:
    """One record of a run: its change (None: a body that does not decode), how its queue
    offset follows the previous record's (1: next; 0 or -1: one the tables hold already;
    2: past a gap), and whether the appender showed it ahead of its apply."""

    change: OffsetSet | None
    queue_offset_step: int
    shown_ahead: bool


changes = st.builds(OffsetSet, st.sampled_from(GROUPS), st.just("T"), st.integers(0, 1),
                    st.integers(0, 30), st.booleans(), st.integers(1, 5))
steps = st.builds(Step, st.one_of(changes, changes, changes, changes, st.none()),
                  st.sampled_from((1, 1, 1, 1, 1, 0, -1, 2)), st.booleans())


def _records(run: list[Step], first_queue_offset: int) -> list[SystemRecord]:
    records, queue_offset = [], first_queue_offset - 1
    for index, step in enumerate(run):
        queue_offset = max(0, queue_offset + step.queue_offset_step)
        body = b'{"v": 1, "op": "offset.set", "queue_id": "x"}' if step.change is None \
            else encode(step.change)
        records.append(SystemRecord(1000 + 200 * index, queue_offset, OP_OFFSET_SET, body))
    return records


def _state(tables: MetadataStore) -> object:
    offsets = tables._offsets
    return (tables.list_consumer_offsets(), offsets.entries(), offsets.ahead_count,
            offsets.pending_count, tables.log_position, tables._lacking,
            sorted(tables._appended))


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[MetadataStore,
                                                                    MetadataStore]]:
    directory: Path = tmp_path_factory.mktemp("runs")
    stores = tuple(MetadataStore(f"sqlite:///{directory / name}.db", clock_ms=lambda: NOW_MS)
                   for name in ("one_by_one", "run"))
    yield stores  # type: ignore[misc]
    for tables in stores:
        tables.stop()


def _prepare(tables: MetadataStore, before: list[Step], run: list[Step]) -> None:
    """The same start for both: tables reset, then a prefix applied one by one, then the
    run's commits shown ahead where the step says (as the appender shows them)."""
    tables.reset_applied_state()
    tables.cut_ahead(0)
    for record in _records(before, 0):
        try:
            tables.apply_record(record)
        except ValueError:
            break
    start = tables.log_position.queue_offset
    for step, record in zip(run, _records(run, start), strict=True):
        if step.shown_ahead and step.change is not None and not step.change.reset:
            tables.apply_ahead(step.change, record.commit_log_offset)


@settings(max_examples=80, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(steps, max_size=4), st.lists(steps, min_size=1, max_size=24))
def test_a_run_applied_at_once_equals_its_records_one_by_one(
        pair: tuple[MetadataStore, MetadataStore], before: list[Step], run: list[Step]) -> None:
    one_by_one, at_once = pair
    for tables in pair:
        _prepare(tables, before, run)
    start = one_by_one.log_position.queue_offset
    assert at_once.log_position.queue_offset == start
    records = _records(run, start)
    error_one_by_one = None
    for record in records:
        try:
            one_by_one.apply_record(record)
        except ValueError as error:
            error_one_by_one = repr(error)
            break
    applied = at_once.apply_offset_run(records)
    error_at_once = None
    if applied < len(records):
        with pytest.raises(ValueError) as raised:
            at_once.apply_record(records[applied])  # what the broker does with that one
        error_at_once = repr(raised.value)
    assert error_at_once == error_one_by_one
    assert _state(at_once) == _state(one_by_one)


def test_a_run_stops_before_the_first_record_it_cannot_decode(
        pair: tuple[MetadataStore, MetadataStore]) -> None:
    """Two records applied, the third not (nothing of it or after it), the position after
    the second."""
    _, tables = pair
    _prepare(tables, [], [])
    good = [encode(OffsetSet("g0", "T", 0, offset, False, 1)) for offset in (3, 4)]
    records = [SystemRecord(1000, 0, OP_OFFSET_SET, good[0]),
               SystemRecord(1200, 1, OP_OFFSET_SET, good[1]),
               SystemRecord(1400, 2, OP_OFFSET_SET, orjson.dumps({"v": 1})),
               SystemRecord(1600, 3, OP_OFFSET_SET,
                            encode(OffsetSet("g0", "T", 0, 9, False, 1)))]
    assert tables.apply_offset_run(records) == 2
    assert tables.get_consumer_offset(group_name="g0", topic="T", queue_id=0) == 4
    position = tables.log_position
    assert (position.queue_offset, position.commit_log_offset) == (2, 1200)
