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
    series: str  # the directory holding it: one broker's run of incremental snapshots

    @property
    def uri(self) -> str:
        return self.location.uri

    @property
    def group(self) -> str:
        """The broker group (a master and its slaves); a snapshot from before groups were
        recorded counts as its own broker's group."""
        return str(self.manifest.get("broker_group") or self.manifest["broker_name"])


@dataclass(frozen=True)
class Gap:
    series: str
    range_from: int
    range_to: int


def discover(roots: list[str] | list[Path]) -> list[Snapshot]:
    """Complete snapshots under `roots`, each a snapshot or a directory holding snapshots at
    most DEPTH_MAX levels down (for example ROOT/<broker group>/<broker>/snapshot-...); a path
    or a URI. What is neither is skipped with a warning naming it."""
    found: dict[str, Snapshot] = {}
    for root in map(Location.of, roots):
        for snapshot in _walk(root, 0):
            found[snapshot.uri] = snapshot
    return sorted(found.values(), key=lambda s: (s.group, s.series, s.range_from, s.range_to))


DEPTH_MAX = 3


def _walk(entry: Location, depth: int) -> list[Snapshot]:
    if entry.name.startswith(".tmp-"):
        return []  # an export in progress or one that died: never read, quietly
    if _NAME.fullmatch(entry.name) or not entry.is_dir():
        snapshot = _snapshot(entry)
        return [] if snapshot is None else [snapshot]
    found = [snapshot for child in entry.children() if depth < DEPTH_MAX
             for snapshot in _walk(child, depth + 1)]
    if not found:
        log.warning("skipping %s: not a snapshot directory, and none below it", entry.uri)
    return found


def gaps(snapshots: list[Snapshot]) -> list[Gap]:
    """Commit-log ranges missing between consecutive snapshots of one series (a broker's
    exports under one directory): reported, never silently skipped."""
    missing = []
    by_series: dict[str, list[Snapshot]] = {}
    for snapshot in snapshots:
        by_series.setdefault(snapshot.series, []).append(snapshot)
    for series, members in sorted(by_series.items()):
        members.sort(key=lambda s: s.range_from)
        for before, after in zip(members, members[1:], strict=False):
            if after.range_from > before.range_to:
                missing.append(Gap(series, before.range_to, after.range_from))
    return missing


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
    series = entry.uri.rsplit("/", 1)[0]
    return Snapshot(entry, int(match[1]), int(match[2]), manifest, series)


def _messages(spark: Any, snapshot: Snapshot) -> Any:
    """One snapshot's messages with its broker group, and `store_host` on every schema
    (version 1 kept the msg_id instead: the hex of the store host's 8 bytes, then of the
    offset's)."""
    from pyspark.sql import functions as F

    frame = (spark.read.option("basePath", f"{snapshot.uri}/messages")
             .parquet(f"{snapshot.uri}/messages")
             .withColumn("broker_group", F.lit(snapshot.group)))
    if "store_host" not in frame.columns:
        frame = frame.withColumn("store_host", F.unhex(F.substring("msg_id", 1, 16)))
    return frame.drop("msg_id")


def build_report(spark: Any, snapshots: list[Snapshot]) -> dict[str, Any]:
    """DataFrames of the report: topics (all groups), group_topics (per broker group),
    top_keys, consumer_lag (per group at its latest snapshot), replication_lag."""
    from pyspark.sql import functions as F
    from pyspark.sql.window import Window

    # One read per snapshot (each is its own partitioned table), then one union. A message is
    # the record a store host wrote at an offset: a master and its slave hold byte copies (the
    # same host field, the master's, at the same offset), so the pair counts once, while two
    # masters of different groups reuse offsets under different hosts and both count.
    parts = [_messages(spark, s) for s in snapshots if s.location.child("messages").is_dir()]
    messages = parts[0]
    for part in parts[1:]:
        messages = messages.unionByName(part, allowMissingColumns=True)
    messages = messages.dropDuplicates(["store_host", "commit_log_offset"])
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
    group_topics = (messages.groupBy("broker_group", "topic").agg(
        F.count(F.lit(1)).alias("message_count"), F.sum("size_bytes").alias("size_bytes"))
        .orderBy("broker_group", "topic"))
    keyed = (messages.where(F.col("keys").isNotNull() & (F.col("keys") != ""))
             .select("topic", F.explode(F.split("keys", " ")).alias("key"))
             .where(F.col("key") != "")
             .groupBy("topic", "key").count())
    rank = Window.partitionBy("topic").orderBy(F.desc("count"), F.asc("key"))
    top_keys = (keyed.withColumn("rank", F.row_number().over(rank))
                .where(F.col("rank") <= TOP_KEYS).orderBy("topic", "rank"))
    queue_ends = messages.groupBy("broker_group", "topic", "queue_id").agg(
        (F.max("queue_offset") + 1).alias("max_queue_offset"))
    committed = _latest_offsets(spark, snapshots)
    consumer_lag = None
    if committed is not None:
        consumer_lag = (committed.join(queue_ends, ["broker_group", "topic", "queue_id"], "left")
                            .select("broker_group", "group_name", "topic", "queue_id",
                                    F.col("queue_offset").alias("committed_offset"),
                                    F.coalesce("max_queue_offset", F.lit(0))
                                    .alias("max_queue_offset"))
                            .withColumn("lag", F.greatest(
                                F.lit(0), F.col("max_queue_offset") - F.col("committed_offset")))
                            .orderBy("broker_group", "group_name", "topic", "queue_id"))
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
    return {"topics": topics, "group_topics": group_topics, "top_keys": top_keys,
            "consumer_lag": consumer_lag, "replication_lag": replication_lag,
            "messages": messages}


def _latest_offsets(spark: Any, snapshots: list[Snapshot]) -> Any | None:
    """The consumer offsets of each broker group's newest snapshot that holds any (by
    commit-log end, then by creation: a master and its synced slave export the same ones)."""
    from pyspark.sql import functions as F

    newest: dict[str, Snapshot] = {}
    for snapshot in snapshots:
        if not snapshot.manifest.get("metadata_rows", {}).get("consumer_offset"):
            continue
        current = newest.get(snapshot.group)
        key = (snapshot.range_to, snapshot.manifest.get("created_ms", 0))
        if current is None or key > (current.range_to, current.manifest.get("created_ms", 0)):
            newest[snapshot.group] = snapshot
    frames = []
    for group, snapshot in sorted(newest.items()):
        offsets = snapshot.location.child("metadata").child("consumer_offset.parquet")
        if offsets.exists():
            frame = spark.read.parquet(offsets.uri)
            if "group_name" in frame.columns:
                frames.append(frame.select("group_name", "topic", "queue_id", "queue_offset")
                              .withColumn("broker_group", F.lit(group)))
    if not frames:
        return None
    committed = frames[0]
    for frame in frames[1:]:
        committed = committed.unionByName(frame)
    return committed


def write_report(report: dict[str, Any], out: str | Path) -> None:
    out_uri = as_uri(out)
    for name in ("topics", "group_topics", "top_keys", "consumer_lag", "replication_lag"):
        frame = report[name]
        if frame is not None:
            frame.coalesce(1).write.mode("overwrite").parquet(f"{out_uri}/{name}")


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
    for gap in gaps(snapshots):
        log.warning("gap in %s: commit-log range [%d, %d) is in no snapshot", gap.series,
                    gap.range_from, gap.range_to)
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
    # Called in a process that already runs a session (a notebook, a test), the job uses it
    # and leaves it running: only a session it started is its to stop.
    already_running = SparkSession.getActiveSession()
    spark = builder.getOrCreate()
    try:
        report = build_report(spark, snapshots)
        write_report(report, arguments.out)
        print(summary(report, snapshots))
    finally:
        if already_running is None:
            spark.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
