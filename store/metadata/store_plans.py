"""Plans: the records a request would write; the tables change when they apply."""

from __future__ import annotations

from collections.abc import Sequence

from store.metadata import groups, offsets, plans, topics
from store.metadata.log_records import (
    GroupDelete,
    GroupPut,
    OffsetSet,
    TopicDelete,
    TopicPut,
)
from store.metadata.offsets import OffsetKey
from store.metadata.rules import (
    check_queue_offset,
)
from store.metadata.store_base import MetadataStoreBase


class PlansMixin(MetadataStoreBase):
    """Plans: the records a request would write; the tables change when they apply."""

    def plan_create_topics(self, new_topics: Sequence[topics.NewTopic]) -> list[TopicPut]:
        self._check_open()
        return plans.create_topics(self._engine, new_topics, now_ms=self._clock_ms(),
                                   topics_max=self._topics_max,
                                   queues_per_topic_max=self._queues_per_topic_max)

    def plan_update_topic(self, *, name: str, read_queue_count: int | None = None,
                          write_queue_count: int | None = None,
                          permission: int | None = None) -> TopicPut | None:
        self._check_open()
        return plans.update_topic(self._engine, name, now_ms=self._clock_ms(),
                                  read_queue_count=read_queue_count,
                                  write_queue_count=write_queue_count, permission=permission,
                                  queues_per_topic_max=self._queues_per_topic_max)

    def plan_delete_topic(self, *, name: str) -> TopicDelete:
        self._check_open()
        return plans.delete_topic(self._engine, name, now_ms=self._clock_ms())

    def plan_create_group(self, *, name: str, consume_enabled: bool = True,
                          broadcast_enabled: bool = False,
                          retry_queue_count: int = groups.DEFAULT_RETRY_QUEUE_COUNT,
                          retry_times_max: int = groups.DEFAULT_RETRY_TIMES_MAX,
                          backoff: str = "", fifo: bool = False) -> GroupPut:
        self._check_open()
        plans.check_groups_max(self._engine, name, self._groups_max)
        return plans.create_group(self._engine, name, now_ms=self._clock_ms(),
                                  consume_enabled=consume_enabled,
                                  broadcast_enabled=broadcast_enabled,
                                  retry_queue_count=retry_queue_count,
                                  retry_times_max=retry_times_max, backoff=backoff, fifo=fifo,
                                  queues_per_topic_max=self._queues_per_topic_max)

    def plan_update_group(self, *, name: str, consume_enabled: bool | None = None,
                          broadcast_enabled: bool | None = None,
                          retry_queue_count: int | None = None,
                          retry_times_max: int | None = None,
                          backoff: str | None = None,
                          fifo: bool | None = None) -> GroupPut | None:
        self._check_open()
        return plans.update_group(self._engine, name, now_ms=self._clock_ms(),
                                  consume_enabled=consume_enabled,
                                  broadcast_enabled=broadcast_enabled,
                                  retry_queue_count=retry_queue_count,
                                  retry_times_max=retry_times_max, backoff=backoff, fifo=fifo,
                                  queues_per_topic_max=self._queues_per_topic_max)

    def plan_delete_group(self, *, name: str) -> GroupDelete:
        self._check_open()
        return plans.delete_group(self._engine, name, now_ms=self._clock_ms())

    def plan_offset(self, *, group_name: str, topic: str, queue_id: int, queue_offset: int,
                    reset: bool) -> OffsetSet | None:
        """A commit (forward only: OffsetMovesBackwards) or a reset; None when the offset is
        the group's already. A queue's first commit checks that its group, topic and queue
        exist (GroupNotFound, TopicNotFound, InvalidQueueId); later ones need no query."""
        known, change = self.plan_known_offset(group_name=group_name, topic=topic,
                                               queue_id=queue_id, queue_offset=queue_offset,
                                               reset=reset)
        if known:
            return change
        plans.check_offset(self._engine, OffsetKey(group_name, topic, queue_id))
        return OffsetSet(group_name, topic, queue_id, queue_offset, reset, self._clock_ms())

    def plan_known_offset(self, *, group_name: str, topic: str, queue_id: int,
                          queue_offset: int, reset: bool) -> tuple[bool, OffsetSet | None]:
        """`plan_offset` for a queue the group committed before, from one look-up of the
        table and no query (the commit's hot path): (True, the change, or None when the
        offset is the group's already). (False, None) for a queue's first commit, which
        `plan_offset` plans (it checks the group, topic and queue)."""
        self._check_open()
        check_queue_offset(queue_offset)
        key = OffsetKey(group_name, topic, queue_id)
        current = self._offsets.entry(key)
        if current is None:
            return False, None
        if current[0] == queue_offset:
            return True, None
        if not reset:
            offsets.check_moves_forward(key, current[0], queue_offset)
        return True, OffsetSet(group_name, topic, queue_id, queue_offset, reset,
                               self._clock_ms())
