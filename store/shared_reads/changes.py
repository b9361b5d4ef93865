"""The store's changes other than appends, for readers in another process to notice.

Retention removing files, a log cut (a slave's repair, a DLedger member's truncation) and a
topic delete each run inside `changing()`. Nothing listens unless read workers run: then the
table of readable ends (publisher.py) marks the change, so that a read made meanwhile is
thrown away (docs/read-workers.md).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager


class StoreChanges:
    def __init__(self) -> None:
        self.listener: Callable[[], AbstractContextManager[None]] | None = None

    @contextmanager
    def changing(self) -> Iterator[None]:
        listener = self.listener
        if listener is None:
            yield
            return
        with listener():
            yield
