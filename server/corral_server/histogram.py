"""A fixed-bucket histogram any thread may add to, read by the metrics collector
(corral_server/metrics.py) when Prometheus scrapes.

Owns only the counting. Must not: import prometheus-client (the store and the manager record
into it; metrics.py turns a reading into a metric family), or block for longer than an add.
"""

from __future__ import annotations

import threading
from bisect import bisect_left
from typing import NamedTuple

# Seconds: from half a millisecond (a group commit without fsync) to 30 s (a provider call
# near its deadline).
SECONDS_BOUNDS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 10, 30)


class Reading(NamedTuple):
    """Cumulative counts: `buckets[i]` observations were <= `bounds[i]`; `samples` in all."""

    bounds: tuple[float, ...]
    buckets: tuple[int, ...]
    samples: int
    total: float


class Histogram:
    def __init__(self, bounds: tuple[float, ...]) -> None:
        assert list(bounds) == sorted(set(bounds)), "bounds strictly increasing"
        self.bounds = bounds
        # Per bucket, not cumulative: `_counts[i]` values fell in (bounds[i-1], bounds[i]];
        # the last one holds those above every bound.
        self._counts = [0] * (len(bounds) + 1)
        self._total = 0.0
        self._lock = threading.Lock()  # a reading sees counts and total of the same adds

    def add(self, value: float) -> None:
        index = bisect_left(self.bounds, value)
        with self._lock:
            self._counts[index] += 1
            self._total += value

    def read(self) -> Reading:
        with self._lock:
            counts, total = list(self._counts), self._total
        cumulative: list[int] = []
        running = 0
        for count in counts[:-1]:
            running += count
            cumulative.append(running)
        return Reading(self.bounds, tuple(cumulative), running + counts[-1], total)
