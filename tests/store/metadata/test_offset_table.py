"""The in-memory consumer offset table: the hot path of commits, with dirty tracking."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from store.metadata import ConsumerOffset, OffsetKey, OffsetMovesBackwards
from store.metadata.offset_table import CommitOutcome, ConsumerOffsetTable

KEY = OffsetKey("g", "t", 0)
OTHER = OffsetKey("g", "t", 1)


def _offset(key: OffsetKey, queue_offset: int, updated_at_ms: int = 0) -> ConsumerOffset:
    return ConsumerOffset(
        group_name=key.group_name,
        topic=key.topic,
        queue_id=key.queue_id,
        queue_offset=queue_offset,
        updated_at_ms=updated_at_ms,
    )


def test_unknown_key_needs_allow_new() -> None:
    """A first commit is reported as UNKNOWN_KEY until the caller allows new keys."""
    table = ConsumerOffsetTable()
    assert table.commit(KEY, 3, now_ms=1, allow_new=False) is CommitOutcome.UNKNOWN_KEY
    assert table.get(KEY) is None and table.pending_count == 0
    assert table.commit(KEY, 3, now_ms=1, allow_new=True) is CommitOutcome.ADVANCED
    assert table.get(KEY) == _offset(KEY, 3, 1)


def test_commits_mark_dirty_and_take_dirty_clears() -> None:
    """Advancing commits are pending until taken; an unchanged commit adds nothing to persist."""
    table = ConsumerOffsetTable([_offset(KEY, 5)])
    assert table.commit(KEY, 5, now_ms=2, allow_new=False) is CommitOutcome.UNCHANGED
    assert table.pending_count == 0
    assert table.commit(KEY, 6, now_ms=3, allow_new=False) is CommitOutcome.ADVANCED
    assert table.commit(OTHER, 1, now_ms=4, allow_new=True) is CommitOutcome.ADVANCED
    batch = table.take_dirty()
    assert sorted(o.queue_offset for o in batch) == [1, 6]
    assert table.pending_count == 0 and table.take_dirty() == []
    table.restore_dirty(batch)
    assert table.pending_count == 2


def test_backwards_commit_is_refused() -> None:
    """A lower offset raises OffsetMovesBackwards and leaves the table unchanged."""
    table = ConsumerOffsetTable([_offset(KEY, 9)])
    with pytest.raises(OffsetMovesBackwards):
        table.commit(KEY, 8, now_ms=1, allow_new=False)
    assert table.get(KEY) == _offset(KEY, 9) and table.pending_count == 0


def test_put_persisted_moves_either_way_and_is_clean() -> None:
    """Persisted values (a reset, a master's copy) replace the entry and clear its dirty mark."""
    table = ConsumerOffsetTable([_offset(KEY, 9)])
    table.commit(KEY, 12, now_ms=1, allow_new=False)
    table.put_persisted([_offset(KEY, 2, 5)])
    assert table.get(KEY) == _offset(KEY, 2, 5) and table.pending_count == 0


def test_forget_drops_entries_and_pending_commits() -> None:
    """Forgetting a group or topic drops its offsets, pending or not; restore skips them."""
    other_group = OffsetKey("h", "t", 0)
    table = ConsumerOffsetTable([_offset(KEY, 1), _offset(other_group, 1)])
    table.commit(KEY, 2, now_ms=1, allow_new=False)
    batch = table.take_dirty()
    table.forget(group_name="g")
    table.restore_dirty(batch)
    assert table.get(KEY) is None and table.pending_count == 0
    assert [o.group_name for o in table.select()] == ["h"]
    table.forget(topic="t")
    assert len(table) == 0


def test_returned_offsets_are_copies() -> None:
    """Changing an offset a caller got back does not change the table."""
    table = ConsumerOffsetTable([_offset(KEY, 1)])
    got = table.get(KEY)
    assert got is not None
    got.queue_offset = 99
    table.select()[0].queue_offset = 98
    assert table.get(KEY) == _offset(KEY, 1)


operations = st.lists(
    st.tuples(st.sampled_from(["commit", "reset"]), st.integers(0, 50)), max_size=60
)


@given(operations)
def test_offsets_never_move_backwards_without_reset(steps: list[tuple[str, int]]) -> None:
    """Across any mix of commits and resets, only a reset ever lowers the stored offset."""
    table = ConsumerOffsetTable()
    expected: int | None = None
    for now_ms, (operation, queue_offset) in enumerate(steps):
        if operation == "reset":
            table.put_persisted([_offset(KEY, queue_offset, now_ms)])
            expected = queue_offset
        elif expected is not None and queue_offset < expected:
            with pytest.raises(OffsetMovesBackwards):
                table.commit(KEY, queue_offset, now_ms=now_ms, allow_new=True)
        else:
            table.commit(KEY, queue_offset, now_ms=now_ms, allow_new=True)
            expected = queue_offset
        stored = table.get(KEY)
        assert (None if stored is None else stored.queue_offset) == expected


def test_a_commit_ahead_is_seen_never_persisted_and_goes_at_its_apply() -> None:
    """A forward commit shown ahead of its record's apply (at log offset 100): readers see
    it, the persister never gets it and a snapshot's entries do not hold it; the apply of an
    earlier record leaves it, the apply of its own record takes over."""
    table = ConsumerOffsetTable([_offset(KEY, 1)])
    assert table.apply_ahead(KEY, 5, now_ms=7, log_offset=100)
    assert table.get(KEY) == _offset(KEY, 5, 7)
    assert [o.queue_offset for o in table.select()] == [5]
    assert table.take_dirty() == [] and table.entries() == [_offset(KEY, 1)]
    assert not table.apply_ahead(KEY, 4, now_ms=8, log_offset=120)  # less than seen
    table.apply(KEY, 0, reset=True, now_ms=9)  # a reset earlier in the log: 5 comes after
    table.passed(KEY, 90)
    assert table.get(KEY) == _offset(KEY, 5, 7)
    table.apply(KEY, 5, reset=False, now_ms=7)
    table.passed(KEY, 100)
    assert table.ahead_count == 0 and table.get(KEY) == _offset(KEY, 5, 7)
    assert table.take_dirty() == [_offset(KEY, 5, 7)]


def test_a_cut_drops_the_commits_ahead_whose_records_it_removed() -> None:
    table = ConsumerOffsetTable([_offset(KEY, 1), _offset(OTHER, 1)])
    table.apply_ahead(KEY, 5, now_ms=7, log_offset=100)
    table.apply_ahead(OTHER, 6, now_ms=7, log_offset=200)
    assert table.cut_ahead(150) == 1
    assert table.get(KEY) == _offset(KEY, 5, 7) and table.get(OTHER) == _offset(OTHER, 1)
    table.forget(group_name="g")
    assert table.get(KEY) is None and table.ahead_count == 0
