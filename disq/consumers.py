"""The consumers of the node's queues: GETJOB's pass (`get_jobs`), the one delivery of
a queued job (`take`), and the consumers blocked in GETJOB, parked on their queues
(`block`, `unblock`) and served after the command that queued their jobs
(`mark_ready`, `serve_ready`). A part of `Node` (disq/node.py), `Node.consumers`: the
node owns the jobs and the queues and puts jobs in them (`Node.enqueue`); this part
owns what concerns the consumers waiting on them.

It keeps the node's tables it reads on every delivery (`queues`, `stats`, `failures`:
objects the node makes once and never replaces), so a GETJOB reads them as directly as
the node itself would; the cluster, which the server installs later, is read from the
node.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Final

from . import errors, lifecycle
from .clock import now_ms
from .job import DELIVERED, QUEUED, Job
from .queue import (
    NO_PRIORITY,
    PAUSED_OUT,
    READY,
    READY_EXT,
    READY_QUEUED,
    READY_REQUEUED,
    PriorityJobs,
    Queue,
    Waiter,
)
from .where import WHERE_SCAN_MAX, job_matches

if TYPE_CHECKING:
    from .failures import FailureStats
    from .grouplimits import GroupLimits
    from .node import Node, Stats
    from .scantable import ScanTable
    from .where import Condition

# A peer said it has more urgent jobs of a queue than this node: its consumers wait
# this long at most for them (asked for at once) before they get this node's own.
URGENT_HOLD_MS: Final = 100


def _nothing() -> None:
    pass


class Consumers:
    """Who takes the node's jobs. Of the consumers blocked in GETJOB as a whole: how
    many (`count`), and the queues that got jobs (or a token, ...) while some wait on
    them, in that order (`ready`, `mark_ready`): `serve_ready` serves them once the
    operation that marked them is over, never inside it. `on_ready` (the server's) is
    told when the first one is marked: it has `serve_ready` run at the end of the loop
    turn."""

    __slots__ = ("node", "queues", "stats", "failures", "count", "filtered", "arrivals", "ready",
                 "on_ready", "unblocked")

    def __init__(self, node: Node) -> None:
        self.node = node
        self.queues: ScanTable[bytes, Queue] = node.queues
        self.stats: Stats = node.stats
        self.failures: FailureStats = node.failures
        self.count = 0
        self.unblocked = 0  # waits ended so far (`_serve_filtered` counts them)
        # Blocked consumers with GETJOB ... WHERE, and the jobs queued since, per queue
        # that has them (only while there are such consumers): each arriving job is
        # checked against their filters, never the whole queue again.
        self.filtered = 0
        self.arrivals: dict[Queue, list[Job]] = {}
        self.ready: list[Queue] = []
        self.on_ready: Callable[[], None] = _nothing

    # -- delivery ------------------------------------------------------------------------
    def take(self, queue: Queue, now: int, hold: bool = True,
             where: list[Condition] | None = None,
             candidates: list[Job] | None = None) -> Job | None:
        """The one delivery of a queued job to a consumer: GETJOB's pass (get_jobs) and
        every serving of parked consumers (serve_ready) take their jobs here, so a
        queue's pause, its hold for a peer's more urgent jobs, its RATE and its order
        apply alike. The next job: the most urgent, the groups of a priority in turn,
        the oldest of a group (queue.py). None: none now (`failures.tokens_refused`
        counts one more if for lack of a RATE token). `hold` False (NOHANG): no hold
        for a peer's jobs. `where` (GETJOB ... WHERE): the next job that matches, among
        the first WHERE_SCAN_MAX (`_take_where`), or among `candidates` (jobs that
        arrived for a blocked filtered consumer); a plain GETJOB pays one test."""
        if queue.flags & PAUSED_OUT:
            return None
        if hold and queue.remote_best < NO_PRIORITY and self.held_for_peers(queue, now):
            return None
        cap = queue.cap  # (before RATE: a token is not spent on a job not delivered)
        if cap is not None and queue.jobs and cap.full():
            return None  # CONCURRENCY (concurrency.py): served when one ends
        limiter = queue.limiter
        if limiter is not None and queue.jobs and not limiter.take(now):
            self.failures.tokens_refused += 1  # RATE (failures.py)
            return None
        groups = queue.groups
        if where is not None:
            job = self._take_where(queue, where, candidates)
        elif groups is None:
            job = queue.jobs.pop_first()
        else:
            job = self._take_admitted(queue, groups, now)
        if job is None:
            return None
        if cap is not None:
            cap.started(job)
        lifecycle.delivered(job)
        job.flags |= DELIVERED
        queue.atime = now
        queue.jobs_out += 1
        self.stats.jobs_delivered += 1
        if queue.told_best != NO_PRIORITY and queue.best_priority() > queue.told_best:
            self.node.cluster.best_changed(queue)  # the peers heard of a job gone now
        return job

    def _take_admitted(self, queue: Queue, groups: GroupLimits, now: int) -> Job | None:
        """The next job of a group GROUP-CONCURRENCY and GROUP-RATE let run now
        (grouplimits.py), the groups held back parked on the way; None if every
        group with jobs is held back (counted as refused for lack of a token when
        one waits for its token: the consumers are served when it comes; the queue's
        RATE token, taken, is given back)."""
        jobs = queue.jobs
        if type(jobs) is not PriorityJobs:  # no job with a group queued
            return jobs.pop_first()
        if groups.wakes:
            groups.wake(jobs, now)
        job = jobs.pop_admitted(groups, now)
        if job is None:
            if groups.wakes:
                self.failures.tokens_refused += 1
            if queue.limiter is not None:
                queue.limiter.tokens += 1.0
        return job

    def _take_where(self, queue: Queue, where: list[Condition],
                    candidates: list[Job] | None = None) -> Job | None:
        """The first job in delivery order among the queue's first WHERE_SCAN_MAX (or
        among `candidates` still queued in it) that matches `where`, out of the queue;
        None if none (the queue's RATE token, taken, is given back). Never from a queue
        with GROUP-CONCURRENCY or GROUP-RATE limits: their admission is kept by the
        plain path alone (grouplimits.py)."""
        job = None
        if queue.groups is None:
            if candidates is not None:
                for candidate in candidates:
                    if (candidate.state == QUEUED and candidate.queue == queue.name
                            and job_matches(candidate, where)):
                        job = candidate
                        break
            else:
                for seen, candidate in enumerate(queue.jobs):
                    if seen >= WHERE_SCAN_MAX:
                        break
                    if job_matches(candidate, where):
                        job = candidate
                        break
        if job is None or not queue.jobs.remove(job):
            if queue.limiter is not None:
                queue.limiter.tokens += 1.0
            return None
        return job

    def held_for_peers(self, queue: Queue, now: int) -> bool:
        """Whether this queue's consumers wait for a peer's more urgent jobs instead of
        taking the ones here: a peer said it has queued a more urgent priority than
        this node's best (QBEST). They are asked for at once, and the consumers wait
        `URGENT_HOLD_MS` at most; after that the peers' word is forgotten (a peer that
        does not answer in time cannot hold them again until it speaks again)."""
        local = queue.best_priority()
        if queue.remote_best >= local or local == NO_PRIORITY:
            return False  # nothing better elsewhere, or nothing here (federation asks)
        if not queue.hold_until:
            queue.hold_until = now + URGENT_HOLD_MS
            self.node.cluster.want_more_urgent(queue, local)
            return True
        if now < queue.hold_until:
            return True
        queue.forget_peer_best()
        return False

    def get_jobs(self, names: list[bytes], count: int, hold: bool = True,
                 where: list[Condition] | None = None) -> list[Job]:
        """GETJOB's non-blocking pass: one job per queue per round, left to right.
        `hold`: a queue whose more urgent jobs are on a peer gives none now
        (`held_for_peers`: a consumer that blocks gets them); False (NOHANG): it
        gives its own. `where`: only jobs that match (where.py)."""
        now = now_ms()
        queues = []
        for name in names:
            queue = self.queues.get(name)
            if queue is not None:
                queues.append(queue)
        out: list[Job] = []
        failures = self.failures
        refused = failures.tokens_refused
        while queues and len(out) < count:
            progress = False
            for queue in queues:
                job = self.take(queue, now, hold, where)
                if job is not None:
                    out.append(job)
                    progress = True
                    if len(out) >= count:
                        break
            if not progress:
                break
        if failures.tokens_refused != refused:
            failures.rate_limited += 1
        return out

    def want_jobs(self, names: list[bytes]) -> None:
        """GETJOB found nothing: create the queues and ask the cluster for jobs, as
        Disque does for every queue named (with NOHANG too), unless leaving. Not for a
        queue that has jobs but no token of its RATE: more jobs would not help."""
        node = self.node
        if node.leaving:
            return
        now = now_ms()
        for name in dict.fromkeys(names):
            queue = node.queue(name, now)
            if (queue.limiter is None and queue.cap is None and queue.groups is None) or (
                    not queue.jobs):
                node.cluster.need_jobs(queue)

    # -- blocked consumers -----------------------------------------------------------
    def block(self, waiter: Waiter, names: list[bytes]) -> list[Queue]:
        """Park a consumer on queues; the caller keeps the returned list to unblock."""
        node = self.node
        now = now_ms()
        queues: list[Queue] = []
        for name in dict.fromkeys(names):
            queue = node.queue(name, now)
            queue.waiters.append(waiter)
            queues.append(queue)
            if (queue.limiter is not None or queue.groups is not None) and queue.jobs:
                node.wakeups.at_next_token(queue, now)  # jobs, but no token: RATE
        if waiter.where is not None:
            self.filtered += 1
        self.count += 1
        return queues

    def unblock(self, waiter: Waiter, queues: Iterable[Queue]) -> None:
        for queue in queues:
            try:
                queue.waiters.remove(waiter)
            except ValueError:
                pass
            federation = queue.federation
            if federation is not None and federation.asked_time and not queue.waiters:
                self.node.cluster.jobs_not_needed(queue)  # the last one left: stop the pushes
        self.count -= 1
        self.unblocked += 1
        if waiter.where is not None:
            self.filtered -= 1
            if not self.filtered:
                self.arrivals.clear()

    def end_waits(self, error: errors.DisqError | None = None) -> None:
        """Every blocked consumer stops waiting, without a job (`Waiter.give_up`):
        DEBUG FLUSHALL (None: as at its timeout), CLUSTER LEAVING (-LEAVING)."""
        waiters = dict.fromkeys(w for queue in self.queues.values() for w in queue.waiters)
        for waiter in waiters:
            waiter.give_up(error)

    def mark_ready(self, queue: Queue, why: int = READY) -> None:
        """Have the consumers blocked on `queue` served what it holds once the
        current operation is over (`serve_ready`); `why` (queue.py's READY...) says
        what else is due then."""
        if not queue.ready:
            if not self.ready:
                self.on_ready()
            self.ready.append(queue)
        queue.ready |= why

    def serve_ready(self) -> None:
        """Serve the consumers blocked on the queues marked ready, the queues in the
        order they were marked, each one's consumers in the order they came, each
        job taken by `take`. A consumer gone meanwhile (timed out, disconnected) has
        left the queues: the jobs it would have had stay queued."""
        while self.ready:
            ready, self.ready = self.ready, []
            now = now_ms()
            for queue in ready:
                why, queue.ready = queue.ready, 0
                if queue.waiters and queue.jobs:
                    if self.filtered:
                        self._serve_filtered(queue, now, self.arrivals.pop(queue, None))
                    else:
                        self._serve_waiters(queue, now)
                elif self.arrivals:
                    self.arrivals.pop(queue, None)
                if why & READY_QUEUED:  # Node._into_queue's end, for the jobs left
                    if queue.remote_wanted and queue.jobs:
                        self.node.cluster.jobs_available(queue, bool(why & READY_REQUEUED))
                    if why & READY_EXT:
                        self.node.tell_best(queue, now)

    def arrived(self, queue: Queue, job: Job) -> None:
        """A job queued in `queue` while filtered consumers wait (Node._into_queue)."""
        arrivals = self.arrivals.get(queue)
        if arrivals is None:
            self.arrivals[queue] = [job]
        else:
            arrivals.append(job)

    def _serve_filtered(self, queue: Queue, now: int, arrived: list[Job] | None) -> None:
        """`_serve_waiters` with consumers blocked with WHERE among them: each, in the
        order they came, a plain one the next job, a filtered one the first of the jobs
        that `arrived` since the queue was last served which matches its filter (a job
        that matches none stays queued for the others)."""
        failures = self.failures
        refused = failures.tokens_refused
        waiters = queue.waiters
        # Whether a waiter of the list below still waits: each one served here leaves
        # (one `unblock`); when more left meanwhile (a served client's next requests
        # ended another's wait), the set of those still waiting, made then, says.
        still: set[Waiter] | None = None
        for waiter in list(waiters):
            if not queue.jobs:
                break
            if still is not None and waiter not in still:
                continue  # served or gone meanwhile
            where = waiter.where
            if where is None:
                job = self.take(queue, now)
            elif arrived:
                job = self.take(queue, now, True, where, arrived)
            else:
                continue
            if job is None:
                if failures.tokens_refused != refused:
                    self.node.wakeups.at_next_token(queue, now)
                    break
                continue
            unblocked = self.unblocked
            waiter.serve_job(job)
            if self.unblocked != unblocked + 1:
                still = set(waiters)
            elif still is not None:
                still.discard(waiter)

    def _serve_waiters(self, queue: Queue, now: int) -> None:
        waiters = queue.waiters
        failures = self.failures
        refused = failures.tokens_refused
        while waiters and queue.jobs:
            job = self.take(queue, now)
            if job is None:
                if failures.tokens_refused != refused:
                    self.node.wakeups.at_next_token(queue, now)
                break
            waiters[0].serve_job(job)  # it leaves every queue it waited on
