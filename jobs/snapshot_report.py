"""Spark report over twinlog Parquet snapshots.

    spark-submit jobs/snapshot_report.py SNAPSHOT_ROOT_OR_DIR [...] --out REPORT_DIR
    python jobs/snapshot_report.py ... --master local[*]      (what `twinlog report` runs)

Reads every complete snapshot under the given roots (a directory named snapshot-<from>-<to>
with a valid _manifest.json; temp and foreign entries are skipped with a warning naming them),
dedupes messages by commit-log offset, and writes Parquet tables plus a summary on stdout:
per-topic counts, bytes, rate per minute and top keys; consumer lag per group and queue at the
latest snapshot; replication lag percentiles per slave. Self-contained on purpose: a cluster
gets this one file.

Paths may be URIs (`file:///data/snapshots`, or any scheme pyarrow and Spark both read, e.g.
`hdfs://` or `s3a://` with their libraries set up) or plain local paths, which are made
absolute `file://` URIs. The driver lists and reads manifests through pyarrow's filesystem
layer and hands Spark only URIs, so nothing depends on the driver's working directory: on a
cluster every executor reads the same URIs (they must reach them: a shared or object store,
or one machine).
"""

from __future__ import annotations

import argparse
import json
import logging
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pyarrow.fs as pafs

log = logging.getLogger("snapshot_report")

SCHEMA_VERSIONS = frozenset({1, 2})  # 2 replaced msg_id with store_host
_NAME = re.compile(r"snapshot-(\d{20})-(\d{20})")
TOP_KEYS = 5


def as_uri(location: str | Path) -> str:
    """A URI for a path or URI: plain paths become absolute file:// URIs."""
    text = str(location)
    if urlparse(text).scheme:
        return text.rstrip("/")
    return Path(text).resolve().as_uri()


@dataclass(frozen=True)
class Location:
    """A directory or file as a URI, with the pyarrow filesystem that reads it."""

    uri: str
    filesystem: pafs.FileSystem
    path: str  # inside `filesystem`

    @classmethod
    def of(cls, location: str | Path) -> Location:
        uri = as_uri(location)
        filesystem, path = pafs.FileSystem.from_uri(uri)
        return cls(uri, filesystem, path)

    @property
    def name(self) -> str:
        return self.path.rstrip("/").rsplit("/", 1)[-1]

    def child(self, name: str) -> Location:
        return Location(f"{self.uri}/{name}", self.filesystem, f"{self.path}/{name}")

    def kind(self) -> pafs.FileType:
        return self.filesystem.get_file_info(self.path).type

    def is_dir(self) -> bool:
        return bool(self.kind() == pafs.FileType.Directory)

    def exists(self) -> bool:
        return bool(self.kind() != pafs.FileType.NotFound)

    def children(self) -> list[Location]:
        infos = self.filesystem.get_file_info(pafs.FileSelector(self.path))
        return sorted((self.child(info.base_name) for info in infos), key=lambda c: c.name)

    def read_text(self) -> str:
        with self.filesystem.open_input_stream(self.path) as stream:
            return bytes(stream.read()).decode()


@dataclass(frozen=True)
class Snapshot:
    location: Location
    range_from: int
    range_to: int
    manifest: dict[str, Any]

    @property
    def uri(self) -> str:
        return self.location.uri


def discover(roots: list[str] | list[Path]) -> list[Snapshot]:
    """Complete snapshots under `roots` (each a root of snapshots or one snapshot; a path or
    a URI)."""
    found: dict[str, Snapshot] = {}
    for root in map(Location.of, roots):
        candidates = [root] if _NAME.fullmatch(root.name) else root.children()
        for entry in candidates:
            snapshot = _snapshot(entry)
            if snapshot is not None:
                found[entry.uri] = snapshot
    return sorted(found.values(), key=lambda s: (s.range_from, s.range_to))


def _snapshot(entry: Location) -> Snapshot | None:
    if entry.name.startswith(".tmp-"):
        return None  # an export in progress or one that died: never read, quietly
    match = _NAME.fullmatch(entry.name)
    if not entry.is_dir() or match is None:
        log.warning("skipping %s: not a snapshot directory", entry.uri)
        return None
    try:
        manifest = json.loads(entry.child("_manifest.json").read_text())
        valid = (manifest["schema_version"] in SCHEMA_VERSIONS
                 and (manifest["range_from"], manifest["range_to"])
                 == (int(match[1]), int(match[2])))
    except (OSError, ValueError, KeyError, TypeError) as error:
        log.warning("skipping %s: unreadable manifest (%s)", entry.uri, error)
        return None
    if not valid:
        log.warning("skipping %s: manifest does not match the directory", entry.uri)
        return None
    return Snapshot(entry, int(match[1]), int(match[2]), manifest)


def build_report(spark: Any, snapshots: list[Snapshot]) -> dict[str, Any]:
    """DataFrames of the report: topics, top_keys, consumer_lag, replication_lag."""
    from pyspark.sql import functions as F
    from pyspark.sql.window import Window

    # One read per snapshot (each is its own partitioned table), then one union.
    parts = [spark.read.option("basePath", f"{s.uri}/messages").parquet(f"{s.uri}/messages")
             for s in snapshots if s.location.child("messages").is_dir()]
    messages = parts[0]
    for part in parts[1:]:
        messages = messages.unionByName(part, allowMissingColumns=True)
    messages = messages.dropDuplicates(["commit_log_offset"])
    topics = (messages.groupBy("topic").agg(
        F.count(F.lit(1)).alias("message_count"),
        F.sum("size_bytes").alias("size_bytes"),
        F.min("store_timestamp_ms").alias("first_store_timestamp_ms"),
        F.max("store_timestamp_ms").alias("last_store_timestamp_ms"),
    ).withColumn(
        "rate_per_minute",
        F.col("message_count") / F.greatest(
            F.lit(1.0), (F.col("last_store_timestamp_ms") - F.col("first_store_timestamp_ms"))
            / F.lit(60_000.0)),
    ).orderBy("topic"))
    keyed = (messages.where(F.col("keys").isNotNull() & (F.col("keys") != ""))
             .select("topic", F.explode(F.split("keys", " ")).alias("key"))
             .where(F.col("key") != "")
             .groupBy("topic", "key").count())
    rank = Window.partitionBy("topic").orderBy(F.desc("count"), F.asc("key"))
    top_keys = (keyed.withColumn("rank", F.row_number().over(rank))
                .where(F.col("rank") <= TOP_KEYS).orderBy("topic", "rank"))
    queue_ends = messages.groupBy("topic", "queue_id").agg(
        (F.max("queue_offset") + 1).alias("max_queue_offset"))
    latest = snapshots[-1]
    offsets = latest.location.child("metadata").child("consumer_offset.parquet")
    consumer_lag = None
    if offsets.exists():
        committed = spark.read.parquet(offsets.uri)
        if "group_name" in committed.columns:
            consumer_lag = (committed.join(queue_ends, ["topic", "queue_id"], "left")
                            .select("group_name", "topic", "queue_id",
                                    F.col("queue_offset").alias("committed_offset"),
                                    F.coalesce("max_queue_offset", F.lit(0))
                                    .alias("max_queue_offset"))
                            .withColumn("lag", F.greatest(
                                F.lit(0), F.col("max_queue_offset") - F.col("committed_offset")))
                            .orderBy("group_name", "topic", "queue_id"))
    sample_paths = [f"{s.uri}/replication/diff_samples.parquet" for s in snapshots]
    samples = spark.read.parquet(*sample_paths)
    replication_lag = (samples.groupBy("slave").agg(
        F.count(F.lit(1)).alias("sample_count"),
        F.percentile_approx("diff_bytes", 0.5).alias("p50_diff_bytes"),
        F.percentile_approx("diff_bytes", 0.99).alias("p99_diff_bytes"),
        F.max("diff_bytes").alias("max_diff_bytes"),
        F.min("timestamp_ms").alias("first_timestamp_ms"),
        F.max("timestamp_ms").alias("last_timestamp_ms"),
    ).orderBy("slave"))
    return {"topics": topics, "top_keys": top_keys, "consumer_lag": consumer_lag,
            "replication_lag": replication_lag, "messages": messages}


def write_report(report: dict[str, Any], out: str | Path) -> None:
    out_uri = as_uri(out)
    for name in ("topics", "top_keys", "consumer_lag", "replication_lag"):
        frame = report[name]
        if frame is not None:
            frame.coalesce(1).write.mode("overwrite").parquet(f"{out_uri}/{name}")


def summary(report: dict[str, Any], snapshots: list[Snapshot]) -> str:
    lines = [f"snapshots: {len(snapshots)}, commit-log range "
             f"[{snapshots[0].range_from}, {snapshots[-1].range_to})"]
    lines.append("topic                     messages        bytes   per minute")
    for row in report["topics"].collect():
        lines.append(f"{row.topic:<24} {row.message_count:>9} {row.size_bytes:>12} "
                     f"{row.rate_per_minute:>12.1f}")
    if report["consumer_lag"] is not None:
        lag_rows = report["consumer_lag"].collect()
        lines.append(f"consumer lag: total {sum(r.lag for r in lag_rows)}, "
                     f"max {max((r.lag for r in lag_rows), default=0)}")
        for row in lag_rows:
            lines.append(f"  {row.group_name} {row.topic}/{row.queue_id}: {row.lag}")
    for row in report["replication_lag"].collect():
        lines.append(f"replication {row.slave}: p50 {row.p50_diff_bytes} B, "
                     f"p99 {row.p99_diff_bytes} B, max {row.max_diff_bytes} B "
                     f"({row.sample_count} samples)")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("paths", nargs="+", help="snapshot roots or snapshots (paths or URIs)")
    parser.add_argument("--out", required=True, help="report directory (a path or a URI)")
    parser.add_argument("--master", default=None, help="Spark master (spark-submit sets it)")
    arguments = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    snapshots = discover(arguments.paths)
    if not snapshots:
        print("no complete snapshot found", file=sys.stderr)
        return 2
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName("twinlog-snapshot-report")
    if arguments.master:
        builder = builder.master(arguments.master)
        if arguments.master.startswith("local"):
            # A local run stays on loopback: no driver port on the machine's other addresses.
            builder = (builder.config("spark.driver.bindAddress", "127.0.0.1")
                       .config("spark.driver.host", "127.0.0.1")
                       .config("spark.ui.enabled", "false"))
    spark = builder.getOrCreate()
    try:
        report = build_report(spark, snapshots)
        write_report(report, arguments.out)
        print(summary(report, snapshots))
    finally:
        spark.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
