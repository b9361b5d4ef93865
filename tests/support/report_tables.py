"""A report directory's tables read back, to compare two runs' output."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from jobs.report.tables import REPORT_TABLES


def report_tables(out: Path) -> dict[str, list[dict[str, Any]]]:
    """Every table of a report directory as sorted rows."""
    import pyarrow.parquet as pq

    tables = {}
    for name in REPORT_TABLES:
        rows = pq.read_table(out / name).to_pylist()
        tables[name] = sorted(rows, key=lambda row: sorted(map(str, row.items())))
    return tables
