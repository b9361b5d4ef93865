"""Topics: create, update, delete and read them (MetadataStore's topic part)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from store.metadata import topics
from store.metadata.errors import TopicNotFound
from store.metadata.models import (
    READ_WRITE,
    TopicConfig,
)
from store.metadata.rules import (
    check_queue_count_cap,
    check_topic_name,
)
from store.metadata.store_base import MetadataStoreBase


class TopicsMixin(MetadataStoreBase):
    """Topics: create, update, delete and read them (MetadataStore's topic part)."""

    def ensure_writable_topic(self, *, name: str) -> TopicConfig:
        """For each produce: the topic's config, auto-created if allowed, refused unless writable.

        Raises InvalidTopicName, TopicNotFound (auto-creation off), TopicsMaxReached or
        TopicNotWritable.
        """
        self._check_open()
        topic = self._view.topic(name)
        if topic is None:
            with self._write_lock:
                topic = topics.find_or_create_topic(
                    engine=self._engine,
                    name=name,
                    auto_create_topics=self._auto_create_topics,
                    now_ms=self._clock_ms(),
                    default_queue_count=self._default_queue_count,
                    topics_max=self._topics_max,
                )
                self._view.put_topic(topic)
        topics.check_writable(topic)
        return topic.model_copy()

    @property
    def default_queue_count(self) -> int:
        return self._default_queue_count

    def create_topic(
        self,
        *,
        name: str,
        read_queue_count: int | None = None,
        write_queue_count: int | None = None,
        permission: int = READ_WRITE,
    ) -> TopicConfig:
        """Create a topic; queue counts default to default_queue_count."""
        return self.create_topics([topics.NewTopic(
            name,
            self._default_queue_count if read_queue_count is None else read_queue_count,
            self._default_queue_count if write_queue_count is None else write_queue_count,
            permission,
        )])[0]

    def create_topics(self, new_topics: Sequence[topics.NewTopic]) -> list[TopicConfig]:
        """Create every topic or none, in one transaction (bounded by topics_max together)."""
        self._check_open()
        for topic in new_topics:
            self._check_queue_counts(topic.read_queue_count, topic.write_queue_count)
        with self._write_lock:
            created = topics.create_topics(engine=self._engine, topics=new_topics,
                                           now_ms=self._clock_ms(), topics_max=self._topics_max)
            for config in created:
                self._view.put_topic(config)
            return [config.model_copy() for config in created]

    def _check_queue_counts(self, read_queue_count: int | None,
                            write_queue_count: int | None) -> None:
        for field, count in (("read_queue_count", read_queue_count),
                             ("write_queue_count", write_queue_count)):
            if count is not None:
                check_queue_count_cap(field, count, self._queues_per_topic_max)

    def update_topic(
        self,
        *,
        name: str,
        read_queue_count: int | None = None,
        write_queue_count: int | None = None,
        permission: int | None = None,
    ) -> TopicConfig:
        self._check_open()
        self._check_queue_counts(read_queue_count, write_queue_count)
        with self._write_lock:
            updated = topics.update_topic(
                engine=self._engine,
                name=name,
                now_ms=self._clock_ms(),
                read_queue_count=read_queue_count,
                write_queue_count=write_queue_count,
                permission=permission,
            )
            self._view.put_topic(updated)
            return updated.model_copy()

    def delete_topic(self, *, name: str) -> None:
        """Delete a topic and its consumer offsets (stored and pending)."""
        self._check_open()
        with self._write_lock:
            topics.delete_topic(engine=self._engine, name=name, now_ms=self._clock_ms())
            self._view.drop_topic(name)
            self._offsets.forget(topic=name)

    def cached_topic(self, *, name: str) -> TopicConfig | None:
        """The topic's config (from the view; no query), None when there is no such topic."""
        self._check_open()
        topic = self._view.topic(name)
        return None if topic is None else topic.model_copy()

    def on_topics_changed(self, listener: Callable[[], None]) -> None:
        """Call `listener` after every change of the topics' view (under the write lock)."""
        self._view.on_topics_changed = listener

    def topic_view(self, name: str) -> TopicConfig | None:
        """find_topic for a hot read path: the view's own config, not a copy (the caller must
        not change it). InvalidTopicName as find_topic."""
        check_topic_name(name)
        return self._view.topic(name)

    @property
    def auto_create_topics(self) -> bool:
        return self._auto_create_topics

    def find_topic(self, *, name: str) -> TopicConfig | None:
        self._check_open()
        check_topic_name(name)
        topic = self._view.topic(name)
        return None if topic is None else topic.model_copy()

    def get_topic(self, *, name: str) -> TopicConfig:
        topic = self.find_topic(name=name)
        if topic is None:
            raise TopicNotFound(f"topic {name!r} does not exist")
        return topic

    def list_topics(self) -> list[TopicConfig]:
        self._check_open()
        return [topic.model_copy() for topic in self._view.topics()]
