"""A fake clock for the store timestamps the commit log writes (it reads `time.time_ns`)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from types import SimpleNamespace

import pytest

import store.commit_log


class StoreClock:
    def __init__(self, now_ms: int) -> None:
        self.now_ms = now_ms

    def time_ns(self) -> int:
        return self.now_ms * 1_000_000


@contextmanager
def store_clock(now_ms: int) -> Iterator[StoreClock]:
    """While inside, records are stored at `clock.now_ms` (set it between puts)."""
    clock = StoreClock(now_ms)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(store.commit_log, "time", SimpleNamespace(time_ns=clock.time_ns))
        yield clock
