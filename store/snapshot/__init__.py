"""Snapshot export: commit-log ranges as Parquet, for the Spark report job (jobs/)."""

from store.snapshot.export import (
    ExportRequest,
    SnapshotError,
    SnapshotRangeRemoved,
    export_snapshot,
    metadata_rows,
)
from store.snapshot.manifest import Manifest, find_snapshots, read_manifest
from store.snapshot.sources import DirectoryLogFiles, HeldLogFiles, LogFiles

__all__ = [
    "DirectoryLogFiles",
    "ExportRequest",
    "HeldLogFiles",
    "LogFiles",
    "Manifest",
    "SnapshotError",
    "SnapshotRangeRemoved",
    "export_snapshot",
    "find_snapshots",
    "metadata_rows",
    "read_manifest",
]
