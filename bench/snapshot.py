"""Snapshot export and Spark report timings, each next to its baseline from the same run.

    python bench/snapshot.py            # N = 200,000 messages of 1 KiB
    python bench/snapshot.py --quick    # N = 20,000

1. Export throughput (MB of commit log per second) next to a raw read of the same files.
2. The Spark report's time for N and for 2N messages (one local[1] session, warmed up first).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")

from bench.common import header, row  # noqa: E402
from jobs.snapshot_report import build_report, discover, write_report  # noqa: E402
from store import Message, MessageStore, StoreConfig  # noqa: E402
from store.snapshot import ExportRequest, export_snapshot  # noqa: E402

MIB = 1 << 20


def _store(data_dir: Path, count: int) -> MessageStore:
    store = MessageStore(StoreConfig(data_dir=data_dir, mapped_file_size_bytes=256 * MIB))
    store.start()
    body = bytes(1024)
    for start in range(0, count, 512):
        store.put_messages([Message(f"Topic{i % 4}", body, {"KEYS": f"k{i % 100}"})
                            for i in range(start, min(count, start + 512))])
    return store


def raw_read_mb_s(data_dir: Path, log_end: int) -> float:
    """Read the files' written bytes (not the sparse rest of the last file) in 8 MiB reads."""
    total = 0
    started = time.perf_counter()
    for path in sorted((data_dir / "commitlog").iterdir()):
        with open(path, "rb", buffering=0) as handle:
            while total < log_end and (chunk := handle.read(min(8 * MIB, log_end - total))):
                total += len(chunk)
    return total / MIB / (time.perf_counter() - started)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    arguments = parser.parse_args()
    count = 20_000 if arguments.quick else 200_000
    base = Path(tempfile.mkdtemp(prefix="twinlog-bench-snapshot-"))
    try:
        store = _store(base / "data", 2 * count)
        log_end = store.max_offset
        log_mb = log_end / MIB
        store.shutdown()
        header(f"snapshot export, {2 * count:,} messages of 1 KiB ({log_mb:,.0f} MiB of log)")
        raw = raw_read_mb_s(base / "data", log_end)
        started = time.perf_counter()
        manifest = export_snapshot(ExportRequest(base / "data", base / "all"))
        export_s = time.perf_counter() - started
        export_mb_s = (manifest.range_to - manifest.range_from) / MIB / export_s
        row("raw read of the commit-log files (baseline)", raw, "MB/s")
        row("export to Parquet", export_mb_s, "MB/s", raw, ">= 0.30 of raw read")
        # Two roots: the first N messages, and all 2N (the half is a range of the same log).
        half_to = _offset_after(base / "data", count)
        export_snapshot(ExportRequest(base / "data", base / "half", range_to=half_to))
        from pyspark.sql import SparkSession

        spark = (SparkSession.builder.master("local[1]").appName("twinlog-bench")
                 .config("spark.ui.enabled", "false")
                 .config("spark.driver.bindAddress", "127.0.0.1")
                 .config("spark.driver.host", "127.0.0.1")
                 .config("spark.sql.shuffle.partitions", "1").getOrCreate())
        spark.sparkContext.setLogLevel("ERROR")
        try:
            _report_s(spark, base / "half", base / "warm-up")
            half_s = _report_s(spark, base / "half", base / "report-half")
            full_s = _report_s(spark, base / "all", base / "report-all")
        finally:
            spark.stop()
        header("Spark report on local[1]")
        row(f"report, N = {count:,} messages (baseline)", half_s * 1000, "ms")
        row(f"report, 2N = {2 * count:,} messages", full_s * 1000, "ms", half_s * 1000,
            "<= 2.2x")
    finally:
        shutil.rmtree(base, ignore_errors=True)


def _report_s(spark: object, root: Path, out: Path) -> float:
    started = time.perf_counter()
    write_report(build_report(spark, discover([root])), out)
    return time.perf_counter() - started


def _offset_after(data_dir: Path, count: int) -> int:
    from store.snapshot.log_reader import iter_records, list_log_files, log_range

    files = list_log_files(data_dir / "commitlog")
    low, high = log_range(files)
    for index, record in enumerate(iter_records(files, low, high)):
        if index == count - 1:
            return record.commit_log_offset + record.total_size
    return high


if __name__ == "__main__":
    main()
