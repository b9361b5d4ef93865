"""Long poll for consume reads: park on the store's arrivals, wake on the event loop.

The store calls `wake` from dispatch's thread once the queue has new entries; it only hands
an event set to the event loop, so a waiting read holds no thread and costs no CPU until then
(the wait itself is `asyncio.Event.wait` under a timeout, not a polling loop).
"""

from __future__ import annotations

import asyncio
import contextlib

from app.api.errors import ApiError
from store import MessageStore


async def wait_for_arrival(store: MessageStore, topic: str, queue_id: int,
                           seen_max_offset: int, wait_ms: int) -> bool:
    """Whether the queue grew past `seen_max_offset` (or the store stopped) within `wait_ms`;
    429 LONG_POLL_BUSY when the store's bound on waiting reads is reached."""
    loop = asyncio.get_running_loop()
    arrived = asyncio.Event()

    def wake() -> None:
        # A loop that closed meanwhile has no reader left to wake.
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(arrived.set)

    waiter = store.park_reader(topic, queue_id, seen_max_offset, wake)
    if waiter is None:
        raise ApiError("LONG_POLL_BUSY", f"{store.arrivals.waiters_max} reads wait already "
                       "(long_poll_waiters_max); retry later or read without wait_ms")
    try:
        async with asyncio.timeout(wait_ms / 1000):
            await arrived.wait()
        return True
    except TimeoutError:
        return False
    finally:
        store.unpark_reader(waiter)
