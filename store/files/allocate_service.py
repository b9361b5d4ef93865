"""AllocateService (RocketMQ's AllocateMappedFileService): the commit log's next file, prepared
in the background, so that the put which rolls to it renames a ready file instead of waiting
for the allocation of a whole (1 GiB) file under the commit-log lock.

Apart from the file primitives (store/files/allocate.py), which the mapped-file queue uses to
allocate inline: the service drives a queue, the queue never needs the service.
"""

from __future__ import annotations

import logging

from store.files.mapped_file_queue import MappedFileQueue
from store.service import ServiceThread

log = logging.getLogger(__name__)

_RETRY_WAIT_S = 1.0


class AllocateService(ServiceThread):
    """Keeps the next file of one log ready; woken by every roll."""

    name = "allocate"

    def __init__(self, files: MappedFileQueue) -> None:
        super().__init__()
        self._files = files
        self._failing = False
        files.on_new_file = self.wake

    def run_once(self) -> float:
        try:
            self._files.prepare_next()
        except OSError as error:
            # Not fatal: the roll allocates inline and answers CREATE_MAPPED_FILE_FAILED if
            # the disk is still full then. Logged once per failing spell, not every retry.
            if not self._failing:
                log.warning("preallocating the next commit-log file failed: %s", error)
            self._failing = True
            self.last_error = f"{type(error).__name__}: {error}"
            return _RETRY_WAIT_S
        self._failing = False
        return _RETRY_WAIT_S
