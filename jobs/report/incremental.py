"""The report run incrementally: only the snapshots an output directory has not reported yet
are read, and their partial tables merged into those of the runs before.

The output directory holds `_state.json` (the snapshot ids reported, each with its broker
group and commit-log range, and the name of the partial tables' directory) beside the
report's tables and `_partials-<id>/`. Messages of a range a reported snapshot of the same
group covered already (a slave's copy of its master's) are left out, so the totals after any
number of runs equal one run over every snapshot (docs/spark.md).
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jobs.report.layout import Location, Snapshot
from jobs.report.tables import (
    PARTIAL_COLUMNS,
    Covered,
    finish,
    merge,
    partials,
    read_messages,
    write_report,
)

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
