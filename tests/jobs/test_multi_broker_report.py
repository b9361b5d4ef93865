"""One report over the snapshots of several brokers under one root (ROOT/<group>/<broker>/):
a master and its slave count once, two groups whose offsets overlap both count, per group and
per topic; a schema-1 snapshot reads beside schema-2 ones; a gap in a broker's series of
snapshots is reported."""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from jobs.report.layout import Gap, discover, gaps
from jobs.report.tables import build_report
from jobs.snapshot_report import summary
from store import Message, MessageStore
from store.metadata import MetadataStore, sqlite_database_url
from store.snapshot import ExportRequest, export_snapshot, metadata_rows
from tests.support.store import small_config, wait_dispatched

pytestmark = pytest.mark.jvm

pytest.importorskip("pyspark")

TOPICS = ("Orders", "Logs")


def _produce(store: MessageStore, count: int) -> dict[str, int]:
    counts = dict.fromkeys(TOPICS, 0)
    for index in range(count):
        topic = TOPICS[index % 2]
        result, _ = store.put_message(Message(topic, b"x" * (40 + index % 90), {},
                                              queue_id=0))
        assert result.status.name == "PUT_OK"
        counts[topic] += 1
    wait_dispatched(store)
    return counts


def _to_schema_1(snapshot: Path) -> None:
    """Rewrite a snapshot as schema 1 wrote it: msg_id (hex of the store host, then of the
    offset) instead of store_host, and no broker group in the manifest."""
    for part in (snapshot / "messages").rglob("*.parquet"):
        table = pq.read_table(part)
        hosts = table.column("store_host").to_pylist()
        offsets = table.column("commit_log_offset").to_pylist()
        ids = [host.hex().upper() + f"{offset:016X}" for host, offset in zip(hosts, offsets,
                                                                           strict=True)]
        table = table.drop_columns(["store_host"]).append_column("msg_id", pa.array(ids))
        pq.write_table(table, part)
    manifest_path = snapshot / "_manifest.json"
    manifest = json.loads(manifest_path.read_text())
    manifest["schema_version"] = 1
    manifest.pop("broker_group")
    manifest_path.write_text(json.dumps(manifest))


@pytest.fixture(scope="module")
def brokers(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    base = tmp_path_factory.mktemp("brokers")
    root = base / "snapshots"
    expected: dict[str, Any] = {}
    # Group a: a master, and its slave (a byte copy of the master's log, as replication
    # makes it), each exporting its own series; the slave's series has a gap.
    store_a = MessageStore(small_config(base / "a-master", store_host=("10.0.0.1", 10911)))
    store_a.start()
    metadata = MetadataStore(sqlite_database_url(base / "a-meta.sqlite3"))
    metadata.start()
    try:
        expected["a"] = _produce(store_a, 300)
        metadata.create_group(name="billing")
        metadata.create_topic(name="Orders", read_queue_count=1, write_queue_count=1)
        metadata.commit_consumer_offset(group_name="billing", topic="Orders", queue_id=0,
                                        queue_offset=100)
        metadata.flush_consumer_offsets()
        master = ExportRequest(store_a.config.data_dir, root / "a" / "master",
                               broker_name="a-master", broker_group="a")
        bounds = [export_snapshot(ExportRequest(**{**master.__dict__, "range_to": to}))
                  .range_to for to in (store_a.max_offset // 4, store_a.max_offset // 2)]
        export_snapshot(ExportRequest(**{**master.__dict__,
                                         "metadata_rows": metadata_rows(metadata)}))
    finally:
        metadata.stop()
        store_a.shutdown()
    shutil.copytree(base / "a-master" / "commitlog", base / "a-slave" / "commitlog")
    slave = ExportRequest(base / "a-slave", root / "a" / "slave", broker_name="a-slave",
                          broker_role="SLAVE", broker_group="a")
    export_snapshot(ExportRequest(**{**slave.__dict__, "range_to": bounds[0]}))
    export_snapshot(ExportRequest(**{**slave.__dict__, "range_from": bounds[1]}))
    expected["gap"] = tuple(bounds)
    # Group b: another master, whose offsets overlap a's, exported as schema 1.
    store_b = MessageStore(small_config(base / "b-master", store_host=("10.0.0.2", 10911)))
    store_b.start()
    try:
        expected["b"] = _produce(store_b, 200)
    finally:
        store_b.shutdown()
    export_snapshot(ExportRequest(base / "b-master", root / "b" / "master",
                                  broker_name="b-master", broker_group="b"))
    (old,) = (root / "b" / "master").iterdir()
    _to_schema_1(old)
    return root, expected


def test_master_and_slave_count_once_and_groups_apart(
        spark: Any, brokers: tuple[Path, dict[str, Any]],
        caplog: pytest.LogCaptureFixture) -> None:
    """Every message counts once per group (the slave's copies are deduped by store host
    and offset), the groups' overlapping offsets do not collapse, per-group tables and lag
    use only their own group's queues, and the slave's gap is reported."""
    root, expected = brokers
    snapshots = discover([root])
    assert len(snapshots) == 6
    assert {s.group for s in snapshots} == {"a", "b-master"}  # schema 1: its broker's name
    report = build_report(spark, snapshots)
    totals = {row.topic: row.message_count for row in report["topics"].collect()}
    assert totals == {t: expected["a"][t] + expected["b"][t] for t in TOPICS}
    per_group = {(row.broker_group, row.topic): row.message_count
                 for row in report["group_topics"].collect()}
    assert per_group == {**{("a", t): expected["a"][t] for t in TOPICS},
                         **{("b-master", t): expected["b"][t] for t in TOPICS}}
    (lag,) = report["consumer_lag"].collect()
    assert (lag.broker_group, lag.group_name, lag.topic, lag.lag) == (
        "a", "billing", "Orders", expected["a"]["Orders"] - 100)
    assert gaps(snapshots) == [Gap(f"{(root / 'a' / 'slave').as_uri()}", *expected["gap"])]
    with caplog.at_level(logging.WARNING):
        text = summary(report, snapshots)
    assert f"GAP in {(root / 'a' / 'slave').as_uri()}" in text
