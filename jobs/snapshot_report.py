"""Spark report over twinlog Parquet snapshots.

    spark-submit --py-files twinlog-jobs.zip jobs/snapshot_report.py ROOT_OR_DIR [...] --out DIR
    twinlog report ROOT_OR_DIR [...] --out DIR --master M   (main in-process: the driver)
    python jobs/snapshot_report.py ... --master local[*]   (twinlog installed or on PYTHONPATH)
    ... --from 2026-11-22T14:00 --to 2026-11-22T15:00       (a store-time range)
    ... --incremental                                       (only snapshots not reported)

Reads every complete snapshot under the given roots (paths or URIs), dedupes messages by
store host and commit-log offset, and writes Parquet tables plus a summary on stdout:
per-topic counts, bytes, rate per minute and top keys; consumer lag per group and queue at the
latest snapshot; replication lag percentiles per slave. Over a time range only the
store_hour partitions of its hours are read; incrementally only the snapshots the output
directory's `_state.json` does not list, merged into its partial tables (docs/spark.md).

This file is the entry point (arguments, the Spark session, the summary); the report's code
is the package jobs.report: layout (finding snapshots), tables (the report), incremental (the
state between runs). The driver imports that package, so spark-submit is given the `jobs`
package as a zip with --py-files (docs/spark.md); run with python or by `twinlog report`,
the package must be importable (twinlog installed, or the checkout on PYTHONPATH).
Executors need none of it: the report is Spark SQL alone.
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import sys
from typing import Any

from jobs.report.incremental import not_reported, run_incremental
from jobs.report.layout import Snapshot, TimeRange, discover, gaps
from jobs.report.tables import build_report, write_report

log = logging.getLogger("snapshot_report")

# Where the report's dependencies come from: the README's install line and the extra's name.
MISSING_PYSPARK = ("PySpark is not installed: install twinlog's spark extra, pip install "
                   "'twinlog[spark]' (in a checkout: .venv/bin/pip install -e '.[spark]'); "
                   "Spark also needs Java 17")
MISSING_JAVA = ("Spark needs Java 17 and finds no java: install it (a JDK or JRE 17) or set "
                "JAVA_HOME")


def missing_dependency() -> str | None:
    """Why the driver cannot start Spark here (None: it can): PySpark not importable, or no
    Java for its JVM (spark-class takes JAVA_HOME, else `java` on PATH)."""
    try:
        import pyspark  # noqa: F401
    except ImportError:
        return MISSING_PYSPARK
    if not os.environ.get("JAVA_HOME") and shutil.which("java") is None:
        return MISSING_JAVA
    return None


def session(master: str | None) -> Any:
    """The job's Spark session: the active one when the process runs one (a notebook, a
    test), else a new one. No console progress bars: they would land in the summary's
    output. A local master stays on loopback: the driver binds 127.0.0.1 only, and
    SPARK_LOCAL_IP is 127.0.0.1 when unset (else Spark warns that the host name resolves
    to a loopback address and picks another interface's)."""
    from pyspark.sql import SparkSession

    builder = (SparkSession.builder.appName("twinlog-snapshot-report")
               .config("spark.ui.showConsoleProgress", "false"))
    if master:
        builder = builder.master(master)
        if master.startswith("local"):
            os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # read by the JVM's launcher
            builder = (builder.config("spark.driver.bindAddress", "127.0.0.1")
                       .config("spark.driver.host", "127.0.0.1")
                       .config("spark.ui.enabled", "false"))
    return builder.getOrCreate()


def summary(report: dict[str, Any], snapshots: list[Snapshot]) -> str:
    lines = [f"snapshots: {len(snapshots)} in {len({s.series for s in snapshots})} series, "
             f"{len({s.group for s in snapshots})} broker groups"]
    for series in sorted({s.series for s in snapshots}):
        members = [s for s in snapshots if s.series == series]
        lines.append(f"  {series}: [{min(s.range_from for s in members)}, "
                     f"{max(s.range_to for s in members)})")
    for gap in gaps(snapshots):
        lines.append(f"GAP in {gap.series}: commit-log range [{gap.range_from}, "
                     f"{gap.range_to}) is in no snapshot")
    lines.append("topic                     messages        bytes   per minute")
    for row in report["topics"].collect():
        lines.append(f"{row.topic:<24} {row.message_count:>9} {row.size_bytes:>12} "
                     f"{row.rate_per_minute:>12.1f}")
    for row in report["group_topics"].collect():
        lines.append(f"  group {row.broker_group} {row.topic}: {row.message_count} messages, "
                     f"{row.size_bytes} bytes")
    if report["consumer_lag"] is not None:
        lag_rows = report["consumer_lag"].collect()
        lines.append(f"consumer lag: total {sum(r.lag for r in lag_rows)}, "
                     f"max {max((r.lag for r in lag_rows), default=0)}")
        for row in lag_rows:
            lines.append(f"  {row.broker_group} {row.group_name} {row.topic}/{row.queue_id}: "
                         f"{row.lag}")
    for row in (report["replication_lag"].collect()
                if report["replication_lag"] is not None else []):
        lines.append(f"replication {row.slave_id} (at {row.slave}): p50 {row.p50_diff_bytes} B, "
                     f"p99 {row.p99_diff_bytes} B, max {row.max_diff_bytes} B "
                     f"({row.sample_count} samples)")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("paths", nargs="+", help="snapshot roots or snapshots (paths or URIs)")
    parser.add_argument("--out", required=True, help="report directory (a path or a URI)")
    parser.add_argument("--master", default=None, help="Spark master (spark-submit sets it)")
    parser.add_argument("--from", dest="time_from", default=None,
                        help="messages stored at or after this ISO time (no zone: UTC)")
    parser.add_argument("--to", dest="time_to", default=None,
                        help="messages stored before this ISO time (no zone: UTC)")
    parser.add_argument("--incremental", action="store_true",
                        help="read only the snapshots OUT has not reported yet, and merge")
    arguments = parser.parse_args(argv)
    missing = missing_dependency()
    if missing is not None:
        print(f"twinlog report: {missing}", file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    time_range = TimeRange.parse(arguments.time_from, arguments.time_to)
    if time_range is not None and arguments.incremental:
        parser.error("--incremental reports every message: not with --from/--to")
    snapshots = discover(arguments.paths)
    for gap in gaps(snapshots):
        log.warning("gap in %s: commit-log range [%d, %d) is in no snapshot", gap.series,
                    gap.range_from, gap.range_to)
    if not snapshots:
        print("no complete snapshot found", file=sys.stderr)
        return 2
    if arguments.incremental and not not_reported(snapshots, arguments.out)[1]:
        print(f"nothing new: all {len(snapshots)} snapshots are reported in {arguments.out}")
        return 0
    from pyspark.sql import SparkSession

    # Called in a process that already runs a session (a notebook, a test), the job uses it
    # and leaves it running: only a session it started is its to stop.
    already_running = SparkSession.getActiveSession()
    spark = session(arguments.master)
    try:
        if arguments.incremental:
            read, report = run_incremental(spark, snapshots, arguments.out)
            assert report is not None
            print(f"incremental: {len(read)} new snapshots of {len(snapshots)}")
        else:
            report = build_report(spark, snapshots, time_range)
            write_report(report, arguments.out)
        print(summary(report, snapshots))
    finally:
        if already_running is None:
            spark.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
