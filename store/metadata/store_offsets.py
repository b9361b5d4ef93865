"""Consumer offsets: commit, reset and read them (MetadataStore's offset part)."""

from __future__ import annotations

from store.metadata import offsets
from store.metadata.database import read_transaction
from store.metadata.models import (
    ConsumerOffset,
)
from store.metadata.offset_table import CommitOutcome
from store.metadata.offsets import OffsetKey, check_offset_key, check_offset_target
from store.metadata.rules import (
    check_queue_offset,
)
from store.metadata.store_base import MetadataStoreBase


class OffsetsMixin(MetadataStoreBase):
    """Consumer offsets: commit, reset and read them (MetadataStore's offset part)."""

    def commit_consumer_offset(
        self, *, group_name: str, topic: str, queue_id: int, queue_offset: int
    ) -> bool:
        """Move a group's offset forward in memory; True when it changed.

        Persisted with the next batch. Raises OffsetMovesBackwards for a lower offset (use
        reset_consumer_offset), InvalidOffset, and on a queue's first commit GroupNotFound,
        TopicNotFound, InvalidQueueId or a name error.
        """
        self._check_open()
        check_queue_offset(queue_offset)
        key = OffsetKey(group_name, topic, queue_id)
        now_ms = self._clock_ms()
        outcome = self._offsets.commit(key, queue_offset, now_ms=now_ms, allow_new=False)
        if outcome is CommitOutcome.UNKNOWN_KEY:
            # Keys in the table were checked when they entered it; a new one is checked once.
            check_offset_key(key)
            with self._write_lock:
                with read_transaction(self._engine) as session:
                    check_offset_target(session, key)
                outcome = self._offsets.commit(key, queue_offset, now_ms=now_ms, allow_new=True)
        return outcome is CommitOutcome.ADVANCED

    def reset_consumer_offset(
        self, *, group_name: str, topic: str, queue_id: int, queue_offset: int
    ) -> ConsumerOffset:
        """Set an offset in either direction, written to the database at once."""
        self._check_open()
        with self._write_lock:
            offsets.reset_consumer_offset(
                engine=self._engine,
                group_name=group_name,
                topic=topic,
                queue_id=queue_id,
                queue_offset=queue_offset,
                now_ms=self._clock_ms(),
            )
            stored = offsets.get_consumer_offset(
                engine=self._engine, group_name=group_name, topic=topic, queue_id=queue_id
            )
            assert stored is not None and stored.queue_offset == queue_offset, stored
            self._offsets.put_persisted([stored])
            return stored

    def get_consumer_offset(self, *, group_name: str, topic: str, queue_id: int) -> int | None:
        """The group's next offset in the queue (including unpersisted commits), None if none."""
        self._check_open()
        entry = self._offsets.entry(OffsetKey(group_name, topic, queue_id))
        return None if entry is None else entry[0]

    def consumer_offset(self, *, group_name: str, topic: str,
                        queue_id: int) -> ConsumerOffset | None:
        """The group's offset row of one queue (including unpersisted commits), None if none."""
        self._check_open()
        return self._offsets.get(OffsetKey(group_name, topic, queue_id))

    def consumer_offset_entry(self, *, group_name: str, topic: str,
                              queue_id: int) -> tuple[int, int] | None:
        """`consumer_offset` as (queue offset, updated at ms): the commit's answer."""
        self._check_open()
        return self._offsets.entry(OffsetKey(group_name, topic, queue_id))

    def list_consumer_offsets(
        self, *, group_name: str | None = None, topic: str | None = None
    ) -> list[ConsumerOffset]:
        self._check_open()
        return self._offsets.select(group_name=group_name, topic=topic)

    @property
    def pending_consumer_offset_count(self) -> int:
        return self._offsets.pending_count
