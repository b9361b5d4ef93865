from __future__ import annotations

import logging
import tempfile
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any
from unittest import mock

import hypothesis.strategies as st
import numpy as np
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings

from store import Message, MessageStore
from store.record import HEADER_SIZE, RecordError, StoredMessage, decode_properties
from store.snapshot import ExportRequest, SnapshotError, columns, export_snapshot, find_snapshots
from store.snapshot.columns import MESSAGE_SCHEMA
from store.snapshot.gather import views
from store.snapshot.log_reader import HEADER_DTYPE, iter_records, list_log_files, log_range
from store.snapshot.properties import Properties, decode_properties_bulk
from store.status import PutMessageStatus
from tests.support.examples import MEMORY_DIR
from tests.support.store import small_config, wait_dispatched

OpenStore = Callable[..., MessageStore]
PHYSICAL_OFFSET_POSITION = HEADER_DTYPE.fields["commit_log_offset"][1]


def _produce(store: MessageStore, count: int, start: int = 0) -> None:
    for index in range(start, start + count):
        store.put_message(Message(f"Snap{index % 3}", b"b" * (100 + index % 500),
                                  {"KEYS": f"k{index % 7}", "TAGS": "t"}))
    wait_dispatched(store)


def _offsets(root: Path) -> list[int]:
    dataset = ds.dataset(str(root), format="parquet", partitioning="hive")
    return sorted(dataset.to_table(columns=["commit_log_offset"])["commit_log_offset"].to_pylist())


def test_incremental_snapshots_cover_the_log_once(open_store: OpenStore, tmp_path: Path) -> None:
    """Two default exports are contiguous: their union is every record, none twice."""
    store = open_store(data_dir=tmp_path / "data")
    out = tmp_path / "snapshots"
    _produce(store, 400)
    first = export_snapshot(ExportRequest(store.config.data_dir, out))
    _produce(store, 300, start=400)
    second = export_snapshot(ExportRequest(store.config.data_dir, out))
    assert first.range_to == second.range_from and second.range_to == store.max_offset
    assert first.message_count + second.message_count == 700
    offsets = []
    for path, _ in find_snapshots(out):
        offsets += _offsets(path / "messages")
    expected = []
    for topic, queue_ids in store.queues.topics().items():
        for queue_id in queue_ids:
            expected += [m.commit_log_offset
                         for m in store.get_messages(topic, queue_id, 0, 1000).messages]
    assert offsets == sorted(expected)
    assert len(set(offsets)) == 700
    with pytest.raises(SnapshotError, match="no records"):
        export_snapshot(ExportRequest(store.config.data_dir, out))


def test_bodies_can_be_left_out(open_store: OpenStore, tmp_path: Path) -> None:
    """include_bodies=False writes null bodies and keeps everything else."""
    store = open_store(data_dir=tmp_path / "data")
    _produce(store, 50)
    manifest = export_snapshot(ExportRequest(store.config.data_dir, tmp_path / "out",
                                             include_bodies=False))
    path = find_snapshots(tmp_path / "out")[0][0]
    table = ds.dataset(str(path / "messages"), format="parquet", partitioning="hive").to_table()
    assert table.num_rows == 50 and set(table["body"].to_pylist()) == {None}
    assert not manifest.include_bodies and manifest.body_bytes > 0


def test_failed_export_leaves_nothing_readable(open_store: OpenStore, tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """An export that dies half-way leaves no snapshot directory behind."""
    store = open_store(data_dir=tmp_path / "data")
    _produce(store, 100)
    import store.snapshot.export as export_module

    def boom(*_: object) -> None:
        raise RuntimeError("disk went away")

    monkeypatch.setattr(export_module, "_write_metadata", boom)
    with pytest.raises(RuntimeError):
        export_snapshot(ExportRequest(store.config.data_dir, tmp_path / "out"))
    assert list((tmp_path / "out").iterdir()) == []


def test_foreign_entries_are_skipped_by_name(tmp_path: Path,
                                            caplog: pytest.LogCaptureFixture) -> None:
    """A foreign directory or a corrupt manifest is skipped with a warning naming it."""
    (tmp_path / "notes").mkdir()
    bad = tmp_path / "snapshot-00000000000000000000-00000000000000000100"
    bad.mkdir()
    (bad / "_manifest.json").write_text("{not json")
    (tmp_path / ".tmp-123").mkdir()
    with caplog.at_level(logging.WARNING):
        assert find_snapshots(tmp_path) == []
    assert "notes" in caplog.text and bad.name in caplog.text and ".tmp-123" not in caplog.text


# The bulk decoding (store/snapshot/columns.py, properties.py) against the store's own reads.

SNAPSHOT_TOPICS = ("Orders", "Pay%ments", "a%25b", "Logs-1|x")
_property_text = st.text(
    alphabet=st.characters(blacklist_characters="\x01\x02", blacklist_categories=("Cs",)),
    max_size=12,
)
_messages = st.lists(
    st.builds(
        Message,
        topic=st.sampled_from(SNAPSHOT_TOPICS),
        body=st.one_of(st.just(b""), st.binary(max_size=16), st.binary(max_size=3000)),
        properties=st.one_of(
            st.just({}),
            st.dictionaries(st.sampled_from(["KEYS", "TAGS", "UNIQ_KEY", "a"]) | _property_text
                            .filter(bool), _property_text, max_size=4),
        ),
        queue_id=st.integers(0, 2),
        born_timestamp_ms=st.integers(0, 2**50),
    ),
    min_size=1,
    max_size=150,
)
_HIVE = ds.partitioning(pa.schema([("topic", pa.string())]), flavor="hive")


def _exported_rows(root: Path) -> dict[int, dict[str, Any]]:
    (snapshot, _), = find_snapshots(root)
    table = ds.dataset(str(snapshot / "messages"), format="parquet",
                       partitioning=_HIVE).to_table()
    assert table.schema.remove_metadata().equals(MESSAGE_SCHEMA.append(
        pa.field("topic", pa.string())))
    rows = {row["commit_log_offset"]: row for row in table.to_pylist()}
    assert len(rows) == table.num_rows
    return rows


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(batch=_messages, include_bodies=st.booleans(), tail_bytes_max=st.sampled_from(
    [0, columns.TAIL_BYTES_MAX, 1000]))
def test_export_reads_back_field_by_field(batch: list[Message], include_bodies: bool,
                                          tail_bytes_max: int) -> None:
    """Random messages (empty bodies, no or several properties, '%' in topic names, files
    rolling every 64 KiB) export to exactly what the store serves, field by field, whether
    the records' tails are gathered in one pass or read from the log (tail_bytes_max)."""
    # A store and an export an example: on a memory file system, where the export's fsyncs
    # cost nothing (on the host's disk they took half the test's time).
    with tempfile.TemporaryDirectory(dir=MEMORY_DIR) as temp, \
            mock.patch.object(columns, "TAIL_BYTES_MAX", tail_bytes_max):
        store = MessageStore(small_config(Path(temp) / "data"))
        store.start()
        try:
            for message in batch:
                result, _ = store.put_message(message)
                assert result.status is PutMessageStatus.PUT_OK, result
            wait_dispatched(store)
            expected = {stored.commit_log_offset: (topic, stored)
                        for topic, queue_ids in store.queues.topics().items()
                        for queue_id in queue_ids
                        for stored in store.get_messages(topic, queue_id, 0, 10_000,
                                                         max_bytes=1 << 30).messages}
            manifest = export_snapshot(ExportRequest(store.config.data_dir, Path(temp) / "out",
                                                     include_bodies=include_bodies))
        finally:
            store.shutdown()
        rows = _exported_rows(Path(temp) / "out")
    assert len(expected) == len(batch) == manifest.message_count
    assert sorted(rows) == sorted(expected)
    for offset, (topic, stored) in expected.items():
        assert rows[offset] == {
            "queue_id": stored.queue_id,
            "queue_offset": stored.queue_offset,
            "commit_log_offset": stored.commit_log_offset,
            "size_bytes": stored.total_size,
            "born_timestamp_ms": stored.born_timestamp_ms,
            "store_timestamp_ms": stored.store_timestamp_ms,
            "store_host": stored.store_host,
            "keys": stored.keys,
            "tags": stored.tags,
            "properties": list(stored.properties.items()),
            "body": stored.body if include_bodies else None,
            "topic": topic,
        }
    assert all((row["store_host"] + offset.to_bytes(8, "big")).hex().upper()
               == expected[offset][1].msg_id for offset, row in rows.items())
    assert manifest.body_bytes == sum(len(stored.body) for _, stored in expected.values())
    assert manifest.topics == dict(sorted(Counter(t for t, _ in expected.values()).items()))


def _corrupt_body(raw: bytearray, record: StoredMessage, position: int) -> None:
    raw[position + HEADER_SIZE] ^= 0xFF  # the CRC no longer matches


def _corrupt_properties_utf8(raw: bytearray, record: StoredMessage, position: int) -> None:
    raw[position + record.total_size - 2] = 0xFF  # in the last property: not UTF-8


def _corrupt_properties_pair(raw: bytearray, record: StoredMessage, position: int) -> None:
    end = position + record.total_size
    separator = bytes(raw[position:end]).rindex(b"\x01")
    raw[position + separator] = ord("x")  # the last pair has no name/value separator


def _corrupt_sizes(raw: bytearray, record: StoredMessage, position: int) -> None:
    raw[position + HEADER_SIZE + len(record.body)] -= 1  # TOPICLEN: sizes no longer add up


def _corrupt_physical_offset(raw: bytearray, record: StoredMessage, position: int) -> None:
    # PHYSICALOFFSET says the record is elsewhere; the CRC covers the body only, so the
    # record is otherwise valid and only the framing check can stop there.
    field = position + PHYSICAL_OFFSET_POSITION
    raw[field:field + 8] = (record.commit_log_offset + 1).to_bytes(8, "big")


@pytest.mark.parametrize("corrupt", [_corrupt_body, _corrupt_properties_utf8,
                                     _corrupt_properties_pair, _corrupt_sizes,
                                     _corrupt_physical_offset])
@pytest.mark.parametrize("victim", [0, 3, 150])
@pytest.mark.parametrize("tail_bytes_max", [0, columns.TAIL_BYTES_MAX])
def test_export_stops_where_the_record_reader_stops(
        open_store: OpenStore, tmp_path: Path, victim: int, tail_bytes_max: int,
        corrupt: Callable[[bytearray, StoredMessage, int], None],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A record made invalid (body CRC, properties not UTF-8 or without separator, field
    sizes, a physical offset that is not its position) ends the export just before it, as it
    ends decode_record's iteration."""
    monkeypatch.setattr(columns, "TAIL_BYTES_MAX", tail_bytes_max)
    store = open_store(data_dir=tmp_path / "data", mapped_file_size_bytes=1024 * 1024)
    _produce(store, 200)
    store.shutdown()
    files = list_log_files(tmp_path / "data" / "commitlog")
    low, high = log_range(files)
    records = list(iter_records(files, low, high))
    record = records[victim]
    log_file = next(f for f in files if f.start_offset <= record.commit_log_offset
                    < f.start_offset + f.size_bytes)
    raw = bytearray(log_file.path.read_bytes())
    corrupt(raw, record, record.commit_log_offset - log_file.start_offset)
    log_file.path.write_bytes(bytes(raw))
    kept = [r.commit_log_offset for r in iter_records(files, low, high)]
    assert kept == [r.commit_log_offset for r in records[:victim]]
    out = tmp_path / "out"
    if victim == 0:
        with pytest.raises(SnapshotError, match="no records"):
            export_snapshot(ExportRequest(tmp_path / "data", out))
        return
    manifest = export_snapshot(ExportRequest(tmp_path / "data", out))
    assert sorted(_exported_rows(out)) == kept
    assert manifest.range_to == record.commit_log_offset


_property_bytes = st.lists(st.sampled_from([b"\x01", b"\x02", b"KEYS", b"TAGS", b"k", b"",
                                            "é".encode(), b"\xff", b"\x01\x02"]),
                           max_size=10).map(b"".join)


@settings(max_examples=300, deadline=None)
@given(values=st.lists(st.tuples(st.binary(max_size=3), _property_bytes), max_size=30),
       trailing=st.binary(max_size=2))
def test_bulk_properties_decode_as_one_by_one(values: list[tuple[bytes, bytes]],
                                              trailing: bytes) -> None:
    """decode_properties_bulk agrees with decode_properties record by record: the same
    maps and KEYS/TAGS, or exactly the rows decode_properties refuses."""
    data, begins = bytearray(), []
    for junk, raw in values:
        data += junk
        begins.append(len(data))
        data += raw
    data += trailing
    array = np.frombuffer(bytes(data), dtype=np.uint8)
    result = decode_properties_bulk(array, np.array(begins, dtype=np.int64),
                                    np.array([len(raw) for _, raw in values], dtype=np.int64))
    expected: list[dict[str, str]] = []
    invalid = []
    for row, (_, raw) in enumerate(values):
        try:
            expected.append(decode_properties(raw))
        except (RecordError, UnicodeDecodeError):
            invalid.append(row)
    if invalid:
        assert not isinstance(result, Properties)
        assert sorted(result.tolist()) == invalid
        return
    assert isinstance(result, Properties)
    assert result.maps.to_pylist() == [list(properties.items()) for properties in expected]
    assert result.lookup("KEYS").to_pylist() == [p.get("KEYS") for p in expected]
    assert result.lookup("TAGS").to_pylist() == [p.get("TAGS") for p in expected]


@settings(max_examples=200, deadline=None)
@given(data=st.binary(min_size=1, max_size=64), slices=st.lists(
    st.tuples(st.integers(0, 63), st.integers(0, 40)), max_size=20))
def test_binary_views_are_the_slices(data: bytes, slices: list[tuple[int, int]]) -> None:
    """views(): inline (up to 12 bytes, zero-padded) or pointing views, valid by Arrow's full
    check, of slices anywhere in the data, the last bytes included."""
    bounded = [(min(begin, len(data)), 0) for begin, _ in slices]
    bounded = [(begin, min(size, len(data) - begin))
               for (begin, _), (_, size) in zip(bounded, slices, strict=True)]
    array = views(np.frombuffer(data, dtype=np.uint8),
                  np.array([begin for begin, _ in bounded], dtype=np.int64),
                  np.array([size for _, size in bounded], dtype=np.int64))
    array.validate(full=True)
    assert array.to_pylist() == [data[begin:begin + size] for begin, size in bounded]


def test_buffered_rows_and_writer_eviction(open_store: OpenStore, tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """Rows buffered per topic, flushed all at once past BUFFERED_BYTES_MAX, with at most
    OPEN_WRITERS_MAX files open (a topic's next rows go to its next part file): every row
    is exported once, in log order within each part."""
    import store.snapshot.messages as export_module

    monkeypatch.setattr(export_module, "BATCH_ROWS_MIN", 1_000_000)
    monkeypatch.setattr(export_module, "BATCH_BYTES_MIN", 1 << 40)
    monkeypatch.setattr(export_module, "BUFFERED_BYTES_MAX", 20_000)
    monkeypatch.setattr(export_module, "OPEN_WRITERS_MAX", 2)
    store = open_store(data_dir=tmp_path / "data")
    _produce(store, 600)
    manifest = export_snapshot(ExportRequest(store.config.data_dir, tmp_path / "out"))
    rows = _exported_rows(tmp_path / "out")
    assert manifest.message_count == len(rows) == 600
    (snapshot, _), = find_snapshots(tmp_path / "out")
    parts = sorted(snapshot.glob("messages/topic=*/store_hour=*/part-*.parquet"))
    assert len(parts) > 3  # evicted writers: topics written to more than one part
    for part in parts:
        offsets = pq.read_table(part, columns=["commit_log_offset"]).column(0)
        assert offsets.to_pylist() == sorted(offsets.to_pylist())


def test_buffered_rows_are_copied_out_of_their_window(open_store: OpenStore,
                                                      tmp_path: Path) -> None:
    """A topic's rows kept for later (_compact) hold their own values only, bodies as
    MESSAGE_SCHEMA binary: neither the window's mapping nor its other rows stay alive."""
    import store.snapshot.messages as export_module
    from store.snapshot.columns import decode_window
    from store.snapshot.log_reader import iter_windows

    store = open_store(data_dir=tmp_path / "data", mapped_file_size_bytes=1024 * 1024)
    _produce(store, 400)
    store.shutdown()
    files = list_log_files(tmp_path / "data" / "commitlog")
    window = next(window for window in iter_windows(files, *log_range(files))
                  if window.count > 100)
    decoded = decode_window(window, include_bodies=True)
    rows = decoded.batch.slice(40, 20)
    kept = export_module._compact(rows)
    assert kept.schema == MESSAGE_SCHEMA
    assert kept.to_pylist() == rows.to_pylist()
    # nbytes counts the rows' own bytes; the buffers' total counts whole buffers, of which
    # a slice of the window would hold all (a few hundred rows, and the mapped log).
    assert kept.get_total_buffer_size() <= kept.nbytes + 4096


HOUR_MS = 3_600_000


def test_messages_are_partitioned_by_topic_and_store_hour(open_store: OpenStore,
                                                          tmp_path: Path) -> None:
    """Each record lands in messages/topic=T/store_hour=YYYYMMDDHH of its topic and of its
    store timestamp's UTC hour, every record once; the manifest says schema 3."""
    from tests.support.store_clock import store_clock

    store = open_store(data_dir=tmp_path / "data")
    start_ms = 1_795_000_000_000 - 1_795_000_000_000 % HOUR_MS  # 2026-11-18T11:00Z
    with store_clock(start_ms) as clock:
        for index in range(300):
            clock.now_ms = start_ms + (index // 100) * HOUR_MS + index % 100
            store.put_message(Message(f"Snap{index % 2}", b"x" * 50))
    wait_dispatched(store)
    manifest = export_snapshot(ExportRequest(store.config.data_dir, tmp_path / "out"))
    assert manifest.schema_version == 3 and manifest.message_count == 300
    (snapshot, _), = find_snapshots(tmp_path / "out")
    seen: Counter[tuple[str, str]] = Counter()
    for part in snapshot.glob("messages/topic=*/store_hour=*/part-*.parquet"):
        table = pq.read_table(part, columns=["store_timestamp_ms"])
        topic, hour = part.parent.parent.name[6:], part.parent.name[11:]
        for stamp in table.column(0).to_pylist():
            assert store_hour_of(stamp) == hour
            seen[(topic, hour)] += 1
    assert seen == {(f"Snap{t}", h): 50 for t in (0, 1)
                    for h in ("2026111811", "2026111812", "2026111813")}


def store_hour_of(timestamp_ms: int) -> str:
    from datetime import UTC, datetime

    return datetime.fromtimestamp(timestamp_ms / 1000, UTC).strftime("%Y%m%d%H")


@pytest.mark.parametrize("topic_count", [1, 4, 1 << 16, (1 << 16) + 1])
def test_rows_are_ordered_by_topic_keeping_log_order(topic_count: int) -> None:
    """The window's rows sorted by topic code keep log order within a topic, whether the
    codes fit the 16-bit radix sort or not (more topics than 65,536 in one window)."""
    codes = np.random.default_rng(topic_count).integers(
        0, topic_count, size=3 * topic_count + 100).astype(np.int32)
    order = columns._stable_order(codes, topic_count)
    assert order.tolist() == sorted(range(len(codes)), key=lambda row: (codes[row], row))
