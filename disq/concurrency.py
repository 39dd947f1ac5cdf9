"""CONCURRENCY n (a QPOLICY field): at most about n jobs of a queue delivered and not
yet ended (acked, dead, requeued, gone) at a time, across the cluster. Sans-IO: this
node's part for one queue; how the nodes split n is replication/failures.py, with the
same demand reports as RATE (ratelimit.py).

Each node runs at most its *share* of n. The nodes split n by their consumers'
demand (an even split, rounded down, until the first reports), each computing
every node's share from the same reports in the same way (largest remainders, ties
by node ID), so the shares of nodes that heard the same reports add up to n exactly.
Each node computes at its own time, so two views can differ for a moment: a share
grows one report round late (the others have shrunk theirs by then), and a node takes
no more than n minus what the others report running (a share is never taken back
from jobs that run). What remains is a bound, not a lock: reports a round old can let
the cluster run a little more than n while demand moves. A node with demand and a
share of 0 waits until another's demand falls. Without a cluster, or cut off from
the others (their reports age out in a second), a node's share is n: on each side of
a partition up to n run.

What runs here is counted lazily: the jobs this node delivered, each with its
delivery count then; one that is no longer active here with that count (acked,
requeued, a dead letter, deleted) has ended, and is dropped when the count is read
at the cap. The cost is O(share) only when a GETJOB meets the cap.
"""

from __future__ import annotations

import math
from typing import Final

from .job import ACTIVE, Job
from .ratelimit import DemandSampler

MAX_CONCURRENCY: Final = 1_000_000


class ConcurrencyCap(DemandSampler):
    __slots__ = ("limit", "share", "running", "allotted")

    def __init__(self, limit: int, now_ms: int, nodes: int = 1) -> None:
        super().__init__(now_ms)
        self.limit = limit  # the queue's CONCURRENCY, cluster-wide
        # this node's part: an even split, rounded down, until the reports come
        self.share = limit // max(nodes, 1)
        self.allotted = self.share  # the share the reports gave last time
        self.running: dict[bytes, tuple[Job, int]] = {}  # delivered here, not ended

    def full(self) -> bool:
        """Whether this node runs its share already (a GETJOB refused: counted)."""
        if self.has_room():
            return False
        self.refused += 1
        return True

    def has_room(self) -> bool:
        if len(self.running) < self.share:
            return True
        self.prune()
        return len(self.running) < self.share

    def started(self, job: Job) -> None:
        """`job` was delivered here: it runs until it ends."""
        self.running[job.id] = (job, job.nacks + job.deliveries)

    def prune(self) -> None:
        """Forget the jobs that ended since they were delivered here."""
        ended = [job_id for job_id, (job, count) in self.running.items()
                 if job.state != ACTIVE or job.nacks + job.deliveries != count]
        for job_id in ended:
            del self.running[job_id]

    def sample(self, waiting: int, now_ms: int) -> float:
        return self.sample_demand(waiting, now_ms, self.limit)

    def set_limit(self, limit: int) -> None:
        self.limit = limit
        self.share = min(self.share, limit)
        self.allotted = min(self.allotted, limit)


def shares(limit: int, demands: dict[str, float]) -> dict[str, int]:
    """Every node's part of `limit` for its demand: proportional, the remainder to the
    largest fractions (ties: the lower node ID); the same on every node that has the
    same reports, and adding up to `limit`."""
    total = sum(demands.values())
    if total <= 0:
        even = {node_id: 0 for node_id in demands}
        for i, node_id in enumerate(sorted(demands)):
            even[node_id] = limit // len(demands) + (i < limit % len(demands))
        return even
    exact = {node_id: limit * d / total for node_id, d in demands.items()}
    out = {node_id: math.floor(x) for node_id, x in exact.items()}
    left = limit - sum(out.values())
    for node_id in sorted(exact, key=lambda n: (out[n] - exact[n], n))[:left]:
        out[node_id] += 1
    return out
