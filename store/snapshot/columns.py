"""A window of commit-log records checked and decoded in bulk into Arrow columns.

What `store.record.decode_record` checks one record at a time, and the window's reader
(log_reader.iter_windows: framing, body CRC) has not checked yet, is checked here for a whole
window with numpy and pyarrow: the field sizes add up to TOTALSIZE, no IPv6 host, the
properties are UTF-8 `name\\x01value\\x02` pairs. The window ends before its first record that
fails (`DecodedWindow.complete` is then False: nothing after it may be exported).

The rows come out grouped by topic (log order within a topic) in the columns of
`MESSAGE_SCHEMA`, except that the bodies are still views into the mapped log (DECODED_SCHEMA):
the copy is left to whoever writes them (`materialize`), off the decoding thread.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.ma  # noqa: F401  pyarrow.array() looks numpy.ma up: not imported lazily mid-export
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from store.property_names import PROPERTY_KEYS, PROPERTY_TAGS
from store.record import (
    HEADER_SIZE,
    SYSFLAG_BORNHOST_V6,
    SYSFLAG_STOREHOST_V6,
)
from store.snapshot.gather import Bytes, Int64s, gather_rows, views
from store.snapshot.log_reader import RecordWindow
from store.snapshot.properties import Properties, decode_properties_raw

MESSAGE_SCHEMA = pa.schema([
    ("queue_id", pa.int32()),
    ("queue_offset", pa.int64()),
    ("commit_log_offset", pa.int64()),
    ("size_bytes", pa.int32()),
    ("born_timestamp_ms", pa.int64()),
    ("store_timestamp_ms", pa.int64()),
    ("store_host", pa.binary(8)),  # STOREHOST: msg_id is its hex, then the offset's
    ("keys", pa.string()),
    ("tags", pa.string()),
    ("properties", pa.map_(pa.string(), pa.string())),
    ("body", pa.binary()),
])
# The decoded rows: the bodies not copied out of the mapped log yet (see materialize).
DECODED_SCHEMA = MESSAGE_SCHEMA.set(MESSAGE_SCHEMA.get_field_index("body"),
                                    pa.field("body", pa.binary_view()))
TAIL_BYTES_MAX = 32  # longer record tails (topic and properties) are read from the log
_HEADER_COLUMNS = {  # column: (header field, Arrow/numpy type)
    "queue_id": ("queue_id", np.int32),
    "queue_offset": ("queue_offset", np.int64),
    "commit_log_offset": ("commit_log_offset", np.int64),
    "size_bytes": ("total_size", np.int32),
    "born_timestamp_ms": ("born_timestamp_ms", np.int64),
    "store_timestamp_ms": ("store_timestamp_ms", np.int64),
}

Rows = npt.NDArray[np.intp]


@dataclass(frozen=True, slots=True)
class TopicRows:
    """The rows [begin, end) of a decoded window are the topic's, `log_bytes` of log."""

    topic: str
    begin: int
    end: int
    log_bytes: int


@dataclass(frozen=True, slots=True)
class DecodedWindow:
    """A window's valid records as DECODED_SCHEMA rows, grouped by topic. The batch keeps the
    window's mapping alive until it (and every slice of it) is dropped."""

    batch: pa.RecordBatch
    groups: list[TopicRows]
    end_offset: int
    body_bytes: int
    complete: bool

    @property
    def count(self) -> int:
        return int(self.batch.num_rows)


@dataclass(frozen=True, slots=True)
class _Layout:
    """Where each record's variable fields are in the window's data."""

    body_at: Int64s
    body_size: Int64s
    topic_at: Int64s
    topic_size: Int64s
    properties_at: Int64s
    properties_size: Int64s

    def take(self, rows: Rows | slice) -> _Layout:
        return _Layout(self.body_at[rows], self.body_size[rows], self.topic_at[rows],
                       self.topic_size[rows], self.properties_at[rows],
                       self.properties_size[rows])


def decode_window(window: RecordWindow, include_bodies: bool) -> DecodedWindow:
    """The window's records up to its first invalid one, decoded, grouped by topic."""
    layout, count, tails = _layout(window)
    if count < window.count:
        return _decode_prefix(window, count, include_bodies)
    codes, topics = _topics(window.data, layout, tails)
    order: Rows | slice = slice(None)
    if len(topics) > 1:
        order = _stable_order(codes, len(topics))
        layout = layout.take(order)
    properties = decode_properties_raw(_properties(window.data, layout, tails, order))
    if not isinstance(properties, Properties):  # invalid rows: export the records before
        invalid = properties if isinstance(order, slice) else order[properties]
        return _decode_prefix(window, int(invalid.min()), include_bodies)
    batch = _batch(window, layout, order, properties, include_bodies)
    groups = _groups(codes, topics, window.header["total_size"])
    return DecodedWindow(batch, groups, window.end_offset,
                         int(layout.body_size.sum()), complete=True)


def _decode_prefix(window: RecordWindow, count: int, include_bodies: bool) -> DecodedWindow:
    """The window's first `count` records (all valid), the window marked incomplete."""
    if count == 0:
        empty = pa.RecordBatch.from_pylist([], schema=DECODED_SCHEMA)
        return DecodedWindow(empty, [], window.base_offset + int(window.starts[0]), 0, False)
    decoded = decode_window(window.prefix(count), include_bodies)
    assert decoded.complete, "a record of a valid prefix was found invalid"
    return DecodedWindow(decoded.batch, decoded.groups, decoded.end_offset, decoded.body_bytes,
                         complete=False)


def _batch(window: RecordWindow, layout: _Layout, order: Rows | slice, properties: Properties,
           include_bodies: bool) -> pa.RecordBatch:
    """The MESSAGE_SCHEMA columns of the records, in `order` (`layout` is in that order)."""
    header = window.header
    columns: dict[str, pa.Array] = {
        column: pa.array(header[field][order].astype(kind))
        for column, (field, kind) in _HEADER_COLUMNS.items()
    }
    hosts = np.ascontiguousarray(header["store_host"][order])
    columns["store_host"] = pa.FixedSizeBinaryArray.from_buffers(
        pa.binary(8), len(hosts), [None, pa.py_buffer(hosts.view(np.uint8))])
    columns["keys"] = properties.lookup(PROPERTY_KEYS)
    columns["tags"] = properties.lookup(PROPERTY_TAGS)
    columns["properties"] = properties.maps
    count = len(layout.body_at)
    columns["body"] = (views(window.data, layout.body_at, layout.body_size)
                       if include_bodies else pa.nulls(count, pa.binary_view()))
    return pa.RecordBatch.from_arrays([columns[name] for name in DECODED_SCHEMA.names],
                                      schema=DECODED_SCHEMA)


def materialize(rows: pa.RecordBatch) -> pa.RecordBatch:
    """DECODED_SCHEMA rows as MESSAGE_SCHEMA rows: the bodies copied out of the mapped log."""
    return rows.cast(MESSAGE_SCHEMA)


def _layout(window: RecordWindow) -> tuple[_Layout, int, Bytes | None]:
    """The records' field positions, how many records lead whose sizes add up, and when all
    do and none has a tail (TOPICLEN, topic, PROPLEN, properties) over TAIL_BYTES_MAX bytes,
    the tails, a row each (what follows a tail in its row is the next record's): topics and
    properties are then taken from those rows, gathered in one pass over the mapped log."""
    header, starts = window.header, window.starts
    total = header["total_size"].astype(np.int64)
    body_size = header["body_size"].astype(np.int64)
    body_at = starts + HEADER_SIZE
    tail_size = total - HEADER_SIZE - body_size  # TOPICLEN, topic, PROPLEN, properties
    valid = ((header["sys_flag"] & (SYSFLAG_BORNHOST_V6 | SYSFLAG_STOREHOST_V6)) == 0) & (
        body_size >= 0) & (tail_size >= 3)
    tail_at = np.where(valid, body_at + body_size, body_at)  # in the record, even if invalid
    tails = None
    if valid.all() and int(tail_size.max()) <= TAIL_BYTES_MAX:
        tails = gather_rows(window.data, tail_at, int(tail_size.max()))
        topic_size = tails[:, 0].astype(np.int64)
        at = np.minimum(topic_size + 1, tails.shape[1] - 2)  # PROPLEN, if in the tail
        rows = np.arange(len(tails))
        properties_size = (tails[rows, at].astype(np.int64) << 8) | tails[rows, at + 1]
    else:
        topic_size = window.data[tail_at].astype(np.int64)
        fits = valid & (topic_size + 3 <= tail_size)  # then PROPLEN is in the record
        at = np.where(fits, tail_at + 1 + topic_size, body_at)
        properties_size = (window.data[at].astype(np.int64) << 8) | window.data[at + 1]
    valid &= (topic_size + 3 <= tail_size) & (topic_size + 3 + properties_size == tail_size)
    layout = _Layout(body_at, body_size, tail_at + 1, topic_size, tail_at + 3 + topic_size,
                     properties_size)
    count = _leading(valid)
    return layout, count, tails if count == len(valid) else None


def _leading(valid: npt.NDArray[np.bool_]) -> int:
    """How many leading entries are true."""
    return len(valid) if valid.all() else int(np.argmin(valid))


def _topics(data: Bytes, layout: _Layout,
            tails: Bytes | None) -> tuple[npt.NDArray[np.int32], list[str]]:
    """Each record's topic as a code into the list of the window's distinct topic names."""
    if tails is None:
        encoded = pc.dictionary_encode(views(data, layout.topic_at, layout.topic_size))
        names = [value.decode("utf-8", "replace") for value in encoded.dictionary.to_pylist()]
    else:  # TOPICLEN and the topic, zero-padded: equal keys, equal topics
        width = 1 + int(layout.topic_size.max())
        keys = tails[:, :width] * (np.arange(width) <= layout.topic_size[:, None])
        encoded = pc.dictionary_encode(pa.FixedSizeBinaryArray.from_buffers(
            pa.binary(width), len(keys), [None, pa.py_buffer(keys)]))
        names = [key[1:1 + key[0]].decode("utf-8", "replace")
                 for key in encoded.dictionary.to_pylist()]
    codes = encoded.indices.to_numpy().astype(np.int32)
    if len(set(names)) == len(names):
        return codes, names
    distinct = sorted(set(names))  # different bytes that decode to one name: one topic
    remap = np.array([distinct.index(name) for name in names], dtype=np.int32)
    return remap[codes], distinct


def _properties(data: Bytes, layout: _Layout, tails: Bytes | None,
                order: Rows | slice) -> pa.BinaryArray:
    """Each record's raw properties, in `order` (`layout` is in that order already)."""
    if tails is None:
        return views(data, layout.properties_at, layout.properties_size).cast(pa.binary())
    rows = tails[order]
    begins = (layout.topic_size + 3)[:, None]  # in a row: TOPICLEN, topic, PROPLEN, ...
    columns = np.arange(rows.shape[1])
    text = rows[(columns >= begins) & (columns < begins + layout.properties_size[:, None])]
    offsets = np.zeros(len(rows) + 1, dtype=np.int32)
    np.cumsum(layout.properties_size, out=offsets[1:])
    return pa.BinaryArray.from_buffers(pa.binary(), len(rows), [
        None, pa.py_buffer(offsets), pa.py_buffer(text)])


def _stable_order(codes: npt.NDArray[np.int32], topic_count: int) -> Rows:
    """The rows sorted by topic code, log order kept within a topic: numpy sorts codes of
    up to 16 bits stably by radix, several times faster than int32s by merge sort."""
    if topic_count <= 1 << 16:
        return np.argsort(codes.astype(np.uint16), kind="stable")
    return np.argsort(codes, kind="stable")


def _groups(codes: npt.NDArray[np.int32], topics: list[str],
            sizes: npt.NDArray[Any]) -> list[TopicRows]:
    """Each topic's rows once the rows are sorted by code (stable), and their log bytes."""
    counts = np.bincount(codes, minlength=len(topics)).tolist()
    log_bytes = np.bincount(codes, weights=sizes, minlength=len(topics)).tolist()
    groups = []
    row = 0
    for topic, count, size in zip(topics, counts, log_bytes, strict=True):
        if count:
            groups.append(TopicRows(topic, row, row + count, int(size)))
        row += count
    return groups


