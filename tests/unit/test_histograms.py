"""The latency histograms' buckets: an observation counts in the first bucket whose
upper bound it does not exceed (Prometheus's `le`), the last past the highest bound."""

from __future__ import annotations

from bisect import bisect_left

from disq.server.histograms import BOUNDS_US, Histogram


def test_each_observation_lands_in_the_bucket_of_its_upper_bound() -> None:
    histogram = Histogram()
    values = [-5, 0, 1, 99, 100, 101, 250, 251, 59_999_999, 60_000_000, 60_000_001, 10**12]
    values += [bound + delta for bound in BOUNDS_US for delta in (-1, 0, 1)]
    for usec in values:
        histogram.observe(usec)
    expected = [0] * (len(BOUNDS_US) + 1)
    for usec in values:
        expected[bisect_left(BOUNDS_US, max(usec, 0))] += 1
    cumulative, total = histogram.snapshot()
    assert cumulative == [sum(expected[:i + 1]) for i in range(len(expected))]
    assert cumulative[-1] == len(values)
    assert total == sum(max(usec, 0) for usec in values)
