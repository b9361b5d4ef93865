"""The `twinlog` command."""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict
from pathlib import Path

from store import MessageStore, StoreConfig, StoreError


def _store_info(arguments: argparse.Namespace) -> int:
    """Recover a stopped store's data dir and print what it holds."""
    config = StoreConfig(
        data_dir=Path(arguments.data_dir),
        mapped_file_size_bytes=arguments.mapped_file_size_bytes,
    )
    store = MessageStore(config)
    try:
        report = store.start()
    except StoreError as error:
        print(f"twinlog: {error}", file=sys.stderr)
        return 2
    try:
        topics = {
            topic: {str(q): store.queue_offset_range(topic, q) for q in queue_ids}
            for topic, queue_ids in store.queues.topics().items()
        }
        print(json.dumps({
            "recovery": asdict(report),
            "min_offset": store.min_offset,
            "max_offset": store.max_offset,
            "topics": topics,
        }, indent=2))
    finally:
        store.shutdown()
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="twinlog", description="twinlog: a replicated message store (RocketMQ-style)."
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    info = commands.add_parser("store-info", help="recover a data dir and print its offsets")
    info.add_argument("--data-dir", required=True)
    info.add_argument("--mapped-file-size-bytes", type=int, default=1 << 30)
    info.set_defaults(handler=_store_info)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    arguments = parser.parse_args(argv)
    if getattr(arguments, "handler", None) is None:
        parser.print_help()
        return 0
    return int(arguments.handler(arguments))


if __name__ == "__main__":
    raise SystemExit(main())
