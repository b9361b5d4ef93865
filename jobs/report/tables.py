"""The report's tables: the snapshots' messages read once each, the mergeable partial tables
built from them, and the report's tables finished from those.

Messages are deduped by (store host, commit-log offset): a master and its slave hold byte
copies and count once, two groups reusing offsets under different hosts both count. The
report: per-topic counts, bytes, rate per minute and top keys (over every group and per
broker group); consumer lag per group and queue at the group's newest snapshot with offsets;
replication lag percentiles per slave (by its stable id). Everything is Spark SQL: no Python
runs on executors.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jobs.report.layout import Snapshot, TimeRange, as_uri, message_paths

TOP_KEYS = 5


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
    "queue_ends": "broker_group STRING, topic STRING, queue_id INT, max_queue_offset BIGINT, "
                  "min_queue_offset BIGINT",
    "committed": "broker_group STRING, group_name STRING, topic STRING, queue_id INT, "
                 "queue_offset BIGINT, as_of_offset BIGINT, as_of_created_ms BIGINT",
    "samples": "timestamp_ms BIGINT, slave STRING, ack_offset BIGINT, diff_bytes BIGINT, "
               "slave_id STRING",
}


@dataclass(frozen=True)
class Covered:
    """A broker group's commit-log range reported already (an incremental run's state), whose
    messages read_messages leaves out."""

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
            (F.max("queue_offset") + 1).alias("max_queue_offset"),
            F.min("queue_offset").alias("min_queue_offset"))
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
            F.max("max_queue_offset").alias("max_queue_offset"),
            F.min("min_queue_offset").alias("min_queue_offset")),
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
    """Lag as the broker counts it (`GET /v1/groups/{group}/lag`, docs/metrics.md), per
    group and queue of every topic the group has committed on: the queue's end less the
    group's offset, or less the queue's first offset when the group has committed none on
    that queue (RocketMQ's consumerProgress counts such a queue from its start; what is gone
    is not lag), never below 0. committed_offset -1: no commit. A queue's first and end
    offsets are those of the messages the snapshots read hold."""
    from pyspark.sql import functions as F

    group_queue = ["broker_group", "group_name", "topic", "queue_id"]
    topics = committed.select("broker_group", "group_name", "topic").distinct()
    queues = (topics.join(queue_ends.select("broker_group", "topic", "queue_id"),
                          ["broker_group", "topic"])
              .unionByName(committed.select(*group_queue)).distinct())
    first = F.coalesce("min_queue_offset", F.lit(0))
    start = F.when(F.col("queue_offset").isNull(), first).otherwise(
        F.greatest(F.col("queue_offset"), first))
    return (queues.join(committed, group_queue, "left")
            .join(queue_ends, ["broker_group", "topic", "queue_id"], "left")
            .select(*group_queue,
                    F.coalesce("queue_offset", F.lit(-1)).cast("bigint").alias(
                        "committed_offset"),
                    F.coalesce("max_queue_offset", F.lit(0)).alias("max_queue_offset"),
                    F.greatest(F.lit(0), F.coalesce("max_queue_offset", F.lit(0)) - start)
                    .cast("bigint").alias("lag"))
            .orderBy(*group_queue))


def _replication_lag(samples: Any) -> Any:
    """Diff percentiles per slave, keyed by the slave's stable id (`slave_id`): its link's
    address changes on every reconnect, so one slave's history would split across rows.
    Samples taken before snapshots carried the id are keyed by their address. `slave` is
    the last address the slave was seen at, `address_count` how many it had."""
    from pyspark.sql import functions as F

    key = F.coalesce(F.nullif(F.col("slave_id"), F.lit("")), F.col("slave"))
    return (samples.withColumn("key", key).groupBy("key").agg(
        F.max_by("slave", "timestamp_ms").alias("slave"),
        F.countDistinct("slave").alias("address_count"),
        F.count(F.lit(1)).alias("sample_count"),
        F.percentile_approx("diff_bytes", 0.5).alias("p50_diff_bytes"),
        F.percentile_approx("diff_bytes", 0.99).alias("p99_diff_bytes"),
        F.max("diff_bytes").alias("max_diff_bytes"),
        F.min("timestamp_ms").alias("first_timestamp_ms"),
        F.max("timestamp_ms").alias("last_timestamp_ms"),
    ).withColumnRenamed("key", "slave_id").orderBy("slave_id"))


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
                                                    "diff_bytes", "slave_id")))


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
