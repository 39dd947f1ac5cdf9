"""Latency histograms for /metrics: how long ADDJOB takes until it answers (its
replication included), how long GETJOB takes (a blocked consumer's wait included), and
how late a job is delivered after it became due. Cumulative bucket counts, as
Prometheus's histograms: `observe` is a bisect and two additions, cheap enough for every
command of a kind (a command's time is measured anyway: connection.py)."""

from __future__ import annotations

from bisect import bisect_left
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from ..job import Job

# Upper bounds in microseconds: 100 us .. 60 s (beyond: +Inf)
BOUNDS_US: Final = (100, 250, 500, 1_000, 2_500, 5_000, 10_000, 25_000, 50_000, 100_000,
                    250_000, 500_000, 1_000_000, 2_500_000, 5_000_000, 10_000_000,
                    30_000_000, 60_000_000)


class Histogram:
    """Counts of observations per bucket (not cumulative here: the exporter sums)."""

    __slots__ = ("counts", "sum_us")

    def __init__(self) -> None:
        self.counts = [0] * (len(BOUNDS_US) + 1)  # the last: over the highest bound
        self.sum_us = 0

    def observe(self, usec: int) -> None:
        if usec < 0:
            usec = 0
        self.counts[bisect_left(BOUNDS_US, usec)] += 1
        self.sum_us += usec

    def snapshot(self) -> tuple[list[int], int]:
        """(cumulative counts per bound then +Inf, sum in us)."""
        cumulative = []
        total = 0
        for count in self.counts:
            total += count
            cumulative.append(total)
        return cumulative, self.sum_us


class Latencies:
    """The node's histograms (`server.latencies`)."""

    __slots__ = ("addjob", "getjob", "delivery_lag")

    def __init__(self) -> None:
        self.addjob = Histogram()  # ADDJOB until answered: its copies confirmed
        self.getjob = Histogram()  # GETJOB until answered: a job, or its timeout
        self.delivery_lag = Histogram()  # a job's first delivery after it was due

    def delivered(self, job: Job, now_ms: int) -> None:
        """A job handed to a consumer: if this is its first delivery (no nack, no
        delivery before), the time since it was due (its ADDJOB, or its AT / DELAY-MS
        time) is observed; clocks: the ADDJOB's node's against this one's."""
        if job.nacks or job.deliveries:
            return
        ext = job.ext
        since = job.ctime // 1_000_000
        if ext is not None and ext.due > since:
            since = ext.due
        self.delivery_lag.observe((now_ms - since) * 1000)
