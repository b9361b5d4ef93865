"""RecentEntries against a model log: whatever appends, truncations, resets and compactions
happen, it keeps a contiguous suffix of the log within its byte bound, and its reads equal
the log's."""

from __future__ import annotations

import hypothesis.strategies as st
from hypothesis import given, settings

from ha.dledger.core.messages import Entry
from ha.dledger.stored.recent_entries import RecentEntries

OPS = st.lists(st.one_of(
    st.tuples(st.just("append"), st.integers(0, 40)),  # payload size
    st.tuples(st.just("truncate"), st.integers(0, 30)),  # entries back from the end
    st.tuples(st.just("compact"), st.integers(0, 30)),  # entries forward from the base
    st.tuples(st.just("reset"), st.integers(1, 50)),  # the new base, past the end
), max_size=80)


def _slice(log: list[Entry], first_index: int, count_max: int, bytes_max: int) -> list[Entry]:
    """The disk path's rule: at most count_max entries and bytes_max bytes, at least one."""
    out: list[Entry] = []
    size = 0
    for entry in (e for e in log if e.index >= first_index):
        if len(out) == count_max or (out and size + len(entry.payload) > bytes_max):
            break
        out.append(entry)
        size += len(entry.payload)
    return out


@settings(max_examples=300, deadline=None)
@given(ops=OPS, bytes_max=st.integers(1, 120), count_max=st.integers(1, 6),
       slice_bytes_max=st.integers(1, 80))
def test_recent_entries_stay_a_bounded_suffix_of_the_log(
        ops: list[tuple[str, int]], bytes_max: int, count_max: int,
        slice_bytes_max: int) -> None:
    """After every change: contiguous, ending at the log's last entry, within bytes_max
    unless a single entry is larger, equal to the log where kept, and slices as the disk."""
    recent = RecentEntries(bytes_max)
    log: list[Entry] = []  # the model: the log's entries after its base
    last_index = 0
    for op, argument in ops:
        if op == "append":
            last_index += 1
            entry = Entry(last_index, 1, bytes([last_index % 256]) * argument)
            log.append(entry)
            recent.append(entry)
        elif op == "truncate" and log:
            index = log[max(0, len(log) - 1 - argument)].index
            log = [e for e in log if e.index < index]
            last_index = index - 1
            recent.truncate_from(index)
        elif op == "compact" and log:
            index = log[min(argument, len(log) - 1)].index
            log = [e for e in log if e.index > index]
            recent.drop_through(index)
        elif op == "reset":
            log, last_index = [], last_index + argument
            recent.clear()
        kept = [recent.get(i) for i in range((recent.first_index or 0),
                                             (recent.first_index or 0) + len(recent))]
        assert all(e is not None for e in kept)
        if kept:
            assert kept == log[len(log) - len(kept):], "not the log's suffix"
            assert len(kept) == 1 or sum(len(e.payload) for e in kept if e) <= bytes_max
        for entry in log:
            got = recent.get(entry.index)
            assert got is None or got == entry
            sliced = recent.slice(entry.index, count_max, slice_bytes_max)
            if sliced is not None:
                assert list(sliced) == _slice(log, entry.index, count_max, slice_bytes_max)
        assert recent.get(last_index + 1) is None
        assert recent.slice(last_index + 1, count_max, slice_bytes_max) is None


def test_an_entry_after_a_gap_starts_the_suffix_again() -> None:
    """An append that does not follow the last kept entry drops the rest: never a hole."""
    recent = RecentEntries(1000)
    for index in (1, 2, 3):
        recent.append(Entry(index, 1, b"x"))
    recent.append(Entry(7, 2, b"y"))
    assert (recent.first_index, len(recent), recent.get(3)) == (7, 1, None)
