"""Latency histograms for /metrics: how long ADDJOB takes until it answers (its
replication included), how long GETJOB takes (a blocked consumer's wait included), and
how late a job is delivered after it became due. Cumulative bucket counts, as
Prometheus's histograms: `observe` is a few comparisons with constants and two
additions, cheap enough for every command of a kind (a command's time is measured anyway: connection.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from ..job import Job

# Upper bounds in microseconds: 100 us .. 60 s (beyond: +Inf)
FIRST_BOUND_US: Final = 100
BOUNDS_US: Final = (FIRST_BOUND_US, 250, 500, 1_000, 2_500, 5_000, 10_000, 25_000, 50_000,
                    100_000, 250_000, 500_000, 1_000_000, 2_500_000, 5_000_000,
                    10_000_000, 30_000_000, 60_000_000)


class Histogram:
    """Counts of observations per bucket (not cumulative here: the exporter sums)."""

    __slots__ = ("counts", "sum_us", "fast")

    def __init__(self) -> None:
        self.counts: list[int] = [0] * (len(BOUNDS_US) + 1)  # the last: over the highest
        self.sum_us = 0
        # The first bucket's count apart, as a native int: a command's own time is
        # almost always under the first bound, and a list's item is a boxed int, made
        # anew at each increment (an allocation per ADDJOB, measured)
        self.fast = 0

    def observe(self, usec: int) -> None:
        if usec <= FIRST_BOUND_US:
            self.fast += 1
            if usec > 0:
                self.sum_us += usec
            return
        # The bucket by comparisons with constants (compiled: a few instructions each;
        # a search over a list unboxes an int per step, ~5x the cost, measured). The
        # same bounds as BOUNDS_US: tests/unit/test_histograms.py checks them.
        if usec <= 2_500:
            index = 1 if usec <= 250 else 2 if usec <= 500 else 3 if usec <= 1_000 else 4
        elif usec <= 100_000:
            index = (5 if usec <= 5_000 else 6 if usec <= 10_000 else 7 if usec <= 25_000
                     else 8 if usec <= 50_000 else 9)
        elif usec <= 5_000_000:
            index = (10 if usec <= 250_000 else 11 if usec <= 500_000 else
                     12 if usec <= 1_000_000 else 13 if usec <= 2_500_000 else 14)
        else:
            index = (15 if usec <= 10_000_000 else 16 if usec <= 30_000_000 else
                     17 if usec <= 60_000_000 else 18)
        counts = self.counts
        counts[index] = counts[index] + 1  # (compiled, `+=` on an item is a generic add)
        self.sum_us += usec

    def snapshot(self) -> tuple[list[int], int]:
        """(cumulative counts per bound then +Inf, sum in us)."""
        cumulative = []
        total = self.fast
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
