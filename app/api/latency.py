"""A latency histogram with fixed buckets and no lock of its own (see its users)."""

from __future__ import annotations

from bisect import bisect_left
from collections import Counter

LATENCY_BUCKETS_S = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0,
                     5.0, 10.0)


class LatencyHistogram:
    """Fixed buckets and no lock: observed from the event loop's thread only, or under its
    user's lock (a prometheus_client Histogram takes a lock per observation)."""

    def __init__(self, upper_bounds_s: tuple[float, ...] = LATENCY_BUCKETS_S) -> None:
        self.upper_bounds_s = upper_bounds_s
        self.counts = [0] * (len(upper_bounds_s) + 1)  # the last one is +Inf
        self.sum_s = 0.0

    def observe(self, seconds: float) -> None:
        self.counts[bisect_left(self.upper_bounds_s, seconds)] += 1
        self.sum_s += seconds

    def observe_delays(self, now_ms: float, since_ms: list[int]) -> None:
        """Observe, for each of `since_ms`, the seconds from it to `now_ms` (0 when it is
        later): once per distinct value, the values of a read's messages sharing their
        store milliseconds mostly."""
        counts, upper_bounds_s = self.counts, self.upper_bounds_s
        if len(since_ms) > 1:
            newest_ms = max(since_ms)
            if newest_ms <= now_ms:
                # The usual read: every delay in one bucket, which its two ends tell.
                bucket = bisect_left(upper_bounds_s, (now_ms - newest_ms) / 1000)
                if bucket == bisect_left(upper_bounds_s, (now_ms - min(since_ms)) / 1000):
                    count = len(since_ms)
                    # (the integer part exact: a product of now_ms would lose microseconds)
                    self.sum_s += ((now_ms - newest_ms) * count
                                   + (newest_ms * count - sum(since_ms))) / 1000
                    counts[bucket] += count
                    return
        total_s = 0.0
        # A Counter costs more than it saves on a few values.
        stamps = Counter(since_ms).items() if len(since_ms) > 4 else [(ms, 1) for ms in since_ms]
        for stamp_ms, count in stamps:
            seconds = max(0.0, now_ms - stamp_ms) / 1000
            counts[bisect_left(upper_bounds_s, seconds)] += count
            total_s += seconds * count
        self.sum_s += total_s

    def cumulative_buckets(self) -> list[tuple[str, float]]:
        buckets = []
        total = 0
        for bound, count in zip((*map(str, self.upper_bounds_s), "+Inf"), self.counts,
                                strict=True):
            total += count
            buckets.append((bound, float(total)))
        return buckets
