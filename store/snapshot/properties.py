"""Many records' properties (`name\\x01value\\x02` ...) decoded at once into an Arrow map array.

The same rules as `store.record.decode_properties`, record by record: UTF-8; pairs separated
by \\x02, empty pairs skipped; a pair's name ends at its first \\x01 (the value may hold more);
a pair without \\x01 makes its record invalid; a repeated name keeps its first place and its
last value. The bulk path covers records whose properties are empty or end with \\x02 (what
`encode_properties` and RocketMQ write); anything else is decoded a record at a time.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from store.record import RecordError, decode_properties
from store.snapshot.gather import views

PROPERTIES_TYPE = pa.map_(pa.string(), pa.string())
_PAIR_END = 2
_NAME_END = 1

Rows = npt.NDArray[np.intp]


@dataclass(frozen=True, slots=True)
class Properties:
    """The records' property maps, and their pairs flattened (record of each pair: parents)."""

    maps: pa.MapArray
    names: pa.StringArray
    values: pa.StringArray
    parents: npt.NDArray[np.int64]

    @classmethod
    def of_maps(cls, maps: pa.MapArray) -> Properties:
        offsets = maps.offsets.to_numpy()  # (list_parent_indices aborts on a map array)
        parents = np.repeat(np.arange(len(maps), dtype=np.int64), np.diff(offsets))
        return cls(maps, maps.keys, maps.items, parents)

    def lookup(self, name: str) -> pa.StringArray:
        """Each record's value of the property `name`, or null (names do not repeat)."""
        hits = pc.equal(self.names, _scalar(name)).to_numpy(zero_copy_only=False)
        pairs = np.full(len(self.maps), -1, dtype=np.int64)
        pairs[self.parents[hits]] = np.flatnonzero(hits)
        return self.values.take(pa.array(pairs, mask=pairs < 0))


@functools.lru_cache(maxsize=16)
def _scalar(name: str) -> pa.Scalar:
    """pa.scalar(name), made once: making one takes tens of microseconds."""
    return pa.scalar(name, pa.string())


def decode_properties_bulk(data: npt.NDArray[np.uint8], begins: npt.NDArray[np.int64],
                           sizes: npt.NDArray[np.int64]) -> Properties | Rows:
    """The properties at data[begin:begin + size] of each record, or the rows (indexes into
    `begins`) whose properties are not valid."""
    return decode_properties_raw(views(data, begins, sizes).cast(pa.binary()))


def decode_properties_raw(raw: pa.BinaryArray) -> Properties | Rows:
    """Each record's raw properties (`raw`: a fresh array, not a slice) decoded, or the rows
    whose properties are not valid."""
    try:
        raw.cast(pa.string())
    except pa.ArrowInvalid:  # not UTF-8, somewhere
        return _decode_one_by_one(raw)
    offsets = np.frombuffer(raw.buffers()[1], dtype=np.int32, count=len(raw) + 1)
    total = int(offsets[-1])
    if total == 0:
        empty = np.zeros(len(raw) + 1, dtype=np.int32)
        return Properties.of_maps(pa.MapArray.from_arrays(
            pa.array(empty), pa.array([], pa.string()), pa.array([], pa.string())))
    text = np.frombuffer(raw.buffers()[2], dtype=np.uint8, count=total)
    ends = offsets[1:][offsets[1:] > offsets[:-1]]
    if not (text[ends - 1] == _PAIR_END).all():
        return _decode_one_by_one(raw)  # a last pair without \x02 after it: rare, slow path
    return _decode_pairs(text, offsets, raw)


def _decode_pairs(text: npt.NDArray[np.uint8], offsets: npt.NDArray[np.int32],
                  raw: pa.BinaryArray) -> Properties | Rows:
    """The bulk path: `text` is every record's properties back to back, each ending in \x02."""
    pair_ends = np.flatnonzero(text == _PAIR_END)
    pair_begins = np.concatenate([[0], pair_ends[:-1] + 1])
    present = pair_ends > pair_begins
    if present.all():  # the pairs before a record's first byte: the \x02 before it
        map_offsets = _count_before(text, _PAIR_END)[offsets]
    else:  # empty pairs are skipped
        pair_begins, pair_ends = pair_begins[present], pair_ends[present]
        map_offsets = np.searchsorted(pair_begins, offsets).astype(np.int32)
    separators = np.append(np.flatnonzero(text == _NAME_END), len(text))
    name_ends = separators[_count_before(text, _NAME_END)[pair_begins]]  # first \x01 after
    parents = np.repeat(np.arange(len(offsets) - 1), np.diff(map_offsets))
    whole = name_ends < pair_ends
    if not whole.all():
        return np.unique(parents[~whole]).astype(np.intp)
    names = _strings(text, pair_begins, name_ends)
    if _repeats_a_name(names, map_offsets):
        return _decode_one_by_one(raw)
    values = _strings(text, name_ends + 1, pair_ends)
    maps = pa.MapArray.from_arrays(pa.array(map_offsets), names, values, type=PROPERTIES_TYPE)
    return Properties(maps, names, values, parents)


def _count_before(text: npt.NDArray[np.uint8], byte: int) -> npt.NDArray[np.int32]:
    """counts[i]: how many times `byte` occurs in text[:i] (for i up to len(text))."""
    counts = np.zeros(len(text) + 1, dtype=np.int32)
    np.cumsum(text == byte, out=counts[1:])
    return counts


def _strings(text: npt.NDArray[np.uint8], begins: npt.NDArray[np.int64],
             ends: npt.NDArray[np.int64]) -> pa.StringArray:
    """The text's [begin, end) slices (sorted, not overlapping) as a string array; `text` is
    valid UTF-8 and the slices end at ASCII separators, so each one is valid UTF-8 too."""
    marks = np.zeros(len(text) + 1, dtype=np.int8)
    marks[begins] += 1
    marks[ends] -= 1
    inside = np.cumsum(marks[:-1], dtype=np.int8).view(np.bool_)
    offsets = np.zeros(len(begins) + 1, dtype=np.int32)
    np.cumsum(ends - begins, out=offsets[1:])
    return pa.StringArray.from_buffers(len(begins), pa.py_buffer(offsets),
                                       pa.py_buffer(text[inside]))


def _repeats_a_name(names: pa.StringArray, map_offsets: npt.NDArray[np.int32]) -> bool:
    """Whether a record holds a name twice (its dict keeps one pair: the slow path)."""
    pair_counts = np.diff(map_offsets)
    if len(names) == 0 or pair_counts.max() < 2:
        return False
    codes = pc.dictionary_encode(names).indices.to_numpy().astype(np.int64)
    firsts = map_offsets[:-1][pair_counts > 0]
    if codes.max() < 63:  # one bit a name: a record's bits add up to their union, or repeat
        bits = np.left_shift(1, codes)
        return bool((np.add.reduceat(bits, firsts) != np.bitwise_or.reduceat(bits, firsts))
                    .any())
    parents = np.repeat(np.arange(len(pair_counts)), pair_counts)
    keys = parents * (int(codes.max()) + 1) + codes
    return len(np.unique(keys)) != len(keys)


def _decode_one_by_one(raw: pa.BinaryArray) -> Properties | Rows:
    """`decode_properties` a record at a time; the invalid rows if there are any."""
    rows: list[list[tuple[str, str]]] = []
    invalid = []
    for row, value in enumerate(raw.to_pylist()):
        try:
            rows.append(list(decode_properties(value).items()))
        except (RecordError, UnicodeDecodeError):
            invalid.append(row)
            rows.append([])
    if invalid:
        return np.array(invalid, dtype=np.intp)
    return Properties.of_maps(pa.array(rows, type=PROPERTIES_TYPE))
