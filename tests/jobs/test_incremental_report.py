"""The report run incrementally: each run reads only the snapshots its output directory has
not reported yet, and after two runs the tables equal one full run over every snapshot."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from jobs.report.incremental import STATE_NAME, run_incremental
from jobs.report.layout import discover
from jobs.report.tables import build_report, write_report
from jobs.snapshot_report import main
from store import Message, MessageStore
from store.metadata import MetadataStore, sqlite_database_url
from store.snapshot import ExportRequest, export_snapshot, metadata_rows
from tests.support.report_tables import report_tables
from tests.support.store import small_config, wait_dispatched

pytestmark = pytest.mark.jvm

pytest.importorskip("pyspark")

TOPICS = ("Orders", "Logs", "Audit")


def _produce(store: MessageStore, first: int, count: int) -> None:
    for index in range(first, first + count):
        store.put_message(Message(TOPICS[index % 3], b"p" * (20 + index % 200),
                                  {"KEYS": f"key{index % 6}"}, queue_id=index % 2))
    wait_dispatched(store)


def _samples(first: int) -> list[dict[str, Any]]:
    return [{"timestamp_ms": 1000 * i, "slave": "10.0.0.9:10912", "ack_offset": i,
             "diff_bytes": (i * 37) % 1000} for i in range(first, first + 50)]


class _NoSpark:
    """A Spark session that fails on any use: a run given it reads nothing."""

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"Spark used ({name}) by a run with nothing new")


def test_two_incremental_runs_equal_one_full_run(spark: Any, tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """Run 1 over the first snapshots and run 2 over those plus new ones (a master's next
    snapshot, and its slave's copy of a range run 1 counted) write the tables a full run over
    all writes; run 2 reads only the new snapshots, and a third run with nothing new touches
    no Spark at all (no Parquet file read) and leaves the state as it was."""
    root = tmp_path / "snapshots"
    master = root / "a" / "master"
    store = MessageStore(small_config(tmp_path / "master"))
    store.start()
    metadata = MetadataStore(sqlite_database_url(tmp_path / "meta.sqlite3"))
    metadata.start()
    try:
        _produce(store, 0, 300)
        metadata.create_group(name="billing")
        metadata.create_topic(name="Orders", read_queue_count=2, write_queue_count=2)
        metadata.commit_consumer_offset(group_name="billing", topic="Orders", queue_id=0,
                                        queue_offset=20)
        metadata.flush_consumer_offsets()
        request = ExportRequest(store.config.data_dir, master, broker_name="a-master",
                                broker_group="a", metadata_rows=metadata_rows(metadata),
                                replication_samples=_samples(0))
        first_end = export_snapshot(request).range_to
        _produce(store, 300, 200)
        export_snapshot(ExportRequest(**{**request.__dict__, "replication_samples": ()}))
        out = tmp_path / "incremental"
        read, _ = run_incremental(spark, discover([root]), out)
        assert len(read) == 2
        _produce(store, 500, 250)
        metadata.commit_consumer_offset(group_name="billing", topic="Orders", queue_id=0,
                                        queue_offset=90)
        metadata.flush_consumer_offsets()
        export_snapshot(ExportRequest(**{**request.__dict__,
                                         "metadata_rows": metadata_rows(metadata),
                                         "replication_samples": _samples(50)}))
    finally:
        metadata.stop()
        store.shutdown()
    shutil.copytree(tmp_path / "master" / "commitlog", tmp_path / "slave" / "commitlog")
    export_snapshot(ExportRequest(tmp_path / "slave", root / "a" / "slave", broker_name="a-slave",
                                  broker_role="SLAVE", broker_group="a", range_to=first_end))
    snapshots = discover([root])
    read, report = run_incremental(spark, snapshots, out)
    assert len(read) == 2 and len(snapshots) == 4  # the master's third, the slave's first
    assert report is not None
    assert sum(r.message_count for r in report["topics"].collect()) == 750
    write_report(build_report(spark, snapshots), tmp_path / "full")
    full = report_tables(tmp_path / "full")
    assert full["consumer_lag"] and full["replication_lag"][0]["sample_count"] == 100
    assert report_tables(out) == full
    state = (out / STATE_NAME).read_text()
    assert len(json.loads(state)["consumed"]) == 4
    assert [p.name for p in out.glob("_partials-*")] == [json.loads(state)["partials"]]
    assert run_incremental(_NoSpark(), snapshots, out) == ([], None)
    assert main([str(root), "--out", str(out), "--incremental"]) == 0
    assert "nothing new" in capsys.readouterr().out
    assert (out / STATE_NAME).read_text() == state
