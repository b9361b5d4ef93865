"""A snapshot's manifest, and finding the complete snapshots under a root.

A snapshot is a directory `snapshot-<from>-<to>` (20-digit commit-log offsets) holding
`_manifest.json`; it is written under a temp name and renamed, so a directory with that name
and a valid manifest is complete. Anything else under the root is skipped with a warning.
"""

from __future__ import annotations

import json
import logging
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from store.paths import offset_to_name

log = logging.getLogger(__name__)

# 2: `msg_id` gave way to `store_host` (msg_id = hex(store_host + commit_log_offset)).
# 3: messages partitioned by store hour too (messages/topic=.../store_hour=YYYYMMDDHH/).
SCHEMA_VERSION = 3
READABLE_SCHEMA_VERSIONS = frozenset({1, 2, 3})
MANIFEST_NAME = "_manifest.json"
SNAPSHOT_PREFIX = "snapshot-"
TEMP_PREFIX = ".tmp-"


# The admin API's SnapshotManifestView (app/api/schemas/broker.py) repeats most of these fields
# on purpose: its shape is not this one (a `path`, no `broker_group` nor `extra`, no defaults)
# and its spec is fixed. A field added here reaches the API only when added there too.
@dataclass(frozen=True, slots=True)
class Manifest:
    snapshot_id: str
    broker_name: str
    broker_role: str
    range_from: int
    range_to: int
    message_count: int
    body_bytes: int
    include_bodies: bool
    topics: dict[str, int]
    metadata_rows: dict[str, int]
    replication_samples: int
    created_ms: int
    schema_version: int = SCHEMA_VERSION
    skipped_before_bytes: int = 0
    # The group a master and its slaves share (RocketMQ's brokerName): a report counts the
    # pair's copies of one message once. None in snapshots written before it existed.
    broker_group: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> Manifest:
        raw = json.loads(text)
        if not isinstance(raw, dict) or raw.get("schema_version") not in READABLE_SCHEMA_VERSIONS:
            raise ValueError("not a twinlog snapshot manifest of a known schema version")
        return cls(**raw)


def snapshot_dir_name(range_from: int, range_to: int) -> str:
    return f"{SNAPSHOT_PREFIX}{offset_to_name(range_from)}-{offset_to_name(range_to)}"


def read_manifest(directory: Path) -> Manifest | None:
    """The manifest of a complete snapshot directory, or None (with a warning naming it)."""
    try:
        manifest = Manifest.from_json((directory / MANIFEST_NAME).read_text())
    except (OSError, ValueError, TypeError) as error:
        log.warning("skipping %s: no valid %s (%s)", directory, MANIFEST_NAME, error)
        return None
    if directory.name != snapshot_dir_name(manifest.range_from, manifest.range_to):
        log.warning("skipping %s: its name does not match its manifest's range", directory)
        return None
    return manifest


def find_snapshots(root: Path) -> list[tuple[Path, Manifest]]:
    """Complete snapshots under `root`, in range order; temp and foreign entries skipped."""
    found = []
    if not root.is_dir():
        return []
    for entry in sorted(root.iterdir()):
        if entry.name.startswith(TEMP_PREFIX):
            continue  # an export in progress, or one that died: never read
        if not entry.is_dir() or not entry.name.startswith(SNAPSHOT_PREFIX):
            log.warning("skipping %s: not a snapshot directory", entry)
            continue
        manifest = read_manifest(entry)
        if manifest is not None:
            found.append((entry, manifest))
    found.sort(key=lambda item: (item[1].range_from, item[1].range_to))
    return found
