"""`twinlog export` and `twinlog report`: snapshots from a data dir, and the Spark report."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from store.paths import StorePaths


def _progress(done_bytes: int, total_bytes: int) -> None:
    percent = 100.0 * done_bytes / total_bytes if total_bytes else 100.0
    print(f"\rexported {done_bytes:,} / {total_bytes:,} bytes of log ({percent:5.1f}%)",
          end="" if done_bytes < total_bytes else "\n", file=sys.stderr, flush=True)


def _identity(arguments: argparse.Namespace, data_dir: Path) -> tuple[str, str, str | None]:
    """The broker's name, role and group for the manifest: the flags, else what the broker
    recorded in the data dir (store/broker_file.py), else the defaults, said on stderr."""
    from store.broker_file import read_broker_file

    recorded = read_broker_file(data_dir)
    if recorded is None and not (arguments.broker_name and arguments.broker_role):
        print(f"twinlog export: {StorePaths(data_dir).broker_file} is missing (a data dir "
              "from an older twinlog): the snapshot says broker 'broker', role ASYNC_MASTER "
              "unless --broker-name and --broker-role say otherwise", file=sys.stderr)
    name = arguments.broker_name or (recorded.broker_name if recorded else "broker")
    role = arguments.broker_role or (recorded.broker_role if recorded else "ASYNC_MASTER")
    group = arguments.broker_group or (recorded.broker_group if recorded else None)
    return name, role, group


def _export(arguments: argparse.Namespace) -> int:
    """Export a stopped or running broker's data dir, reading its files read-only."""
    from store.metadata import MetadataStore, sqlite_database_url
    from store.snapshot import ExportRequest, SnapshotError, export_snapshot, metadata_rows

    data_dir = Path(arguments.data_dir)
    broker_name, broker_role, broker_group = _identity(arguments, data_dir)
    rows: dict[str, list[dict[str, Any]]] = {}
    database = StorePaths(data_dir).metadata_database
    if database.exists():
        metadata = MetadataStore(sqlite_database_url(database))
        metadata.start()
        try:
            rows = metadata_rows(metadata)
        finally:
            metadata.stop()
    request = ExportRequest(
        data_dir=data_dir, out_root=Path(arguments.out), broker_name=broker_name,
        broker_role=broker_role, broker_group=broker_group,
        range_from=arguments.range_from, range_to=arguments.range_to,
        include_bodies=not arguments.no_bodies, metadata_rows=rows,
        progress=_progress if sys.stderr.isatty() else None,
    )
    try:
        manifest = export_snapshot(request)
    except (SnapshotError, FileNotFoundError) as error:
        print(f"twinlog export: {error}", file=sys.stderr)
        return 2
    print(manifest.to_json())
    return 0


def _report(arguments: argparse.Namespace) -> int:
    from jobs.snapshot_report import main as report_main

    options = [*arguments.paths, "--out", arguments.out, "--master", arguments.master]
    for flag, value in (("--from", arguments.time_from), ("--to", arguments.time_to)):
        if value is not None:
            options += [flag, value]
    return report_main([*options, *(["--incremental"] if arguments.incremental else [])])


def add_commands(commands: Any) -> None:
    export = commands.add_parser("export", help="export a data dir's log as a Parquet snapshot")
    export.add_argument("--data-dir", required=True)
    export.add_argument("--out", required=True, help="snapshot root directory")
    export.add_argument("--from", dest="range_from", type=int, default=None,
                        help="commit-log offset (default: where the last snapshot ended)")
    export.add_argument("--to", dest="range_to", type=int, default=None,
                        help="commit-log offset (default: the end of the log)")
    export.add_argument("--no-bodies", action="store_true", help="leave message bodies out")
    export.add_argument("--broker-name", help="this broker (default: what the broker recorded "
                                              "in the data dir, broker.json)")
    export.add_argument("--broker-role", help="its role (default: from broker.json)")
    export.add_argument("--broker-group", help="the group a master and its slaves share "
                                               "(default: from broker.json)")
    export.set_defaults(handler=_export)
    report = commands.add_parser("report", help="run the Spark snapshot report locally")
    report.add_argument("paths", nargs="+", help="snapshot roots or snapshot directories")
    report.add_argument("--out", required=True, help="report directory")
    report.add_argument("--master", default="local[*]", help="Spark master")
    report.add_argument("--from", dest="time_from", default=None,
                        help="messages stored at or after this ISO time (no zone: UTC); only "
                             "the files of its hours are read")
    report.add_argument("--to", dest="time_to", default=None,
                        help="messages stored before this ISO time (no zone: UTC)")
    report.add_argument("--incremental", action="store_true",
                        help="read only the snapshots OUT has not reported yet (state in OUT)")
    report.set_defaults(handler=_report)
