from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

import pyarrow.dataset as ds
import pytest

from store import Message, MessageStore
from store.snapshot import ExportRequest, SnapshotError, export_snapshot, find_snapshots
from tests.store.conftest import wait_dispatched

OpenStore = Callable[..., MessageStore]


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
