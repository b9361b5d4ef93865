"""The metadata tables as a master serves them to a slave's sync (the bootstrap pull,
app/broker/slave_sync.py), each taken at one point of the log.

An export says which metadata records its rows reflect (`log_position`), where the log begins
(`min_offset`), and, with the consumer offsets, every queue's next offset there
(`queue_starts`), the queues' ends, and group consumption's states (store/consumption/
snapshot.py). Retention may remove files while these are read, and starts read for one min
offset while the log begins at a later one are low for the queues whose records lie between.
So the min offset is read first and again last: when it moved, the export is read again (at
most EXPORT_ATTEMPTS_MAX times; retention removes files once a round), and past that the
pull is refused (LogStartMoved) for the slave to retry.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from app.broker import pop_snapshots
from store.metadata import MetadataTable
from store.system_topics import METADATA_TOPIC

if TYPE_CHECKING:
    from app.broker.broker import Broker

EXPORT_ATTEMPTS_MAX = 3


class LogStartMoved(Exception):
    """Retention moved the log's start during every attempt of an export."""


def _nothing() -> None:
    return None


def table_export(broker: Broker, table: MetadataTable, *,
                 between: Callable[[], None] = _nothing) -> dict[str, Any]:
    """One table's export (TableExportView's fields). `between` runs after the tables are
    read and before the queues are (a seam: a test puts a retention round there)."""
    store, metadata = broker.store, broker.metadata_store
    for _ in range(EXPORT_ATTEMPTS_MAX):
        min_offset = store.min_offset
        with metadata.consistent_export():
            position = metadata.log_position
            export = metadata.export_table(table)
        between()
        about_queues: dict[str, Any] = {}
        if table is MetadataTable.CONSUMER_OFFSET:
            about_queues = _about_queues(broker, export["rows"], min_offset)
        metadata_min_queue_offset = store.first_retained_queue_offset(METADATA_TOPIC, 0)
        if store.min_offset != min_offset:
            continue  # retention removed files meanwhile: read it all again
        return {**export, **about_queues, "broker_group": broker.settings.broker_group,
                "log_position": {"queue_offset": position.queue_offset,
                                 "commit_log_offset": position.commit_log_offset},
                "metadata_min_queue_offset": metadata_min_queue_offset,
                "min_offset": min_offset}
    raise LogStartMoved(f"retention moved the log's start during {EXPORT_ATTEMPTS_MAX} reads "
                        "of the export; retry")


def _about_queues(broker: Broker, rows: list[dict[str, Any]],
                  min_offset: int) -> dict[str, Any]:
    """The consumer offsets' companions: the ends of the queues the rows name, every queue's
    start at `min_offset`, and group consumption's states (read after the tables: records
    they hold past the tables' position apply again as nothing on the slave)."""
    store = broker.store
    queue_ends = []
    for key in sorted({(row["topic"], row["queue_id"]) for row in rows}):
        end = store.queue_end(*key)
        if end is not None:
            queue_ends.append({"topic": key[0], "queue_id": key[1], "next_offset": end[0],
                               "last_record_offset": end[1]})
    starts = [{"topic": topic, "queue_id": queue_id, "queue_offset": queue_offset}
              for topic, queue_id, queue_offset in store.queues.starts_at(min_offset)]
    pop_queues, pop_counts = pop_snapshots.images(broker.consumption)
    return {"queue_ends": queue_ends, "queue_starts": starts,
            "pop_queues": [asdict(image) for image in pop_queues],
            "pop_counts": [asdict(image) for image in pop_counts]}
