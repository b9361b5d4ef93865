"""The DLedger entry index file: fixed-size entries with their own CRC, at their index's slot."""

from __future__ import annotations

from pathlib import Path

from store.index.entry_index import ENTRY_SIZE_BYTES, EntryIndex, IndexEntry, decode_entry


def test_an_entry_round_trips_and_a_flipped_or_zeroed_one_is_refused() -> None:
    """decode_entry returns what encode wrote, and None for any changed bit or a zeroed slot."""
    entry = IndexEntry(index=7, term=3, position=4096, size_bytes=120, payload_crc=0xDEADBEEF)
    raw = entry.encode()
    assert len(raw) == ENTRY_SIZE_BYTES and decode_entry(raw) == entry
    for bit in range(0, ENTRY_SIZE_BYTES * 8, 7):
        flipped = bytearray(raw)
        flipped[bit // 8] ^= 1 << bit % 8
        assert decode_entry(bytes(flipped)) is None, bit
    assert decode_entry(bytes(ENTRY_SIZE_BYTES)) is None


def test_entries_roll_files_truncate_and_reload(tmp_path: Path) -> None:
    """Entries start at any slot in an empty index, roll across files, truncate, and read
    back the same after the files are loaded again."""
    index = EntryIndex(tmp_path, entries_per_file=4)
    index.load()
    for number in range(6, 20):
        index.append(IndexEntry(number, 1, number * 100, 100, number))
    assert index.read(5) is None and index.read(6) == IndexEntry(6, 1, 600, 100, 6)
    assert len(index.files.files) == 4  # slots 4-7, 8-11, 12-15, 16-19
    index.truncate_from(13)
    assert index.read(12) is not None and index.read(13) is None
    index.append(IndexEntry(13, 2, 1300, 100, 13))
    index.flush()
    index.close()
    index = EntryIndex(tmp_path, entries_per_file=4)
    index.load()
    assert [index.read(n) for n in (12, 13, 14)] == [
        IndexEntry(12, 1, 1200, 100, 12), IndexEntry(13, 2, 1300, 100, 13), None]
    index.delete_files_below(13)
    assert index.read(11) is None and index.read(12) is not None
    index.close()
