"""RATE (a QPOLICY): at most about r jobs a second delivered from a queue by
GETJOB, across the whole cluster. Sans-IO: this node's token bucket for one queue,
and its demand; how the nodes split the rate is replication/ratelimit.py.

Each node delivers at most its *share* of the rate. The shares follow the demand:
a node's demand is how many consumers wait on the queue there (time-averaged), plus
the GETJOBs it refused for lack of a token; every node tells the others its demand a
few times a second and takes share = rate * mine / (mine + theirs). Consumers on one
node get the whole rate; consumers on every node split it by how many wait where.
Without a cluster the share is the rate.

The bucket holds at most BURST_S seconds of the share (and at least one token): an
idle queue does not save up a burst that would break the rate over a minute.
"""

from __future__ import annotations

BURST_S = 0.2
DEMAND_HALF_LIFE_MS = 500  # the demand is a moving average over about a second
IDLE_WEIGHT = 0.05  # the demand of a node with no consumer: enough to get started


class DemandSampler:
    """A node's demand for a queue's limited deliveries (RATE, CONCURRENCY): the
    consumers waiting here, time-averaged, plus the GETJOBs refused."""

    __slots__ = ("demand", "refused", "_sampled")

    def __init__(self, now_ms: int) -> None:
        self.demand = 0.0  # consumers waiting here, averaged, + refused GETJOBs
        self.refused = 0  # GETJOBs refused since the last sample
        self._sampled = now_ms

    def sample_demand(self, waiting: int, now_ms: int, scale: float) -> float:
        """Fold the consumers waiting now and the GETJOBs refused since the last
        sample (per `scale` a second) into the demand (an exponential moving
        average); the demand."""
        elapsed = max(now_ms - self._sampled, 1)
        self._sampled = now_ms
        keep = 0.5 ** (elapsed / DEMAND_HALF_LIFE_MS)
        instant = waiting + self.refused * 1000 / elapsed / max(scale, 1.0)
        self.refused = 0
        self.demand = self.demand * keep + instant * (1 - keep)
        return self.demand


class RateLimiter(DemandSampler):
    __slots__ = ("rate", "share", "tokens", "updated")

    def __init__(self, rate: float, now_ms: int, nodes: int = 1) -> None:
        super().__init__(now_ms)
        self.rate = rate  # the queue's RATE, jobs per second, cluster-wide
        self.share = rate / max(nodes, 1)  # this node's part: even until demands come
        self.tokens = 1.0
        self.updated = now_ms

    def _refill(self, now_ms: int) -> None:
        elapsed = now_ms - self.updated
        if elapsed > 0:
            cap = max(1.0, self.share * BURST_S)
            self.tokens = min(cap, self.tokens + self.share * elapsed / 1000)
            self.updated = now_ms

    def take(self, now_ms: int) -> bool:
        """One delivery now, if a token is there."""
        if self.tokens < 1.0:
            self._refill(now_ms)
            if self.tokens < 1.0:
                self.refused += 1
                return False
        self.tokens -= 1.0
        return True

    def next_token_ms(self, now_ms: int) -> int:
        """When the next token comes (now if there is one)."""
        self._refill(now_ms)
        if self.tokens >= 1.0 or self.share <= 0:
            return now_ms
        return now_ms + max(1, int((1.0 - self.tokens) * 1000 / self.share) + 1)

    def set_rate(self, rate: float, share: float, now_ms: int) -> None:
        self._refill(now_ms)
        self.rate = rate
        self.share = min(share, rate)

    def sample(self, waiting: int, now_ms: int) -> float:
        return self.sample_demand(waiting, now_ms, self.rate)


def share_of(rate: float, mine: float, theirs: float) -> float:
    """This node's part of `rate` for its demand and the other nodes' (summed)."""
    if theirs <= 0:
        return rate
    mine = max(mine, IDLE_WEIGHT)
    return rate * mine / (mine + theirs)
