"""What a put hands back besides its append result: an awaitable final status.

No thread waits per put: flush and replication services complete `concurrent.futures.Future`s
by offset; asyncio code awaits them through `asyncio.wrap_future`, blocking code calls
`result()`. A put whose guarantees already hold gets a shared, already-done completion.
"""

from __future__ import annotations

import asyncio
from collections.abc import Generator
from concurrent.futures import Future
from typing import Any

from store.status import PutMessageStatus


class PutCompletion:
    __slots__ = ("_status", "_future")

    def __init__(
        self,
        status: PutMessageStatus | None = None,
        future: Future[PutMessageStatus] | None = None,
    ) -> None:
        assert (status is None) != (future is None)
        self._status = status
        self._future = future

    @classmethod
    def done(cls, status: PutMessageStatus) -> PutCompletion:
        return _DONE[status]

    @property
    def is_done(self) -> bool:
        return self._future is None or self._future.done()

    def result(self, timeout_s: float | None = None) -> PutMessageStatus:
        """Block until the guarantees are decided (tests and blocking callers only)."""
        if self._future is None:
            assert self._status is not None
            return self._status
        return self._future.result(timeout_s)

    def __await__(self) -> Generator[Any, None, PutMessageStatus]:
        if self._future is None:
            assert self._status is not None
            return self._status
        return (yield from asyncio.wrap_future(self._future).__await__())

    @staticmethod
    def combine(flush: PutCompletion, replication: PutCompletion) -> PutCompletion:
        """Both guarantees: a non-OK replication status wins over the flush status (RocketMQ)."""
        if flush.is_done and replication.is_done:
            return PutCompletion.done(_combined(flush.result(), replication.result()))
        combined: Future[PutMessageStatus] = Future()
        parts = (flush, replication)

        def on_part_done(_: object) -> None:
            if all(part.is_done for part in parts) and not combined.done():
                try:
                    combined.set_result(_combined(flush.result(), replication.result()))
                except Exception:  # noqa: BLE001 - a racing second callback already set it
                    pass

        for part in parts:
            if part._future is not None:
                part._future.add_done_callback(on_part_done)
        on_part_done(None)
        return PutCompletion(future=combined)


def _combined(flush: PutMessageStatus, replication: PutMessageStatus) -> PutMessageStatus:
    return replication if replication is not PutMessageStatus.PUT_OK else flush


_DONE = {status: PutCompletion(status=status) for status in PutMessageStatus}
