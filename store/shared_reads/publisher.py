"""The appending process's side of the table of readable ends (ends_table.py).

Dispatch publishes a queue's ends after writing its entries (`entries_written`, from the
Arrivals listener); every change to the store other than an append runs inside `changing()`,
which marks the table as changing (readers throw away what they read meanwhile) and, at its
end, publishes every queue again with the log's new start. Changes may overlap (retention on
its thread, a topic delete from dispatch): the table says "changing" until the last ends.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from store.index.consume_queue import ConsumeQueues
from store.shared_reads.ends_table import EndsWriter, QueueEnds

# Whether a queue may be read (the topic's configuration: readable, a read queue).
Readable = Callable[[str, int], bool]


class EndsPublisher:
    def __init__(self, path: Path, queues: ConsumeQueues, readable: Readable,
                 log_min_offset: Callable[[], int]) -> None:
        self._writer = EndsWriter(path)
        self._queues = queues
        self._readable = readable
        self._log_min_offset = log_min_offset
        self._lock = threading.Lock()
        self._changes_under_way = 0
        self.path = path
        self.publish_all()

    def entries_written(self, topic: str, queue_id: int, max_offset: int) -> None:
        """Dispatch wrote the queue's entries below `max_offset`."""
        queue = self._queues.get(topic, queue_id)
        low = queue.min_queue_offset if queue is not None else 0
        ends = QueueEnds(self._readable(topic, queue_id), low, max_offset)
        with self._lock:
            self._writer.publish(topic, queue_id, ends)

    @contextmanager
    def changing(self) -> Iterator[None]:
        """Around a change other than an append (retention, truncation, a topic deleted or
        its configuration changed)."""
        with self._lock:
            self._changes_under_way += 1
            self._writer.begin_change()
        try:
            yield
        finally:
            self._publish_all_queues()
            with self._lock:
                self._changes_under_way -= 1
                if self._changes_under_way == 0:
                    self._writer.end_change(self._log_min_offset())

    def publish_all(self) -> None:
        with self.changing():
            pass

    def _publish_all_queues(self) -> None:
        with self._lock:  # (the ends read under it: a dispatch's publish is never undone)
            current = {(queue.topic, queue.queue_id): queue for queue in self._queues.all()}
            for key in set(current) | set(self._writer.published()):
                queue = current.get(key)
                if queue is None:  # removed (a topic delete): nothing to read
                    self._writer.publish(*key, QueueEnds(False, 0, 0))
                else:
                    self._writer.publish(*key, QueueEnds(
                        self._readable(*key), queue.min_queue_offset, queue.max_queue_offset))

    def close(self) -> None:
        self._writer.close()
