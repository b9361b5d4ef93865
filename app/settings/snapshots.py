"""Snapshot settings: the broker group a snapshot names, where exports go, how often, how fast."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, Field


class SnapshotFields(BaseModel):
    """Settings of Parquet snapshot exports (a part of `Settings`)."""

    # -- snapshots -----------------------------------------------------------------------------
    broker_group: str = Field(
        "broker-a", min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.-]+$",
        description="the group a master and its slaves share (RocketMQ's brokerName); "
                    "snapshots carry it so that a report counts a pair's copies once")
    snapshot_dir: Path | None = Field(None, description="where Parquet snapshots go; default: "
                                      "snapshots/ in data_dir")
    snapshot_interval_s: float = Field(0.0, ge=0, description="export a snapshot this often "
                                       "on a master; 0: only on request")
    snapshot_export_bytes_per_s: int = Field(
        0, ge=0, description="the export reads the log no faster than this (0: no budget), "
        "so that produce keeps its throughput during an export on a busy broker")
    snapshot_export_workers: int = Field(
        1, ge=1, le=16, description="worker processes an export spreads its range over (1: "
        "on the broker's thread); more make an export of an idle broker faster")
    snapshot_include_bodies: bool = Field(True, description="snapshots carry message bodies "
                                          "(false: the body column is null)")
