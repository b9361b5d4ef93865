"""Consumer lag of one queue, as the lag endpoint and the metrics both count it."""

from __future__ import annotations


def queue_lag(min_offset: int, max_offset: int, committed: int | None) -> int:
    """Messages a group has not consumed from a queue holding [min_offset, max_offset): from
    its committed offset, or from the queue's min offset when it has committed none (what
    retention removed is not lag)."""
    start = min_offset if committed is None else max(committed, min_offset)
    return max(0, max_offset - start)
