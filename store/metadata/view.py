"""MetadataView: every topic and subscription group as the tables hold them, in memory.

Reads (a consume's queue check, a lag report, a key lookup) take their topic and group
configuration from here, never from SQL. The MetadataStore keeps it current: loaded whole when
the store opens (restart recovery included), then changed by every write that changes the
tables, whichever path makes it: a metadata record applied by dispatch, a direct write, an
auto-created topic, or a slave's bootstrap import (reloaded whole). Each change is made under
the store's write lock once its transaction committed, so a reader sees a config the tables
held.

Readers take no lock: each entry is replaced whole by a new object and a dict read is atomic,
so a reader sees either the old config or the new one. The objects are shared: callers must
not change them (the store's public methods hand out copies).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from store.metadata.models import SubscriptionGroup, TopicConfig


class MetadataView:
    def __init__(self, topics: Iterable[TopicConfig] = (),
                 groups: Iterable[SubscriptionGroup] = ()) -> None:
        self._topics: dict[str, TopicConfig] = {topic.name: topic for topic in topics}
        self._groups: dict[str, SubscriptionGroup] = {group.name: group for group in groups}
        # Called after every change of the topics (read workers publish what is readable).
        self.on_topics_changed: Callable[[], None] | None = None

    # -- reads (any thread, no lock) --------------------------------------------------------------

    def topic(self, name: str) -> TopicConfig | None:
        return self._topics.get(name)

    def group(self, name: str) -> SubscriptionGroup | None:
        return self._groups.get(name)

    def topics(self) -> list[TopicConfig]:
        """Every topic, ordered by name."""
        return sorted(self._topics.values(), key=lambda topic: topic.name)

    def groups(self) -> list[SubscriptionGroup]:
        """Every group, ordered by name."""
        return sorted(self._groups.values(), key=lambda group: group.name)

    # -- changes (the store's write lock held, after the tables changed) ---------------------------

    def put_topic(self, topic: TopicConfig) -> None:
        self._topics[topic.name] = topic
        self._topics_changed()

    def drop_topic(self, name: str) -> None:
        self._topics.pop(name, None)
        self._topics_changed()

    def put_group(self, group: SubscriptionGroup) -> None:
        self._groups[group.name] = group

    def drop_group(self, name: str) -> None:
        self._groups.pop(name, None)

    def replace_topics(self, topics: Iterable[TopicConfig]) -> None:
        """After a table was replaced whole (a slave's import of its master's topics)."""
        self._topics = {topic.name: topic for topic in topics}
        self._topics_changed()

    def replace_groups(self, groups: Iterable[SubscriptionGroup]) -> None:
        self._groups = {group.name: group for group in groups}

    def _topics_changed(self) -> None:
        listener = self.on_topics_changed
        if listener is not None:
            listener()
