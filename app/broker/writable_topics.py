"""Topics a produce may write: the write queue counts of topics checked writable (the produce
hot path reads them without a metadata look-up), creation through the log when a produce
names an unknown topic, and group consumption's retry and dead-letter topics."""

from __future__ import annotations

from collections.abc import Callable

from app.broker.metadata_log import MetadataLog
from store import MessageStore
from store.consumption.names import dlq_topic, retry_topic
from store.metadata import MetadataStore, TopicConfig, TopicNotFound
from store.metadata.log_records import TopicsPut
from store.metadata.topics import NewTopic, check_writable


class WritableTopics:
    def __init__(self, store: MessageStore, metadata_log: MetadataLog,
                 metadata: Callable[[], MetadataStore]) -> None:
        self._store = store
        self._metadata_log = metadata_log
        self._metadata = metadata
        # topic -> write queue count, for topics checked writable.
        self._queue_counts: dict[str, int] = {}

    def cached_queue_count(self, topic: str) -> int | None:
        return self._queue_counts.get(topic)

    def ensure(self, topic: str) -> int:
        """The topic's write queue count, creating the topic if allowed (MetadataError if not;
        MetadataWriteFailed when its creation could not be written). On a worker thread."""
        config = self._ensure_through_the_log(topic)
        check_writable(config)
        self._queue_counts[topic] = config.write_queue_count
        return config.write_queue_count

    def _ensure_through_the_log(self, topic: str) -> TopicConfig:
        metadata = self._metadata()
        config = metadata.cached_topic(name=topic)
        if config is not None:
            return config
        if not metadata.auto_create_topics:
            raise TopicNotFound(f"topic {topic!r} does not exist")
        self._create_missing({topic: metadata.default_queue_count})
        config = metadata.cached_topic(name=topic)
        assert config is not None, f"topic {topic} missing once applied"
        return config

    def changed(self, topic: str, write_queue_count: int | None = None) -> None:
        """After a topic is created or changed: the store routes to its new queue count."""
        self._queue_counts.pop(topic, None)
        if write_queue_count is not None:
            self._store.set_queue_count(topic, write_queue_count)

    def deleted(self, topic: str) -> None:
        self._queue_counts.pop(topic, None)

    def clear(self) -> None:
        self._queue_counts.clear()

    def timer_queue_count(self, topic: str) -> int | None:
        """Where a due delayed message goes: its topic's write queue count, None when the
        topic is gone."""
        count = self._queue_counts.get(topic)
        if count is not None:
            return count
        config = self._metadata().cached_topic(name=topic)
        return None if config is None else config.write_queue_count

    def pop_topics_exist(self, group: str, topic: str) -> bool:
        metadata = self._metadata()
        return metadata.cached_topic(name=retry_topic(group, topic)) is not None and \
            metadata.cached_topic(name=dlq_topic(group)) is not None

    def ensure_pop_topics(self, group: str, topic: str, retry_queue_count: int) -> None:
        """The group's retry topic for `topic` (its retry_queue_count queues) and its
        dead-letter topic exist: created through the log if not (whatever
        auto_create_topics says: they are the broker's). On a worker thread."""
        self._create_missing({retry_topic(group, topic): retry_queue_count, dlq_topic(group): 1})

    def _create_missing(self, wanted: dict[str, int]) -> None:
        """Create the topics of `wanted` (name -> queue count) that do not exist, through the
        log, in one record (a DLedger entry commits whole or not at all); stored and applied
        when it returns, or it raises."""
        metadata = self._metadata()
        if all(metadata.cached_topic(name=name) is not None for name in wanted):
            return
        with self._metadata_log.change_lock:
            missing = [name for name in wanted if metadata.cached_topic(name=name) is None]
            if missing:
                plan = metadata.plan_create_topics([NewTopic(name, wanted[name], wanted[name])
                                                    for name in missing])
                self._metadata_log.write_blocking(
                    plan if len(plan) == 1 else [TopicsPut(tuple(plan))])
