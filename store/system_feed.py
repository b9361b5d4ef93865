"""The metadata layer's feed of the log's metadata records, and what it does when the log
loses records the layer applied already.

The layer (SQL tables) applies each record of the metadata topic once, in log order, and says
how far it got (its next queue offset and the last record's commit-log offset). Its tables
must never hold what the log does not: so when the log loses records it was handed (a slave
cut back to agree with a new master; a power cut that took unflushed records while the
tables kept them), the layer is reset and every record the log still holds is handed again
from queue offset 0. Records carry whole rows and applying one is a pure function of the
tables, so the replay gives exactly the tables of the log's prefix.

When retention has removed the first records of the metadata topic, the replay can only
start at the first one left: the tables then miss what only those records held (logged; a
slave's bootstrap pull from its master fills them again).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Protocol

from store.dispatch import SystemRecord, SystemRecordHandler
from store.reads import GetMessagesResult, GetMessageStatus
from store.system_topics import METADATA_TOPIC, PROPERTY_OP

log = logging.getLogger(__name__)

REPLAY_BATCH_MESSAGES = 256


class MetadataReads(Protocol):
    def get_messages(self, topic: str, queue_id: int, offset: int, max_messages: int, *,
                     committed_only: bool) -> GetMessagesResult: ...


class SystemRecordFeed:
    """Hands metadata records to the layer and remembers the last one handed."""

    def __init__(self, reads: MetadataReads) -> None:
        self._reads = reads
        self._handler: SystemRecordHandler | None = None
        self._reset: Callable[[], None] | None = None
        # The commit-log offset of the last record handed (-1: none).
        self.last_handed_offset = -1
        self.rebuild_count = 0

    @property
    def handler(self) -> SystemRecordHandler | None:
        return self._handler

    def attach(self, handler: SystemRecordHandler, from_queue_offset: int,
               applied_offset: int | None, reset: Callable[[], None] | None) -> int:
        """Hand the records from `from_queue_offset` on. When the layer's last applied record
        (at `from_queue_offset - 1`, commit-log offset `applied_offset`) is not in the log,
        the layer is ahead of the log: it is reset and fed again from 0. Returns how many
        records were handed. The caller holds dispatch still."""
        self._handler, self._reset = handler, reset
        if reset is not None and from_queue_offset > 0 and applied_offset is not None \
                and self._offset_at(from_queue_offset - 1) != applied_offset:
            log.warning("metadata: the tables applied a record (queue offset %d, log offset "
                        "%d) that the log no longer holds; they are rebuilt from the log",
                        from_queue_offset - 1, applied_offset)
            return self._rebuild()
        # The tables hold the records up to `applied_offset`: a cut below it must rebuild
        # them even when nothing is handed after this start.
        self.last_handed_offset = (applied_offset if from_queue_offset > 0
                                   and applied_offset is not None else -1)
        return self._replay(from_queue_offset)

    def detach(self) -> None:
        self._handler = self._reset = None

    def dispatched(self, record: SystemRecord) -> None:
        """Dispatch's hand-off (SystemRecordHandler): the layer's, remembered."""
        handler = self._handler
        if handler is not None:
            handler(record)
            self.last_handed_offset = record.commit_log_offset

    def log_cut(self, offset: int) -> None:
        """The log was cut back to `offset` (dispatch held still): when that removed a record
        the layer applied, the layer is rebuilt from what is left."""
        if self._handler is None or self.last_handed_offset < offset:
            return
        if self._reset is None:
            log.error("metadata: the log was cut below a record the tables applied (log "
                      "offset %d) and the layer cannot be reset", self.last_handed_offset)
            return
        log.warning("metadata: the log was cut back to %d, below the last record the tables "
                    "applied (%d); they are rebuilt from the log", offset,
                    self.last_handed_offset)
        self._rebuild()

    def _rebuild(self) -> int:
        assert self._reset is not None
        self._reset()
        self.last_handed_offset = -1
        self.rebuild_count += 1
        return self._replay(0)

    def _replay(self, queue_offset: int) -> int:
        handler = self._handler
        assert handler is not None
        count = 0
        while True:
            # What dispatch indexed, as it is: the records are applied as dispatched.
            result = self._reads.get_messages(METADATA_TOPIC, 0, queue_offset,
                                              REPLAY_BATCH_MESSAGES, committed_only=False)
            if (result.status is GetMessageStatus.OFFSET_TOO_SMALL
                    and result.next_offset > queue_offset):
                log.warning("metadata records below queue offset %d are gone (retention); "
                            "applying from %d", result.next_offset, result.next_offset)
                queue_offset = result.next_offset
                continue
            if not result.messages:
                return count
            for message in result.messages:
                handler(SystemRecord(message.commit_log_offset, message.queue_offset,
                                     message.properties.get(PROPERTY_OP, ""), message.body))
                self.last_handed_offset = message.commit_log_offset
                count += 1
            queue_offset = result.next_offset

    def _offset_at(self, queue_offset: int) -> int | None:
        result = self._reads.get_messages(METADATA_TOPIC, 0, queue_offset, 1,
                                          committed_only=False)
        if result.messages and result.messages[0].queue_offset == queue_offset:
            return result.messages[0].commit_log_offset
        return None
