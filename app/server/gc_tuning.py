"""Garbage-collector tuning for a broker process, for the time the broker serves.

Each SYNC_MASTER put keeps a few objects alive while it waits for the slave (its completion,
its waiter, its coroutine): enough of them outlive two young collections that CPython's full
collection ran every ~0.4 s under load, scanning the ~130,000 objects of the framework and the
metadata layer for ~70 ms with the GIL held: the whole process stalled (p99 80 ms, ~15% of the
throughput, measured with bench/http_produce.py case (c)). So, once started: collect, freeze
what exists (the startup heap leaves the collector's view), and run young collections less
often. Stopping restores the previous thresholds and unfreezes.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

# Young collections every 10,000 allocations instead of 700; older ones as CPython's ratio.
THRESHOLDS = (10_000, 50, 50)


@contextmanager
def tuned_gc(enabled: bool = True) -> Iterator[None]:
    if not enabled:
        yield
        return
    previous = gc.get_threshold()
    gc.collect()
    gc.freeze()
    gc.set_threshold(*THRESHOLDS)
    try:
        yield
    finally:
        gc.set_threshold(*previous)
        gc.unfreeze()
