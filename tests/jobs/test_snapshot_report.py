"""The Spark report over real snapshots, on a local[1] Spark; the job file run with Python, by
spark-submit on a standalone cluster and by `twinlog report`."""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import jobs.snapshot_report
from app.api.lag import queue_lag
from app.cli.main import main as twinlog
from jobs.report.layout import discover
from jobs.report.tables import build_report, write_report
from jobs.snapshot_report import main
from store import Message, MessageStore
from store.metadata import MetadataStore, sqlite_database_url
from store.snapshot import ExportRequest, export_snapshot, metadata_rows
from tests.support.child_lines import ChildLines
from tests.support.report_tables import report_tables as _tables
from tests.support.spark_cluster import SPARK_HOME, SparkCluster, environment
from tests.support.store import small_config, wait_dispatched

# Spark, and children: the killed export of `snapshot_root`, the job file, a cluster's JVMs.
pytestmark = [pytest.mark.jvm, pytest.mark.processes]

pyspark = pytest.importorskip("pyspark")
from pyspark.sql import Row, SparkSession  # noqa: E402
from pyspark.testing import assertDataFrameEqual  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
TOPICS = ("Orders", "Pay%ments", "Logs")


def _produce(store: MessageStore, start: int, count: int, expected: dict[str, Any]) -> None:
    for index in range(start, start + count):
        topic = TOPICS[index % 3]
        body = bytes([index % 256]) * (50 + index % 300)
        result, _ = store.put_message(Message(topic, body, {"KEYS": f"key{index % 4} all"},
                                              queue_id=index % 2))
        counts = expected.setdefault(topic, [0, 0])
        counts[0] += 1
        counts[1] += result.wrote_bytes
    wait_dispatched(store)


@pytest.fixture(scope="module")
def snapshot_root(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    """Two incremental snapshots with more messages between, a killed export, a foreign
    directory and a corrupt snapshot under one root."""
    base = tmp_path_factory.mktemp("report")
    store = MessageStore(small_config(base / "data"))
    store.start()
    metadata = MetadataStore(sqlite_database_url(base / "meta.sqlite3"))
    metadata.start()
    expected: dict[str, Any] = {}
    root = base / "snapshots"
    try:
        _produce(store, 0, 600, expected)
        samples = [{"timestamp_ms": 1000 * i, "slave": "10.0.0.2:10912", "ack_offset": i,
                    "diff_bytes": i * 10} for i in range(1, 101)]
        export_snapshot(ExportRequest(store.config.data_dir, root,
                                      replication_samples=samples))
        _produce(store, 600, 400, expected)
        metadata.create_group(name="billing")
        for topic in TOPICS:
            metadata.create_topic(name=topic, read_queue_count=2, write_queue_count=2)
            metadata.commit_consumer_offset(group_name="billing", topic=topic, queue_id=0,
                                            queue_offset=10)
        metadata.flush_consumer_offsets()
        export_snapshot(ExportRequest(store.config.data_dir, root,
                                      metadata_rows=metadata_rows(metadata)))
        expected["queue_ranges"] = {(t, q): store.queue_offset_range(t, q)
                                    for t in TOPICS for q in (0, 1)}
        expected["max_offset"] = store.max_offset
    finally:
        metadata.stop()
        store.shutdown()
    _killed_export(base / "data", root)
    (root / "not-a-snapshot").mkdir()
    corrupt = root / "snapshot-00000000000000000000-00000000000000000007"
    corrupt.mkdir()
    (corrupt / "_manifest.json").write_text("[]")
    return root, expected


def _killed_export(data_dir: Path, root: Path) -> None:
    """A real export process killed mid-way leaves only a temp directory behind."""
    script = (
        "import sys, time\n"
        "from pathlib import Path\n"
        "import store.snapshot.messages as e\n"
        "import store.snapshot.export as x\n"
        "original = e.MessageWriter.add\n"
        "def slow(self, record):\n"
        "    original(self, record)\n"
        "    if self.count >= 10:\n"
        "        print('HALFWAY', flush=True); time.sleep(60)\n"
        "e.MessageWriter.add = slow\n"
        "x.export_snapshot(x.ExportRequest(Path(sys.argv[1]), Path(sys.argv[2]),"
        " range_from=0))\n")
    child = subprocess.Popen([sys.executable, "-c", script, str(data_dir), str(root)],
                             stdout=subprocess.PIPE, text=True, cwd=ROOT,
                             env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        assert ChildLines(child).next() == "HALFWAY"
        child.send_signal(signal.SIGKILL)
    finally:
        child.wait(10)
    assert any(p.name.startswith(".tmp-") for p in root.iterdir())


@pytest.fixture(scope="module")
def local_report(spark: SparkSession, snapshot_root: tuple[Path, dict[str, Any]],
                 tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[dict[str, Any]]]:
    """The tables a local[1] run writes from `snapshot_root` (on the shared session): what
    every other way of running the job must write."""
    root, _ = snapshot_root
    out = tmp_path_factory.mktemp("local") / "report"
    write_report(build_report(spark, discover([root])), out)
    tables = _tables(out)
    assert tables["topics"] and tables["consumer_lag"]
    return tables


def test_report_counts_bytes_and_lag(spark: SparkSession,
                                     snapshot_root: tuple[Path, dict[str, Any]],
                                     caplog: pytest.LogCaptureFixture) -> None:
    """The job returns exactly the produced counts, bytes and lags, reading only the complete
    snapshots, whose union is the whole commit log with no duplicate and no gap."""
    root, expected = snapshot_root
    with caplog.at_level(logging.WARNING):
        snapshots = discover([root])
    assert len(snapshots) == 2
    assert "not-a-snapshot" in caplog.text and "00000000000000000007" in caplog.text
    assert snapshots[0].range_to == snapshots[1].range_from
    assert (snapshots[0].range_from, snapshots[1].range_to) == (0, expected["max_offset"])
    report = build_report(spark, snapshots)
    assertDataFrameEqual(
        report["topics"].select("topic", "message_count", "size_bytes"),
        [Row(topic=t, message_count=expected[t][0], size_bytes=expected[t][1])
         for t in sorted(TOPICS)])
    offsets = [r.commit_log_offset for r in report["messages"].select("commit_log_offset")
               .orderBy("commit_log_offset").collect()]
    assert len(offsets) == len(set(offsets)) == 1000
    sizes = dict(report["messages"].select("commit_log_offset", "size_bytes").collect())
    walk = offsets[0]
    for offset in offsets:  # contiguous records, or the blank at a file's end between
        assert offset == walk or offset % (64 * 1024) == 0
        walk = offset + sizes[offset]
    # Lag as the broker's lag endpoint counts it (app/api/lag.py), the same number: queue 1,
    # where billing never committed, lags from its first offset (it was left out before).
    assertDataFrameEqual(
        report["consumer_lag"].select("group_name", "topic", "queue_id", "committed_offset",
                                      "lag"),
        [Row(group_name="billing", topic=t, queue_id=q, committed_offset=10 if q == 0 else -1,
             lag=queue_lag(*expected["queue_ranges"][(t, q)], 10 if q == 0 else None))
         for t in sorted(TOPICS) for q in (0, 1)])
    assert all(row.lag > 0 for row in report["consumer_lag"].collect())
    lag = report["replication_lag"].collect()[0]
    assert (lag.slave, lag.sample_count, lag.max_diff_bytes) == ("10.0.0.2:10912", 100, 1000)
    assert lag.p50_diff_bytes == 500 and lag.p99_diff_bytes == 990
    top = report["top_keys"].where("topic = 'Orders' and rank = 1").collect()[0]
    assert top.key == "all"


def test_command_line_writes_the_report(snapshot_root: tuple[Path, dict[str, Any]],
                                        tmp_path: Path, spark: SparkSession,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    """The job's `main` called in-process with ROOT --out DIR writes Parquet and a summary,
    and leaves a Spark session it did not start running."""
    root, _ = snapshot_root
    started = time.monotonic()
    assert main([str(root), "--out", str(tmp_path / "report")]) == 0
    assert time.monotonic() - started < 120
    assert (tmp_path / "report" / "topics").is_dir()
    assert "Pay%ments" in capsys.readouterr().out
    # Run in a process that had a session, the job leaves that session running.
    assert spark.range(3).count() == 3


def test_twinlog_report_writes_the_local_report(
        snapshot_root: tuple[Path, dict[str, Any]], local_report: dict[str, Any],
        tmp_path: Path, spark: SparkSession, monkeypatch: pytest.MonkeyPatch) -> None:
    """`twinlog report ROOT --out DIR --master M` hands the job's `main` its paths, --out and
    --master, and writes the very tables local[1] writes. It runs in-process, on the shared
    session: the standalone-cluster test used to run it as a second job on the cluster (a
    driver JVM and two executors more, over a minute on two cores) for a command that only
    passes its arguments on; the cluster keeps spark-submit's job, and the job's `main` as a
    driver of its own, given --master, runs in test_job_file_runs_with_python."""
    root, _ = snapshot_root
    handed: list[list[str]] = []
    job_main = jobs.snapshot_report.main

    def recording(argv: list[str]) -> int:
        handed.append(argv)
        return job_main(argv)

    monkeypatch.setattr(jobs.snapshot_report, "main", recording)
    out = tmp_path / "cli"
    assert twinlog(["report", str(root), "--out", str(out), "--master", "local[1]"]) == 0
    (argv,) = handed
    assert argv[0] == str(root) and argv[argv.index("--out") + 1] == str(out)
    assert argv[argv.index("--master") + 1] == "local[1]"
    assert _tables(out) == local_report
    assert spark.range(3).count() == 3  # the shared session is still running


def test_job_file_runs_with_python(snapshot_root: tuple[Path, dict[str, Any]],
                                   tmp_path: Path) -> None:
    """`python jobs/snapshot_report.py ROOT --out DIR --master local[1]`, from another
    directory: the file imports its package (jobs.report) from the checkout on PYTHONPATH."""
    root, _ = snapshot_root
    ran = subprocess.run(
        [sys.executable, str(ROOT / "jobs" / "snapshot_report.py"), str(root),
         "--out", str(tmp_path / "report"), "--master", "local[1]"],
        cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True,
        text=True, timeout=300)
    assert ran.returncode == 0, ran.stderr[-4000:]
    assert "Pay%ments" in ran.stdout
    assert (tmp_path / "report" / "topics").is_dir()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkCluster]:
    """A standalone master and two workers, each its own JVM, on loopback."""
    started = SparkCluster(tmp_path_factory.mktemp("spark-cluster"))
    try:
        yield started.start()
    finally:
        started.stop()


@pytest.mark.timeout(900)  # master, workers, driver, executors: minutes on 2 loaded cores
def test_standalone_cluster_writes_the_local_report(
        local_report: dict[str, Any], snapshot_root: tuple[Path, dict[str, Any]],
        cluster: SparkCluster, tmp_path: Path) -> None:
    """`spark-submit --master spark://... --py-files twinlog-jobs.zip` of the job file runs on
    the two workers' executors and writes the very tables local[1] writes; the snapshots are
    given as file:// URIs (the executors read them, not the driver). spark-submit's driver has
    no checkout on its PYTHONPATH: the package comes from the zip, built as docs/spark.md
    says. One job on the cluster: `twinlog report` is checked in-process
    (test_twinlog_report_writes_the_local_report)."""
    root, _ = snapshot_root
    env = {**environment(), "PYSPARK_PYTHON": sys.executable,
           "PYSPARK_DRIVER_PYTHON": sys.executable}
    env.pop("PYTHONPATH", None)
    package = tmp_path / "twinlog-jobs.zip"
    subprocess.run([sys.executable, "-m", "zipfile", "-c", str(package), "jobs"], cwd=ROOT,
                   check=True, timeout=60)
    submitted = subprocess.run(
        [str(SPARK_HOME / "bin" / "spark-submit"), "--master", cluster.master_url,
         "--conf", "spark.ui.enabled=false", "--conf", "spark.executor.memory=512m",
         "--conf", "spark.sql.shuffle.partitions=4", "--total-executor-cores", "2",
         "--py-files", str(package), str(ROOT / "jobs" / "snapshot_report.py"), root.as_uri(),
         "--out", (tmp_path / "submitted").as_uri()],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert submitted.returncode == 0, submitted.stderr[-4000:]
    assert "Pay%ments" in submitted.stdout
    launched = [path for path in (cluster.work_dir).glob("worker-*.log")
                if "Asked to launch executor" in path.read_text(errors="replace")]
    assert len(launched) == 2, cluster.logs()
    assert _tables(tmp_path / "submitted") == local_report


def test_a_local_report_stays_on_loopback_and_draws_no_progress_bars(
        snapshot_root: tuple[Path, dict[str, Any]], tmp_path: Path) -> None:
    """`twinlog report` (the job's main) with SPARK_LOCAL_IP unset: the JVM of its local
    session runs with SPARK_LOCAL_IP=127.0.0.1 (Spark warned that the host name resolves to
    a loopback address), and console progress bars are off (they were drawn into the
    output); the report is written all the same."""
    root, _ = snapshot_root
    script = (
        "import json, sys\n"
        "import jobs.snapshot_report as job\n"
        "seen = {}\n"
        "build = job.build_report\n"
        "def probe(spark, snapshots, time_range=None):\n"
        "    seen['progress'] = spark.conf.get('spark.ui.showConsoleProgress')\n"
        "    seen['local_ip'] = spark.sparkContext._jvm.java.lang.System.getenv(\n"
        "        'SPARK_LOCAL_IP')\n"
        "    return build(spark, snapshots, time_range)\n"
        "job.build_report = probe\n"
        "from app.cli.main import main\n"
        "code = main(sys.argv[1:])\n"
        "print('SEEN ' + json.dumps(seen))\n"
        "raise SystemExit(code)\n")
    env = {key: value for key, value in os.environ.items() if key != "SPARK_LOCAL_IP"}
    ran = subprocess.run([sys.executable, "-c", script, "report", str(root), "--out",
                          str(tmp_path / "report"), "--master", "local[1]"], cwd=tmp_path,
                         env={**env, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True,
                         timeout=300)
    assert ran.returncode == 0, ran.stderr[-4000:]
    (seen,) = [line[5:] for line in ran.stdout.splitlines() if line.startswith("SEEN ")]
    assert json.loads(seen) == {"progress": "false", "local_ip": "127.0.0.1"}
    assert "[Stage" not in ran.stderr and "loopback address" not in ran.stderr
    assert (tmp_path / "report" / "topics").is_dir()


def test_replication_lag_is_keyed_by_the_slave_id(spark: SparkSession, tmp_path: Path) -> None:
    """A slave that reconnected has a new ephemeral address: its samples still make one row,
    keyed by its stable id, with the address it was last seen at; samples without an id
    (snapshots from before ids were sampled) stay keyed by their address."""
    store = MessageStore(small_config(tmp_path / "data"))
    store.start()
    try:
        _produce(store, 0, 10, {})
    finally:
        store.shutdown()
    slave_id = "ab" * 16
    samples = [{"timestamp_ms": 1000 * i, "slave": f"127.0.0.1:{40000 + i // 50}",
                "ack_offset": i, "diff_bytes": i, "slave_id": slave_id} for i in range(100)]
    samples += [{"timestamp_ms": 1000 * i, "slave": "10.0.0.9:10912", "ack_offset": i,
                 "diff_bytes": 0} for i in range(3)]
    export_snapshot(ExportRequest(tmp_path / "data", tmp_path / "snapshots",
                                  replication_samples=samples))
    report = build_report(spark, discover([tmp_path / "snapshots"]))
    rows = {row.slave_id: row for row in report["replication_lag"].collect()}
    assert sorted(rows) == ["10.0.0.9:10912", slave_id]
    reconnected = rows[slave_id]
    assert (reconnected.sample_count, reconnected.address_count, reconnected.slave) == (
        100, 2, "127.0.0.1:40001")
    assert reconnected.max_diff_bytes == 99
    assert (rows["10.0.0.9:10912"].sample_count, rows["10.0.0.9:10912"].slave) == (
        3, "10.0.0.9:10912")
