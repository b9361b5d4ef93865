"""Snapshot export and Spark report timings, each next to its baseline from the same run.

    python bench/snapshot.py            # N = 200,000 messages of 1 KiB
    python bench/snapshot.py --quick    # N = 20,000
    python bench/snapshot.py --export-only   # part 1 only: export next to the raw read

1. Export throughput (MB of commit log per second) on an idle machine, serial and spread over
   worker processes, next to a raw read of the same files: the median of ROUNDS rounds, each
   round reading, exporting serially and exporting over 2 workers in turn.
2. Produce throughput (messages/s, in-process batches of 64) alone, then while an export of
   the 2N log runs on another thread of the same process (as in the broker): without a
   budget, with `--budget-mb-s`, and with the budget over 2 worker processes.
3. The Spark report's time for N and for 2N messages on local[1] and on a standalone
   cluster (a master and two 1-core workers on loopback), each session warmed up first.
The load average is printed with the figures: on a shared machine they move with it.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")

from bench.common import header, row  # noqa: E402
from jobs.report.layout import discover  # noqa: E402
from jobs.report.tables import build_report, write_report  # noqa: E402
from store import Message, MessageStore, StoreConfig  # noqa: E402
from store.snapshot import ExportRequest, export_snapshot  # noqa: E402

MIB = 1 << 20
PRODUCE_S = 3.0
ROUNDS = 3
BODY = bytes(1024)


def _store(data_dir: Path, count: int) -> MessageStore:
    store = MessageStore(StoreConfig(data_dir=data_dir, mapped_file_size_bytes=256 * MIB))
    store.start()
    for start in range(0, count, 512):
        store.put_messages([Message(f"Topic{i % 4}", BODY, {"KEYS": f"k{i % 100}"})
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


def _export_mb_s(data_dir: Path, out: Path, **options: Any) -> float:
    started = time.perf_counter()
    manifest = export_snapshot(ExportRequest(data_dir, out, **options))
    return (manifest.range_to - manifest.range_from) / MIB / (time.perf_counter() - started)


def _produce_rate(store: MessageStore, seconds: float) -> float:
    """Messages per second put in batches of 64 for `seconds`."""
    batch = [Message("Live", BODY) for _ in range(64)]
    count = 0
    started = time.perf_counter()
    while time.perf_counter() - started < seconds:
        store.put_messages(batch)
        count += len(batch)
    return count / (time.perf_counter() - started)


def _produce_during_exports(store: MessageStore, data_dir: Path, out: Path,
                            **options: Any) -> tuple[float, float]:
    """Produce rate while exports of `data_dir` run back to back on another thread, and the
    exports' MB/s meanwhile."""
    done = threading.Event()
    exported: list[float] = []

    def export_loop() -> None:
        run = 0
        while not done.is_set():
            exported.append(_export_mb_s(data_dir, out / f"run-{run}", **options))
            run += 1

    exporter = threading.Thread(target=export_loop, name="bench-export")
    exporter.start()
    time.sleep(0.5)  # the export is under way (workers started) before produce is measured
    try:
        rate = _produce_rate(store, PRODUCE_S)
    finally:
        done.set()
        exporter.join()
    shutil.rmtree(out, ignore_errors=True)
    return rate, sum(exported) / max(1, len(exported))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--budget-mb-s", type=float, default=40.0)
    parser.add_argument("--no-cluster", action="store_true")
    parser.add_argument("--export-only", action="store_true",
                        help="only the export next to the raw read (part 1)")
    arguments = parser.parse_args()
    count = 20_000 if arguments.quick else 200_000
    base = Path(tempfile.mkdtemp(prefix="twinlog-bench-snapshot-"))
    try:
        store = _store(base / "data", 2 * count)
        log_end = store.max_offset
        store.shutdown()
        print(f"load average: {os.getloadavg()} on {os.cpu_count()} cores")
        header(f"snapshot export, {2 * count:,} messages of 1 KiB ({log_end / MIB:,.0f} MiB)")
        raw, serial, spread = _export_rounds(base, log_end)
        row(f"raw read of the commit-log files (baseline, median of {ROUNDS})", raw, "MB/s")
        row("export to Parquet, serial", serial, "MB/s", raw)
        row("export to Parquet, 2 worker processes", spread, "MB/s", raw, ">= 0.30 of raw")
        if not arguments.export_only:
            _produce_rows(base, arguments.budget_mb_s)
            _report_rows(base, count, not arguments.no_cluster)
        print(f"load average: {os.getloadavg()}")
    finally:
        shutil.rmtree(base, ignore_errors=True)


def _export_rounds(base: Path, log_end: int) -> tuple[float, float, float]:
    """Medians of ROUNDS rounds of (raw read, serial export, 2-worker export), taken in turn so
    that each figure and its baseline share the same stretch of a drifting machine."""
    _export_mb_s(base / "data", base / "warm-up", workers=2)  # starts the forkserver
    rounds = []
    for index in range(ROUNDS):
        raw = raw_read_mb_s(base / "data", log_end)
        serial = _export_mb_s(base / "data", base / f"serial-{index}")
        spread = _export_mb_s(base / "data", base / f"spread-{index}", workers=2)
        rounds.append((raw, serial, spread))
        print(f"    round {index + 1}: raw {raw:,.0f}, serial {serial:,.0f}, "
              f"2 workers {spread:,.0f} MB/s")
    raw, serial, spread = (statistics.median(column) for column in zip(*rounds, strict=True))
    return raw, serial, spread


def _produce_rows(base: Path, budget_mb_s: float) -> None:
    """Produce alone and during each kind of export, ROUNDS times in turn (the machine's load
    drifts: each figure is a median, taken over the same stretch of time as its baseline)."""
    live = MessageStore(StoreConfig(data_dir=base / "live", mapped_file_size_bytes=256 * MIB))
    live.start()
    budget = {"bytes_per_s": budget_mb_s * MIB}
    kinds: dict[str, dict[str, Any] | None] = {
        "no export": None,
        "no budget, serial": {},
        f"budget {budget_mb_s:.0f} MB/s, serial": budget,
        f"budget {budget_mb_s:.0f} MB/s, 2 workers": {**budget, "workers": 2},
    }
    rates: dict[str, list[float]] = {name: [] for name in kinds}
    exported: dict[str, list[float]] = {name: [] for name in kinds}
    try:
        _produce_rate(live, 1.0)  # warm-up: the first file allocated, the code paths hot
        for _ in range(ROUNDS):
            for name, options in kinds.items():
                if options is None:
                    rates[name].append(_produce_rate(live, PRODUCE_S))
                    continue
                rate, export_mb_s = _produce_during_exports(live, base / "data",
                                                            base / "busy", **options)
                rates[name].append(rate)
                exported[name].append(export_mb_s)
    finally:
        live.shutdown()
    header(f"produce during an export (batches of 64 x 1 KiB, {PRODUCE_S:.0f} s each, "
           f"medians of {ROUNDS} rounds)")
    alone = statistics.median(rates["no export"])
    row("produce, no export (baseline)", alone, "msg/s")
    for name in list(kinds)[1:]:
        row(f"produce during export, {name}", statistics.median(rates[name]), "msg/s", alone,
            ">= 0.80")
        row(f"  the export meanwhile, {name}", statistics.median(exported[name]), "MB/s")


def _report_rows(base: Path, count: int, with_cluster: bool) -> None:
    # Two roots: the first N messages, and all 2N (the half is a range of the same log).
    half_to = _offset_after(base / "data", count)
    export_snapshot(ExportRequest(base / "data", base / "half", range_to=half_to))
    shutil.move(base / "serial-0", base / "all")  # the whole log, from the export rounds
    header("Spark report, N and 2N messages")
    local = _report_times("local[1]", base)
    row(f"report local[1], N = {count:,} (baseline)", local[0] * 1000, "ms")
    row(f"report local[1], 2N = {2 * count:,}", local[1] * 1000, "ms", local[0] * 1000,
        "<= 2.2x")
    if not with_cluster:
        return
    from tests.support.spark_cluster import SparkCluster, environment

    os.environ.update(environment())
    cluster = SparkCluster(base / "cluster").start()
    try:
        remote = _report_times(cluster.master_url, base)
    finally:
        cluster.stop()
    row(f"report standalone (2 workers), N = {count:,}", remote[0] * 1000, "ms",
        local[0] * 1000)
    row(f"report standalone (2 workers), 2N = {2 * count:,}", remote[1] * 1000, "ms",
        local[1] * 1000)


def _report_times(master: str, base: Path) -> tuple[float, float]:
    """Seconds of the report over the N root and over the 2N root, after a warm-up."""
    from pyspark.sql import SparkSession

    builder = (SparkSession.builder.master(master).appName("twinlog-bench")
               .config("spark.ui.enabled", "false")
               .config("spark.driver.bindAddress", "127.0.0.1")
               .config("spark.driver.host", "127.0.0.1")
               .config("spark.sql.shuffle.partitions", "2"))
    if master.startswith("spark://"):
        builder = builder.config("spark.executor.memory", "512m").config(
            "spark.cores.max", "2")
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    try:
        tag = master.replace("/", "_").replace(":", "_")
        _report_s(spark, base / "half", base / f"warm-up-{tag}")
        return (_report_s(spark, base / "half", base / f"report-half-{tag}"),
                _report_s(spark, base / "all", base / f"report-all-{tag}"))
    finally:
        spark.stop()


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
