"""A report over a store-time range reads only the files of that range's hours (schema-3
snapshots are partitioned by topic and store hour), and equals the full report's messages
filtered to the range; an older snapshot without the hour level is read whole and filtered."""

from __future__ import annotations

import shutil
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

import pytest

from jobs.report.layout import TimeRange, discover, message_paths
from jobs.report.tables import build_report
from jobs.snapshot_report import main
from store import Message, MessageStore
from store.snapshot import ExportRequest, export_snapshot
from tests.support.store import small_config, wait_dispatched
from tests.support.store_clock import store_clock

pytestmark = pytest.mark.jvm

pytest.importorskip("pyspark")

HOUR_MS = 3_600_000
START_MS = 1_795_003_200_000  # 2026-11-18T12:00:00Z, an hour's start
TOPICS = ("Orders", "Logs", "Pay%ments")
RANGE = TimeRange(START_MS + HOUR_MS + HOUR_MS // 2, START_MS + 2 * HOUR_MS + 600_000)


def _produce(store: MessageStore, first: int, count: int,
             produced: list[dict[str, Any]]) -> None:
    """Messages spread over four store hours, 25 of them in a row per hour and topic mix."""
    with store_clock(START_MS) as clock:
        for index in range(first, first + count):
            clock.now_ms = START_MS + (index // 25) % 4 * HOUR_MS + index * 7_000 % HOUR_MS
            topic = TOPICS[index % 3]
            result, _ = store.put_message(Message(topic, b"v" * (30 + index % 70),
                                                  {"KEYS": f"k{index % 5}"}))
            produced.append({"topic": topic, "size_bytes": result.wrote_bytes,
                             "store_timestamp_ms": clock.now_ms, "key": f"k{index % 5}"})
    wait_dispatched(store)


def _as_schema_2(snapshot: Path) -> None:
    """The layout before store hours: every part file straight under its topic directory."""
    for topic in (snapshot / "messages").iterdir():
        for number, part in enumerate(sorted(topic.glob("store_hour=*/*.parquet"))):
            part.rename(topic / f"part-{number:05d}.parquet")
        for hour in list(topic.glob("store_hour=*")):
            shutil.rmtree(hour)
    manifest = snapshot / "_manifest.json"
    manifest.write_text(manifest.read_text().replace('"schema_version": 3',
                                                     '"schema_version": 2'))


@pytest.fixture(scope="module")
def hours_root(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[dict[str, Any]]]:
    """Group a: two incremental schema-3 snapshots; group b: one snapshot in the schema-2
    layout (no hour level)."""
    base = tmp_path_factory.mktemp("hours")
    root = base / "snapshots"
    produced: list[dict[str, Any]] = []
    for group, store_host in (("a", ("10.0.0.1", 10911)), ("b", ("10.0.0.2", 10911))):
        store = MessageStore(small_config(base / group, store_host=store_host))
        store.start()
        try:
            _produce(store, 0, 200, produced)
            request = ExportRequest(store.config.data_dir, root / group / "master",
                                    broker_name=f"{group}-master", broker_group=group)
            export_snapshot(request)
            if group == "a":
                _produce(store, 200, 200, produced)
                export_snapshot(request)
        finally:
            store.shutdown()
    (old,) = (root / "b" / "master").iterdir()
    _as_schema_2(old)
    return root, produced


def _hour(timestamp_ms: int) -> str:
    return datetime.fromtimestamp(timestamp_ms / 1000, UTC).strftime("%Y%m%d%H")


def test_range_reads_only_its_hours_files(spark: Any,
                                          hours_root: tuple[Path, list[dict[str, Any]]]) -> None:
    """The files Spark reads (inputFiles) for a range are every part file of the range's two
    hours in the schema-3 snapshots, none of another hour, plus the old snapshot's files."""
    root, _ = hours_root
    snapshots = discover([root])
    assert sorted(s.manifest["schema_version"] for s in snapshots) == [2, 3, 3]
    hours = {_hour(RANGE.from_ms or 0), _hour((RANGE.to_ms or 0) - 1)}
    assert len(hours) == 2
    every_part = {path for path in root.rglob("*.parquet") if "messages" in path.parts}
    expected = {path for path in every_part
                if path.parent.name in {f"store_hour={hour}" for hour in hours}
                or path.parent.name.startswith("topic=")}
    assert expected < every_part and len(expected) > 6  # hours of two snapshots, 3 topics
    read = build_report(spark, snapshots, RANGE)["messages"].inputFiles()
    assert set(map(_path, read)) == expected
    assert len(message_paths(snapshots[0], RANGE)) == 6  # 3 topics x 2 hours, listed
    full = build_report(spark, snapshots)["messages"].inputFiles()
    assert set(map(_path, full)) == every_part


def _path(uri: str) -> Path:
    return Path(unquote(urlparse(uri).path))


def test_range_report_is_the_full_report_filtered(
        spark: Any, hours_root: tuple[Path, list[dict[str, Any]]], tmp_path: Path) -> None:
    """Topic counts, bytes and top keys over a range are those of the produced messages
    stored in it, and its messages are the full report's filtered to it; `--from/--to` on
    the command line write the same, without lag tables."""
    root, produced = hours_root
    snapshots = discover([root])
    in_range = [m for m in produced
                if (RANGE.from_ms or 0) <= m["store_timestamp_ms"] < (RANGE.to_ms or 0)]
    assert 0 < len(in_range) < len(produced)
    report = build_report(spark, snapshots, RANGE)
    counts = Counter(m["topic"] for m in in_range)
    sizes = Counter({t: sum(m["size_bytes"] for m in in_range if m["topic"] == t)
                     for t in counts})
    assert {r.topic: (r.message_count, r.size_bytes) for r in report["topics"].collect()} == {
        t: (counts[t], sizes[t]) for t in counts}
    keys = Counter((m["topic"], m["key"]) for m in in_range)
    assert {(r.topic, r.key): r["count"] for r in report["top_keys"].collect()} == dict(keys)
    assert report["consumer_lag"] is None and report["replication_lag"] is None
    full = build_report(spark, snapshots)["messages"]
    filtered = full.where(RANGE.condition())
    columns = ["broker_group", "topic", "commit_log_offset", "store_timestamp_ms"]
    assert sorted(report["messages"].select(columns).collect()) == sorted(
        filtered.select(columns).collect())
    start = datetime.fromtimestamp((RANGE.from_ms or 0) / 1000, UTC).replace(tzinfo=None)
    end = datetime.fromtimestamp((RANGE.to_ms or 0) / 1000, UTC)
    assert main([str(root), "--out", str(tmp_path / "cli"), "--from", start.isoformat(),
                 "--to", end.isoformat()]) == 0
    import pyarrow.parquet as pq

    written = pq.read_table(tmp_path / "cli" / "topics").to_pylist()
    assert {r["topic"]: r["message_count"] for r in written} == dict(counts)
    assert not (tmp_path / "cli" / "consumer_lag").exists()
