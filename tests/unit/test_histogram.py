"""The metrics' histogram: Prometheus bucket semantics (a value equal to a bound counts in
that bound's bucket; buckets are cumulative), and adds from many threads are all counted."""

from __future__ import annotations

import threading

from corral_server.histogram import Histogram


def test_buckets_are_cumulative_and_a_value_on_a_bound_counts_in_its_bucket() -> None:
    histogram = Histogram((1, 2, 4))
    for value in (0.5, 1, 1.5, 2, 3, 100):
        histogram.add(value)
    reading = histogram.read()
    assert reading.buckets == (2, 4, 5)
    assert (reading.samples, reading.total) == (6, 108.0)


def test_adds_from_many_threads_are_all_counted() -> None:
    histogram = Histogram((1,))

    def add() -> None:
        for _ in range(10_000):
            histogram.add(1)

    threads = [threading.Thread(target=add) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    reading = histogram.read()
    assert (reading.buckets, reading.samples, reading.total) == ((40_000,), 40_000, 40_000.0)
