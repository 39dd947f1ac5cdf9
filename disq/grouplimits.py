"""GROUP-CONCURRENCY n and GROUP-RATE r (QPOLICY fields): CONCURRENCY (concurrency.py)
and RATE (ratelimit.py) for each GROUP of a queue (ADDJOB ... GROUP g, the fairness
groups of queue.py), as BullMQ Pro's group concurrency and group rate limit. Jobs
without a GROUP are not limited by them. Sans-IO: this node's part for one queue; the
cluster's reports are replication/failures.py's.

A group held back here is *parked* (queue.PriorityJobs.park): its jobs leave the
groups' turns, so a GETJOB goes on to the next group's job without looking at the
parked ones again; the group comes back (`unpark`) when it may run one more: a job of
it ended here (`job_ended`, on ACKJOB, a dead letter and a requeue: at once; a DELJOB,
an expiry: at the next `refresh`, every RATE_PERIOD_MS), its next token came (`wake`,
at GETJOB and by the node's timer), or the limits changed. A GETJOB costs O(log n) in
the group met plus O(1) per group it parks (each park is paid once, by the GETJOB that
met the limit); nothing scans the jobs or the groups.

Across nodes, a bound, not a lock, as CONCURRENCY and RATE. GROUP-CONCURRENCY: each
node reports the groups it runs jobs of, with how many, with its RATE_DEMAND reports
(five times a second); a node starts a job of group g only while it runs fewer than n
minus what the others reported running of g (`elsewhere`). Two nodes that start jobs of
the same group within one report period (200 ms) can together run up to n on each for
that moment; then neither starts more until the total is below n. A node cut off from
the others (their reports age out in a second) counts only its own: on each side of a
partition up to n of a group run. GROUP-RATE: each node gives each group its share of
r, the share of the queue's demand RATE uses (share_of), so about r a second of each
group in the cluster; cut off, r on each side.
"""

from __future__ import annotations

import heapq
from typing import TYPE_CHECKING, Final

from .job import ACTIVE, Job
from .ratelimit import BURST_S, DemandSampler

if TYPE_CHECKING:
    from .queue import PriorityJobs

IDLE_BUCKETS_KEPT: Final = 1024  # full buckets kept between refreshes (a new one is full)


class GroupLimits(DemandSampler):
    """This node's GROUP-CONCURRENCY and GROUP-RATE of one queue."""

    __slots__ = ("concurrency", "rate", "rate_share", "running", "elsewhere", "buckets",
                 "cap_parked", "rate_parked", "wakes")

    def __init__(self, concurrency: int, rate: float, now_ms: int, nodes: int = 1) -> None:
        super().__init__(now_ms)
        self.concurrency = concurrency  # each group's, cluster-wide; 0: none
        self.rate = rate  # each group's jobs per second, cluster-wide; 0: none
        self.rate_share = rate / max(nodes, 1)  # this node's part: even until reports
        # group -> job ID -> (the job, its delivery count then): delivered here, not ended
        self.running: dict[bytes, dict[bytes, tuple[Job, int]]] = {}
        self.elsewhere: dict[bytes, int] = {}  # group -> running on the other nodes
        self.buckets: dict[bytes, list[float]] = {}  # group -> [tokens, when refilled]
        self.cap_parked: set[bytes] = set()  # parked at GROUP-CONCURRENCY
        self.rate_parked: set[bytes] = set()  # parked for a token (in `wakes`)
        self.wakes: list[tuple[int, bytes]] = []  # (when its next token comes, group)

    # -- GETJOB --------------------------------------------------------------------------
    def admits(self, group: bytes, now_ms: int) -> bool:
        """Whether a job of `group` may be delivered now; if not, the group is counted
        as parked (the caller parks it) and the GETJOB as refused."""
        if self.concurrency and not self._has_room(group):
            self.cap_parked.add(group)
            self.refused += 1
            return False
        if self.rate:
            bucket = self._bucket(group, now_ms)
            if bucket[0] < 1.0:
                self.rate_parked.add(group)
                share = self.rate_share
                wait = int((1.0 - bucket[0]) * 1000 / share) + 1 if share > 0 else 1000
                heapq.heappush(self.wakes, (now_ms + wait, group))
                self.refused += 1
                return False
        return True

    def started(self, group: bytes, job: Job) -> None:
        """`job` of `group` (admitted) was delivered here."""
        if self.concurrency:
            running = self.running.get(group)
            if running is None:
                self.running[group] = running = {}
            running[job.id] = (job, job.nacks + job.deliveries)
        if self.rate:
            self.buckets[group][0] -= 1.0

    def wake(self, jobs: PriorityJobs, now_ms: int) -> bool:
        """The groups whose next token has come back in the turns; True if any."""
        wakes = self.wakes
        woken = False
        while wakes and wakes[0][0] <= now_ms:
            group = heapq.heappop(wakes)[1]
            if group in self.rate_parked:
                self.rate_parked.discard(group)
                woken = jobs.unpark(group) or woken
        return woken

    def next_wake_ms(self) -> int | None:
        """When a group parked for a token gets it (the earliest), None if none is."""
        return self.wakes[0][0] if self.wakes else None

    # -- ends ----------------------------------------------------------------------------
    def job_ended(self, jobs: PriorityJobs, job: Job) -> bool:
        """A job of this queue ended here (ACKJOB, a dead letter, a requeue): its group back in
        the turns if it was parked at its cap and has room now. True if it came back."""
        ext = job.ext
        group = ext.group if ext is not None else None
        if group is None or group not in self.cap_parked or not self._has_room(group):
            return False
        self.cap_parked.discard(group)
        return jobs.unpark(group)

    def refresh(self, jobs: PriorityJobs | None, now_ms: int) -> bool:
        """The cron's (every RATE_PERIOD_MS, after the reports): forget the runs that
        ended, bring back the groups parked at the cap that have room now (a requeue,
        a deletion, the other nodes' runs ending), and the full buckets of idle groups.
        True if a group came back."""
        for group in [g for g, running in self.running.items() if not self._prune(running)]:
            del self.running[group]
        came_back = False
        for group in [g for g in self.cap_parked if self._has_room(g)]:
            self.cap_parked.discard(group)
            came_back = jobs is not None and jobs.unpark(group) or came_back
        if len(self.buckets) > IDLE_BUCKETS_KEPT:
            cap = self._burst()
            for group in [g for g, bucket in self.buckets.items()
                          if g not in self.rate_parked
                          and bucket[0] + self.rate_share * (now_ms - bucket[1]) / 1000 >= cap]:
                del self.buckets[group]
        return came_back

    def running_here(self) -> int:
        """The jobs of groups running here (those that ended are forgotten first)."""
        return sum(self._prune(running) for running in self.running.values())

    def report(self) -> list[list[object]]:
        """[group, jobs running here] of each group that runs here (refresh first)."""
        return [[group, len(running)] for group, running in self.running.items()]

    def set_limits(self, concurrency: int, rate: float, jobs: PriorityJobs | None) -> None:
        """The policy changed: every parked group back in the turns (GETJOB parks
        again those still held back)."""
        if rate != self.rate:
            self.rate_share = rate * self.rate_share / self.rate if self.rate else rate
        self.concurrency, self.rate = concurrency, rate
        if not concurrency:
            self.running.clear()
        self.release(jobs)

    def release(self, jobs: PriorityJobs | None) -> None:
        """Every parked group back in the turns (the limits changed, or are gone)."""
        if jobs is not None:
            for group in self.cap_parked | self.rate_parked:
                jobs.unpark(group)
        self.cap_parked.clear()
        self.rate_parked.clear()
        self.wakes.clear()

    def sample(self, waiting: int, now_ms: int) -> float:
        return self.sample_demand(waiting, now_ms, self.rate or self.concurrency)

    # -- internals -----------------------------------------------------------------------
    def _has_room(self, group: bytes) -> bool:
        limit = self.concurrency - self.elsewhere.get(group, 0)
        running = self.running.get(group)
        if running is None or len(running) < limit:
            return limit > 0
        return self._prune(running) < limit

    @staticmethod
    def _prune(running: dict[bytes, tuple[Job, int]]) -> int:
        """Forget the runs that ended (the job no longer active here with the delivery
        count it had, as concurrency.py counts); how many remain."""
        ended = [job_id for job_id, (job, count) in running.items()
                 if job.state != ACTIVE or job.nacks + job.deliveries != count]
        for job_id in ended:
            del running[job_id]
        return len(running)

    def _burst(self) -> float:
        return max(1.0, self.rate_share * BURST_S)

    def _bucket(self, group: bytes, now_ms: int) -> list[float]:
        bucket = self.buckets.get(group)
        if bucket is None:
            self.buckets[group] = bucket = [1.0, float(now_ms)]
        elif now_ms > bucket[1]:
            bucket[0] = min(self._burst(),
                            bucket[0] + self.rate_share * (now_ms - bucket[1]) / 1000)
            bucket[1] = float(now_ms)
        return bucket
