"""Snapshot export: commit-log ranges as Parquet, for the Spark report job (jobs/)."""

from store.snapshot.export import ExportRequest, SnapshotError, export_snapshot, metadata_rows
from store.snapshot.manifest import Manifest, find_snapshots, read_manifest

__all__ = [
    "ExportRequest",
    "Manifest",
    "SnapshotError",
    "export_snapshot",
    "find_snapshots",
    "metadata_rows",
    "read_manifest",
]
