"""A stalled fsync for tests: the commit log's flush blocks until the block is left, as on
a disk that stops answering. The seam is the commit log's `flush` attribute, the one call
the flush service makes to make bytes durable."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

from store import MessageStore

STALL_MAX_S = 30.0  # the bound on a stall whose test failed before leaving the block


@contextmanager
def stalled_flush(store: MessageStore) -> Iterator[None]:
    release = threading.Event()
    commit_log = store.commit_log
    real_flush = commit_log.flush

    def stalled() -> int:
        release.wait(STALL_MAX_S)
        return real_flush()

    commit_log.flush = stalled  # type: ignore[method-assign]
    try:
        yield
    finally:
        release.set()
        commit_log.flush = real_flush  # type: ignore[method-assign]
