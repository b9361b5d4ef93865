"""Where a report's input is: snapshots found under roots, and the files a time range reads.

A snapshot is a directory named snapshot-<from>-<to> (20-digit commit-log offsets) with a
valid _manifest.json; temp and foreign entries are skipped with a warning naming them. A
series is the directory holding snapshots, one broker's run of incremental exports; a gap is a
commit-log range between two consecutive snapshots of a series that no snapshot holds.

Paths may be URIs (`file:///data/snapshots`, or any scheme pyarrow and Spark both read, e.g.
`hdfs://` or `s3a://` with their libraries set up) or plain local paths, which are made
absolute `file://` URIs. The driver lists and reads manifests through pyarrow's filesystem
layer and hands Spark only URIs, so nothing depends on the driver's working directory: on a
cluster every executor reads the same URIs (they must reach them: a shared or object store,
or one machine).
"""

from __future__ import annotations

import json
import logging
import re
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
    (the export's store.snapshot.messages.store_hour, written again: the jobs package does not
    import the store)."""
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
