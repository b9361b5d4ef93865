"""Spark report over twinlog Parquet snapshots.

    spark-submit jobs/snapshot_report.py SNAPSHOT_ROOT_OR_DIR [...] --out REPORT_DIR
    python jobs/snapshot_report.py ... --master local[*]      (what `twinlog report` runs)
    ... --from 2026-11-22T14:00 --to 2026-11-22T15:00          (a store-time range)
    ... --incremental                                          (only snapshots not reported)

Reads every complete snapshot under the given roots (a directory named snapshot-<from>-<to>
with a valid _manifest.json; temp and foreign entries are skipped with a warning naming them),
dedupes messages by commit-log offset, and writes Parquet tables plus a summary on stdout:
per-topic counts, bytes, rate per minute and top keys; consumer lag per group and queue at the
latest snapshot; replication lag percentiles per slave. Over a time range only the
store_hour partitions of its hours are read; incrementally only the snapshots the output
directory's `_state.json` does not list, merged into its partial tables (docs/spark.md).
Self-contained on purpose: a cluster gets this one file.

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
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pyarrow.fs as pafs

log = logging.getLogger("snapshot_report")

# 2 replaced msg_id with store_host; 3 partitions messages by store hour too.
SCHEMA_VERSIONS = frozenset({1, 2, 3})
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


@dataclass(frozen=True)
class TimeRange:
    """Messages stored in [from_ms, to_ms) (UTC epoch milliseconds); None: unbounded."""

    from_ms: int | None = None
    to_ms: int | None = None

    @classmethod
    def parse(cls, start: str | None, end: str | None) -> TimeRange | None:
        """From ISO 8601 times (no zone: UTC); None when neither is given."""
        if start is None and end is None:
            return None
        return cls(_epoch_ms(start), _epoch_ms(end))

    def holds_hour(self, hour: int) -> bool:
        """Whether the UTC hour YYYYMMDDHH may hold messages of the range."""
        return ((self.from_ms is None or hour >= store_hour(self.from_ms))
                and (self.to_ms is None or hour <= store_hour(self.to_ms - 1)))

    def condition(self) -> Any:
        from pyspark.sql import functions as F

        condition = F.lit(True)
        if self.from_ms is not None:
            condition &= F.col("store_timestamp_ms") >= F.lit(self.from_ms)
        if self.to_ms is not None:
            condition &= F.col("store_timestamp_ms") < F.lit(self.to_ms)
        return condition


def _epoch_ms(text: str | None) -> int | None:
    if text is None:
        return None
    moment = datetime.fromisoformat(text)
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return int(moment.timestamp() * 1000)


def store_hour(timestamp_ms: int) -> int:
    """The UTC hour of a store timestamp as YYYYMMDDHH, the `store_hour` partition's value
    (the export's store.snapshot.export.store_hour; this file stands alone)."""
    return int(datetime.fromtimestamp(timestamp_ms // 1000, UTC).strftime("%Y%m%d%H"))


_HOUR_DIR = re.compile(r"store_hour=(\d{10})")


def message_paths(snapshot: Snapshot, time_range: TimeRange | None) -> list[str]:
    """What Spark reads of a snapshot's messages: all of them, or over a time range only the
    store_hour directories of its hours (schema 3; older snapshots have no hour level and
    are read whole, then filtered). The driver lists the directories: nothing else is read."""
    messages = snapshot.location.child("messages")
    if not messages.is_dir():
        return []
    if time_range is None or int(snapshot.manifest["schema_version"]) < 3:
        return [messages.uri]
    return [hour.uri for topic in messages.children() if topic.is_dir()
            for hour in topic.children()
            if (match := _HOUR_DIR.fullmatch(hour.name)) and time_range.holds_hour(int(match[1]))]


def _messages(spark: Any, snapshot: Snapshot, paths: list[str]) -> Any:
    """A snapshot's messages (those under `paths`) with its broker group, and `store_host` on
    every schema (version 1 kept the msg_id instead: the hex of the store host's 8 bytes,
    then of the offset's)."""
    from pyspark.sql import functions as F

    frame = (spark.read.option("basePath", f"{snapshot.uri}/messages").parquet(*paths)
             .withColumn("broker_group", F.lit(snapshot.group)))
    if "store_host" not in frame.columns:
        frame = frame.withColumn("store_host", F.unhex(F.substring("msg_id", 1, 16)))
    return frame.drop("msg_id", "store_hour")


MESSAGE_COLUMNS = ("topic STRING, queue_id INT, queue_offset BIGINT, commit_log_offset BIGINT, "
                   "size_bytes INT, store_timestamp_ms BIGINT, keys STRING, "
                   "store_host BINARY, broker_group STRING")
# What a report keeps between incremental runs (every table merges by re-aggregating).
PARTIAL_COLUMNS = {
    "group_totals": "broker_group STRING, topic STRING, message_count BIGINT, "
                    "size_bytes BIGINT, first_store_timestamp_ms BIGINT, "
                    "last_store_timestamp_ms BIGINT",
    "key_counts": "topic STRING, key STRING, count BIGINT",
    "queue_ends": "broker_group STRING, topic STRING, queue_id INT, max_queue_offset BIGINT",
    "committed": "broker_group STRING, group_name STRING, topic STRING, queue_id INT, "
                 "queue_offset BIGINT, as_of_offset BIGINT, as_of_created_ms BIGINT",
    "samples": "timestamp_ms BIGINT, slave STRING, ack_offset BIGINT, diff_bytes BIGINT",
}


@dataclass(frozen=True)
class Covered:
    """A broker group's commit-log range reported already (an incremental run's state)."""

    group: str
    range_from: int
    range_to: int


def read_messages(spark: Any, snapshots: list[Snapshot], time_range: TimeRange | None = None,
                  covered: Sequence[Covered] = ()) -> Any:
    """The snapshots' messages, each once: a message is the record a store host wrote at an
    offset. A master and its slave hold byte copies (the same host field, the master's, at the
    same offset), so the pair counts once, while two masters of different groups reuse offsets
    under different hosts and both count. Messages of `covered` ranges are left out."""
    from pyspark.sql import functions as F

    parts = [_messages(spark, s, paths) for s in snapshots
             if (paths := message_paths(s, time_range))]
    if not parts:
        return spark.createDataFrame([], MESSAGE_COLUMNS)
    messages = parts[0]
    for part in parts[1:]:
        messages = messages.unionByName(part, allowMissingColumns=True)
    if time_range is not None:
        messages = messages.where(time_range.condition())
    for span in covered:
        messages = messages.where(~((F.col("broker_group") == F.lit(span.group))
                                    & (F.col("commit_log_offset") >= F.lit(span.range_from))
                                    & (F.col("commit_log_offset") < F.lit(span.range_to))))
    return messages.dropDuplicates(["store_host", "commit_log_offset"])


def partials(spark: Any, messages: Any, snapshots: list[Snapshot],
             with_state: bool = True) -> dict[str, Any]:
    """The mergeable tables of a report: per group and topic totals, key counts, queue ends,
    the newest committed offsets per group and the replication samples (the last three only
    `with_state`: a time-range report leaves lag out)."""
    from pyspark.sql import functions as F

    tables = {
        "group_totals": messages.groupBy("broker_group", "topic").agg(
            F.count(F.lit(1)).alias("message_count"),
            F.sum("size_bytes").cast("bigint").alias("size_bytes"),
            F.min("store_timestamp_ms").alias("first_store_timestamp_ms"),
            F.max("store_timestamp_ms").alias("last_store_timestamp_ms")),
        "key_counts": (messages.where(F.col("keys").isNotNull() & (F.col("keys") != ""))
                       .select("topic", F.explode(F.split("keys", " ")).alias("key"))
                       .where(F.col("key") != "")
                       .groupBy("topic", "key").agg(F.count(F.lit(1)).alias("count"))),
    }
    if with_state:
        tables["queue_ends"] = messages.groupBy("broker_group", "topic", "queue_id").agg(
            (F.max("queue_offset") + 1).alias("max_queue_offset"))
        tables["committed"] = _latest_offsets(spark, snapshots)
        tables["samples"] = _samples(spark, snapshots)
    return tables


def merge(first: dict[str, Any], second: dict[str, Any]) -> dict[str, Any]:
    """Two runs' partial tables as one run over both (their messages are disjoint)."""
    from pyspark.sql import functions as F
    from pyspark.sql.window import Window

    both = {name: first[name].unionByName(second[name]) for name in first}
    newest = Window.partitionBy("broker_group").orderBy(
        F.desc("as_of_offset"), F.desc("as_of_created_ms"))
    committed = both["committed"]
    return {
        "group_totals": both["group_totals"].groupBy("broker_group", "topic").agg(
            F.sum("message_count").alias("message_count"),
            F.sum("size_bytes").alias("size_bytes"),
            F.min("first_store_timestamp_ms").alias("first_store_timestamp_ms"),
            F.max("last_store_timestamp_ms").alias("last_store_timestamp_ms")),
        "key_counts": both["key_counts"].groupBy("topic", "key").agg(
            F.sum("count").alias("count")),
        "queue_ends": both["queue_ends"].groupBy("broker_group", "topic", "queue_id").agg(
            F.max("max_queue_offset").alias("max_queue_offset")),
        # The offsets of each group's newest snapshot that holds any, whichever run read it.
        "committed": (committed.withColumn("as_of", F.struct("as_of_offset", "as_of_created_ms"))
                      .withColumn("newest", F.first("as_of").over(newest))
                      .where(F.col("as_of") == F.col("newest")).drop("as_of", "newest")),
        "samples": both["samples"],
    }


def finish(tables: dict[str, Any]) -> dict[str, Any]:
    """The report's tables from its partial tables: topics (all groups), group_topics (per
    broker group), top_keys, and, when the partials hold state, consumer_lag (per group at
    its newest snapshot with offsets) and replication_lag."""
    from pyspark.sql import functions as F
    from pyspark.sql.window import Window

    totals = tables["group_totals"]
    topics = (totals.groupBy("topic").agg(
        F.sum("message_count").cast("bigint").alias("message_count"),
        F.sum("size_bytes").cast("bigint").alias("size_bytes"),
        F.min("first_store_timestamp_ms").alias("first_store_timestamp_ms"),
        F.max("last_store_timestamp_ms").alias("last_store_timestamp_ms"),
    ).withColumn(
        "rate_per_minute",
        F.col("message_count") / F.greatest(
            F.lit(1.0), (F.col("last_store_timestamp_ms") - F.col("first_store_timestamp_ms"))
            / F.lit(60_000.0)),
    ).orderBy("topic"))
    group_topics = (totals.select("broker_group", "topic",
                                  F.col("message_count").cast("bigint").alias("message_count"),
                                  F.col("size_bytes").cast("bigint").alias("size_bytes"))
                    .orderBy("broker_group", "topic"))
    rank = Window.partitionBy("topic").orderBy(F.desc("count"), F.asc("key"))
    top_keys = (tables["key_counts"].withColumn("rank", F.row_number().over(rank))
                .where(F.col("rank") <= TOP_KEYS).orderBy("topic", "rank"))
    report = {"topics": topics, "group_topics": group_topics, "top_keys": top_keys,
              "consumer_lag": None, "replication_lag": None}
    if "committed" in tables:
        report["consumer_lag"] = _consumer_lag(tables["committed"], tables["queue_ends"])
        report["replication_lag"] = _replication_lag(tables["samples"])
    return report


def _consumer_lag(committed: Any, queue_ends: Any) -> Any:
    from pyspark.sql import functions as F

    return (committed.join(queue_ends, ["broker_group", "topic", "queue_id"], "left")
            .select("broker_group", "group_name", "topic", "queue_id",
                    F.col("queue_offset").alias("committed_offset"),
                    F.coalesce("max_queue_offset", F.lit(0)).alias("max_queue_offset"))
            .withColumn("lag", F.greatest(
                F.lit(0), F.col("max_queue_offset") - F.col("committed_offset")))
            .orderBy("broker_group", "group_name", "topic", "queue_id"))


def _replication_lag(samples: Any) -> Any:
    from pyspark.sql import functions as F

    return (samples.groupBy("slave").agg(
        F.count(F.lit(1)).alias("sample_count"),
        F.percentile_approx("diff_bytes", 0.5).alias("p50_diff_bytes"),
        F.percentile_approx("diff_bytes", 0.99).alias("p99_diff_bytes"),
        F.max("diff_bytes").alias("max_diff_bytes"),
        F.min("timestamp_ms").alias("first_timestamp_ms"),
        F.max("timestamp_ms").alias("last_timestamp_ms"),
    ).orderBy("slave"))


def build_report(spark: Any, snapshots: list[Snapshot],
                 time_range: TimeRange | None = None) -> dict[str, Any]:
    """DataFrames of the report over `snapshots` (over a time range: the messages stored in
    it, read from the files of its hours only, and no lag tables), and its `messages`."""
    messages = read_messages(spark, snapshots, time_range)
    report = finish(partials(spark, messages, snapshots, with_state=time_range is None))
    report["messages"] = messages
    return report


def _samples(spark: Any, snapshots: list[Snapshot]) -> Any:
    from pyspark.sql import functions as F

    frame = spark.read.schema(PARTIAL_COLUMNS["samples"]).parquet(
        *(f"{s.uri}/replication/diff_samples.parquet" for s in snapshots))
    return frame.select(*(F.col(name) for name in ("timestamp_ms", "slave", "ack_offset",
                                                    "diff_bytes")))


def _latest_offsets(spark: Any, snapshots: list[Snapshot]) -> Any:
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
    committed = spark.createDataFrame([], PARTIAL_COLUMNS["committed"])
    for group, snapshot in sorted(newest.items()):
        offsets = snapshot.location.child("metadata").child("consumer_offset.parquet")
        if offsets.exists():
            frame = spark.read.parquet(offsets.uri)
            if "group_name" in frame.columns:
                committed = committed.unionByName(frame.select(
                    F.lit(group).alias("broker_group"), "group_name", "topic",
                    F.col("queue_id").cast("int"), F.col("queue_offset").cast("bigint"),
                    F.lit(snapshot.range_to).cast("bigint").alias("as_of_offset"),
                    F.lit(snapshot.manifest.get("created_ms", 0)).cast("bigint")
                    .alias("as_of_created_ms")))
    return committed


REPORT_TABLES = ("topics", "group_topics", "top_keys", "consumer_lag", "replication_lag")


def write_report(report: dict[str, Any], out: str | Path) -> None:
    out_uri = as_uri(out)
    for name in REPORT_TABLES:
        frame = report[name]
        if frame is not None:
            frame.coalesce(1).write.mode("overwrite").parquet(f"{out_uri}/{name}")


STATE_NAME = "_state.json"


@dataclass(frozen=True)
class State:
    """An incremental report's state in its output directory: the snapshots reported (by
    snapshot id) and the directory of the partial tables their report merges into."""

    consumed: dict[str, Covered]
    partials: str | None = None

    @classmethod
    def load(cls, out: Location) -> State:
        state_file = out.child(STATE_NAME)
        if not state_file.exists():
            return cls({})
        raw = json.loads(state_file.read_text())
        return cls({key: Covered(**value) for key, value in raw["consumed"].items()},
                   raw["partials"])

    def save(self, out: Location) -> None:
        """Written beside and renamed over the old state: a run that dies before the rename
        leaves the previous state, and the next run reads its snapshots again."""
        text = json.dumps({"consumed": {key: vars(value) for key, value in
                                        sorted(self.consumed.items())},
                           "partials": self.partials}, indent=1)
        temp = out.child(f".{STATE_NAME}.{uuid.uuid4().hex}")
        with out.filesystem.open_output_stream(temp.path) as stream:
            stream.write(text.encode())
        out.filesystem.move(temp.path, out.child(STATE_NAME).path)

    def covered(self) -> list[Covered]:
        """The consumed ranges, contiguous ones of a group joined (a short filter)."""
        joined: list[Covered] = []
        for span in sorted(self.consumed.values(),
                           key=lambda c: (c.group, c.range_from, c.range_to)):
            last = joined[-1] if joined else None
            if last is not None and last.group == span.group and span.range_from <= last.range_to:
                joined[-1] = Covered(span.group, last.range_from,
                                     max(last.range_to, span.range_to))
            else:
                joined.append(span)
        return joined


def snapshot_id(snapshot: Snapshot) -> str:
    return str(snapshot.manifest.get("snapshot_id") or snapshot.uri)


def not_reported(snapshots: list[Snapshot], out: str | Path) -> tuple[State, list[Snapshot]]:
    """The state in `out` and the snapshots it has not reported yet (the driver reads only
    the state file for this: no Parquet)."""
    state = State.load(Location.of(out))
    return state, [s for s in snapshots if snapshot_id(s) not in state.consumed]


def run_incremental(spark: Any, snapshots: list[Snapshot],
                    out: str | Path) -> tuple[list[Snapshot], dict[str, Any] | None]:
    """Report the snapshots `out` has not reported yet, merged into its earlier runs; the
    snapshots read and the report (None when nothing was new: then nothing is read). The
    messages of ranges reported already (a slave's copy of its master's, read earlier) are
    left out, so the totals equal one run over every snapshot."""
    state, new = not_reported(snapshots, out)
    if not new:
        return [], None
    location = Location.of(out)
    location.filesystem.create_dir(location.path)
    messages = read_messages(spark, new, covered=state.covered())
    tables = partials(spark, messages, new)
    if state.partials is not None:
        tables = merge(_read_partials(spark, location.child(state.partials)), tables)
    name = f"_partials-{uuid.uuid4().hex}"
    for table, frame in tables.items():
        frame.coalesce(1).write.parquet(f"{location.child(name).uri}/{table}")
    report = finish(_read_partials(spark, location.child(name)))
    write_report(report, out)
    consumed = {**state.consumed, **{snapshot_id(s): Covered(s.group, s.range_from, s.range_to)
                                     for s in new}}
    State(consumed, name).save(location)
    if state.partials is not None:
        location.filesystem.delete_dir(location.child(state.partials).path)
    return new, report


def _read_partials(spark: Any, directory: Location) -> dict[str, Any]:
    return {name: spark.read.schema(columns).parquet(directory.child(name).uri)
            for name, columns in PARTIAL_COLUMNS.items()}


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
        lines.append(f"replication {row.slave}: p50 {row.p50_diff_bytes} B, "
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
