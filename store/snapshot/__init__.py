"""Snapshot export: commit-log ranges as Parquet, for the Spark report job (jobs/).

The export and the log readers (pyarrow, numpy: some 40 MB of a process) load when first
used, not when a broker imports this package for its errors and manifests: a broker that
never exports a snapshot never loads them (PEP 562 module `__getattr__`).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from store.snapshot.errors import SnapshotError, SnapshotRangeRemoved
from store.snapshot.manifest import Manifest, find_snapshots, read_manifest

if TYPE_CHECKING:
    from store.snapshot.export import ExportRequest, export_snapshot, metadata_rows
    from store.snapshot.sources import DirectoryLogFiles, HeldLogFiles, LogFiles

_LOADED_WHEN_USED = {
    "ExportRequest": "store.snapshot.export",
    "export_snapshot": "store.snapshot.export",
    "metadata_rows": "store.snapshot.export",
    "DirectoryLogFiles": "store.snapshot.sources",
    "HeldLogFiles": "store.snapshot.sources",
    "LogFiles": "store.snapshot.sources",
}


def __getattr__(name: str) -> Any:
    module = _LOADED_WHEN_USED.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


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
