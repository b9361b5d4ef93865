"""What a snapshot export refuses with (light: no Parquet library behind it)."""

from __future__ import annotations


class SnapshotError(Exception):
    """The export cannot be made as asked (a bad range, nothing to export, ...)."""


class SnapshotRangeRemoved(SnapshotError):
    """Retention removed the start of the range during the export, before any record of it
    was read: nothing was written, and the next export starts at the log's new start."""
