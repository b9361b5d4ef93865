"""Put rates over about the last 10 s, from the broker's put counters: sampled whenever asked
(the admin view) and every second by its own interval service."""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from store import PutMessageStatus
from store.service import IntervalService

_RATE_WINDOW_S = 10.0
_RATE_SAMPLE_INTERVAL_MS = 1000


@dataclass(frozen=True, slots=True)
class PutRates:
    messages_per_s: float
    bytes_per_s: float


class PutRateSampler:
    def __init__(self, put_counts: Callable[[], dict[PutMessageStatus, int]],
                 put_bytes_total: Callable[[], int]) -> None:
        self._put_counts = put_counts
        self._put_bytes_total = put_bytes_total
        self._samples: deque[tuple[float, int, int]] = deque(maxlen=64)
        self._lock = threading.Lock()
        # Counters only, under `_lock` (request threads sample too): no need for the loop.
        self.service = IntervalService("put-rate-sampler", _RATE_SAMPLE_INTERVAL_MS,
                                       self.sample)

    def sample(self) -> PutRates:
        """Puts per second over about the last 10 s."""
        now = time.monotonic()
        sample = (now, self._put_counts().get(PutMessageStatus.PUT_OK, 0),
                  self._put_bytes_total())
        with self._lock:
            samples = self._samples
            if not samples or now - samples[-1][0] >= 0.5:
                samples.append(sample)
            while len(samples) > 2 and now - samples[1][0] >= _RATE_WINDOW_S:
                samples.popleft()
            first = samples[0]
        elapsed_s = now - first[0]
        if elapsed_s <= 0:
            return PutRates(0.0, 0.0)
        return PutRates((sample[1] - first[1]) / elapsed_s, (sample[2] - first[2]) / elapsed_s)
