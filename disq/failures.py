"""When jobs fail: queue policies, dead letters, back-off and the rate
limit's buckets on this node. A part of `Node` (disq/node.py), which holds the state
and calls in here from `enqueue` (a failed delivery: NACK or a RETRY requeue), from
GETJOB (the rate) and from queue creation.

A dead letter is the job itself, its ID, body and counters kept, moved to its
dead-letter queue and queued there; `JobExt.dead_from` / `dead_reason` say where it
came from and why, `JobExt.generation` orders the moves across nodes (job.py). The
node that decides (the one requeuing the job for the MAXDELIVERIES-th time) moves its
copy and tells the other holders (`ClusterPort.job_moved`); a holder that missed it
learns it from the next requeue message it exchanges about the job
(replication/requeue.py), so the job ends up in one queue, as one job, everywhere.
"""

from __future__ import annotations

from collections import Counter
from itertools import islice
from typing import TYPE_CHECKING, Final

from mypy_extensions import trait

from . import history, lifecycle
from .batches import DEAD as MEMBER_DEAD
from .clock import ms_after, random_time_error
from .concurrency import ConcurrencyCap
from .grouplimits import GroupLimits
from .job import (
    ACKED,
    BACKOFF_WAIT,
    BCAST_QUEUED,
    BCAST_WILLQUEUE,
    QUEUED,
    Job,
    JobExt,
)
from .policies import PolicyTable, QueuePolicy, dead_letter_queue
from .queue import PriorityJobs, Queue
from .ratelimit import RateLimiter
from .results import Ends

if TYPE_CHECKING:
    from .node import Stats
    from .ports import ClusterPort, Persistence
    from .scantable import ScanTable

REASON_MAX_DELIVERIES: Final = b"max-deliveries"
REASON_PARENT_FAILED: Final = b"parent-failed"  # ADDJOB ... AFTER: a parent went dead
# QUEUED message flags (Disque's mflags[0]), here too: node.py imports this module.
INCR_NACKS: Final = 2
INCR_DELIV: Final = 4


class FailureStats:
    """What INFO and /metrics show of the failure policies (dead letters, back-off, RATE)."""

    __slots__ = ("dead_lettered", "backoff_requeues", "rate_limited", "revived",
                 "tokens_refused")

    def __init__(self) -> None:
        self.dead_lettered: Counter[bytes] = Counter()  # by the queue they came from
        self.backoff_requeues = 0
        self.rate_limited = 0  # deliveries a GETJOB could not make for lack of a token
        self.revived = 0  # dead letters put back (DEADLETTER REQUEUE)
        self.tokens_refused = 0  # jobs Consumers.take gave no consumer for lack of a token


@trait  # a base of several (mypyc compiles traits, not multiple inheritance)
class FailurePolicies:
    """Node's queue policies and what they do (a mixin: the state is set in
    Node.__init__)."""

    queues: ScanTable[bytes, Queue]
    cluster: ClusterPort
    persistence: Persistence
    stats: Stats
    policies: PolicyTable
    failures: FailureStats
    ends: Ends

    # Node's own methods, which these call (a trait declares them: Node defines them).
    def update_awake(self, job: Job) -> None:
        raise NotImplementedError

    def _into_queue(self, job: Job, now: int, queue: Queue | None,
                    requeued: bool = False) -> None:
        raise NotImplementedError

    def _queue_remove(self, job: Job) -> None:
        raise NotImplementedError

    def _requeue_time(self, now: int, retry: int) -> int:
        raise NotImplementedError

    def begin_history(self, job: Job) -> None:
        raise NotImplementedError

    def slot_freed(self, name: bytes | None, job: Job) -> None:
        raise NotImplementedError

    def logged_again(self, job: Job) -> None:
        raise NotImplementedError

    def member_ended(self, job: Job, how: int) -> None:
        raise NotImplementedError

    # -- the policies --------------------------------------------------------------------
    def merge_policy(self, policy: QueuePolicy, now: int) -> bool:
        """A policy defined, deleted or heard of (the newest version wins); its
        queue's rate limit follows. True if the table changed."""
        if not self.policies.merge(policy):
            return False
        queue = self.queues.get(policy.queue)
        if queue is not None:
            self.apply_rate(queue, now)
        return True

    def load_policy(self, policy: QueuePolicy, now: int) -> None:
        """A policy read from disk at start-up (nodes.conf, the AOF)."""
        self.merge_policy(policy, now)

    def apply_rate(self, queue: Queue, now: int) -> None:
        """Give `queue` the rate limiter and concurrency cap its policy asks for (a new
        queue, a new policy), or take them away."""
        policy = self.policies.get(queue.name) if self.policies.policies else None
        limit = policy.concurrency if policy is not None else 0
        cap = queue.cap
        if not limit:
            queue.cap = None
        elif cap is None:
            queue.cap = ConcurrencyCap(limit, now, self.cluster.size())
        else:
            cap.set_limit(limit)
        self.apply_group_limits(queue, policy, now)
        rate = policy.rate if policy is not None else 0.0
        limiter = queue.limiter
        if not rate:
            queue.limiter = None
        elif limiter is None:
            queue.limiter = RateLimiter(rate, now, self.cluster.size())
        elif limiter.rate != rate:
            limiter.set_rate(rate, rate * limiter.share / limiter.rate, now)

    def apply_group_limits(self, queue: Queue, policy: QueuePolicy | None, now: int) -> None:
        """GROUP-CONCURRENCY and GROUP-RATE (grouplimits.py): the queue's GroupLimits
        made, changed or dropped; a change brings every parked group back in the turns
        (GETJOB parks again those still held back)."""
        limit = policy.group_concurrency if policy is not None else 0
        rate = policy.group_rate if policy is not None else 0.0
        groups = queue.groups
        jobs = queue.jobs
        parking = jobs if type(jobs) is PriorityJobs else None
        if not limit and not rate:
            if groups is not None:
                groups.release(parking)
                queue.groups = None
        elif groups is None:
            queue.groups = GroupLimits(limit, rate, now, self.cluster.size())
        elif groups.concurrency != limit or groups.rate != rate:
            groups.set_limits(limit, rate, parking)

    # -- a failed delivery ---------------------------------------------------------------
    def failed_delivery(self, job: Job, nack: bool, now: int, delay_ms: int | None) -> bool:
        """A NACK, or the requeue of a job not acknowledged within its RETRY, under a
        policy, MAXDELIVERIES or NACK DELAY-MS: True if handled here (the job became a
        dead letter, or waits for its back-off: counted, the holders told), False if
        `enqueue` queues it now as usual."""
        ext = job.ext
        dead = ext is not None and ext.dead_from is not None
        policy = self.policies.get(job.queue) if (  # type: ignore[arg-type]  # named
            self.policies.policies and not dead) else None
        if not dead:
            limit = ext.max_deliveries if ext is not None and ext.max_deliveries else (
                policy.max_deliveries if policy is not None else 0)
            if limit and job.nacks + job.deliveries + 1 >= limit:
                self.dead_letter(job, now, policy)
                return True
        if delay_ms is None:
            if policy is None or not policy.backoff_base:
                return False
            delay_ms = policy.backoff_ms(job.nacks + job.deliveries + 1)
        if delay_ms <= 0:
            return False
        self.failures.backoff_requeues += 1
        if nack:
            job.nacks += 1
        else:
            job.deliveries += 1
            self.stats.jobs_requeued += 1
        until = ms_after(now, delay_ms)
        history.record(job, now, history.BACKING_OFF, b"%d ms" % delay_ms)
        lifecycle.backing_off(job)
        job.qtime = until
        job.flags |= BACKOFF_WAIT | BCAST_WILLQUEUE | BCAST_QUEUED
        self.cluster.job_queued(job, INCR_NACKS if nack else INCR_DELIV, until)
        self.update_awake(job)
        return True

    # -- dead letters --------------------------------------------------------------------
    def dead_letter(self, job: Job, now: int, policy: QueuePolicy | None = None,
                    reason: bytes = REASON_MAX_DELIVERIES) -> None:
        """Move `job` to its dead-letter queue, queued there, and tell its holders."""
        origin: bytes = job.queue  # type: ignore[assignment]  # a queued job is named
        target = policy.deadletter_queue if policy is not None else dead_letter_queue(origin)
        self.begin_history(job)
        history.record(job, now, history.DEAD_LETTERED, reason + b" to " + target)
        ext = job.ext or JobExt()
        generation = ext.generation + 1 if ext.generation % 2 == 0 else ext.generation + 2
        job.ext = ext.copy(dead_from=origin, dead_reason=reason, generation=generation)
        self.failures.dead_lettered[origin] += 1
        self._move(job, target, now)
        self.cluster.job_moved(job)
        if self.policies.policies:
            self.slot_freed(origin, job)  # a job of origin's CONCURRENCY ended
        self.member_ended(job, MEMBER_DEAD)
        if self.ends.watchers:
            self.ends.ended(job.id)

    def revive(self, job: Job, now: int) -> None:
        """DEADLETTER REQUEUE: a dead letter queued here back to the queue it came
        from, its counters reset; its holders told."""
        ext = job.ext
        assert ext is not None and ext.dead_from is not None
        origin = ext.dead_from
        job.ext = ext.copy(dead_from=None, dead_reason=None, generation=ext.generation + 1)
        job.nacks = job.deliveries = 0
        history.record(job, now, history.REVIVED, b"to " + origin)
        self.failures.revived += 1
        self._move(job, origin, now)
        self.cluster.job_moved(job)

    def revive_queue(self, name: bytes, count: int, now: int) -> int:
        """DEADLETTER REQUEUE on this node: up to `count` dead letters queued here in
        `name`, back to their queues. How many (fewer than `count`: none is left).
        The caller slices a big queue over several loop turns."""
        queue = self.queues.get(name)
        if queue is None:
            return 0
        dead = list(islice((job for job in queue.jobs
                            if job.ext is not None and job.ext.dead_from is not None), count))
        for job in dead:
            self.revive(job, now)
        return len(dead)

    def holds_dead_letters(self, name: bytes) -> bool:
        queue = self.queues.get(name)
        return queue is not None and any(
            job.ext is not None and job.ext.dead_from is not None for job in queue.jobs)

    def apply_move(self, job: Job, target: bytes, dead_from: bytes | None,
                   reason: bytes | None, generation: int, nacks: int, deliveries: int,
                   now: int) -> bool:
        """Another holder moved the job (a dead letter, or one put back): take the
        move if it is newer than this copy's state. This copy is not queued here
        then (the mover queued its own): it is requeued after RETRY, as after a
        QUEUED. True if taken."""
        ext = job.ext
        if job.state == ACKED or generation <= (ext.generation if ext is not None else 0):
            return False
        if job.state == QUEUED:
            self._queue_remove(job)
            lifecycle.dequeued(job)
        job.ext = (ext or JobExt()).copy(dead_from=dead_from, dead_reason=reason,
                                         generation=generation)
        job.queue = self._queue_name(target)
        job.nacks, job.deliveries = nacks, deliveries
        job.flags &= ~BACKOFF_WAIT
        if job.retry:
            job.flags |= BCAST_WILLQUEUE
            job.qtime = now + job.retry * 1000 + random_time_error()
            self.update_awake(job)
        self.logged_again(job)
        if dead_from is not None:
            self.member_ended(job, MEMBER_DEAD)
            if self.ends.watchers:
                self.ends.ended(job.id)
        return True

    def _move(self, job: Job, target: bytes, now: int) -> None:
        """This node's copy into queue `target`, queued now (a first queueing there:
        the holders hear of the move, not of a QUEUED)."""
        if job.state == QUEUED:
            self._queue_remove(job)
        job.queue = self._queue_name(target)
        lifecycle.moved(job)
        job.flags = (job.flags & ~BACKOFF_WAIT) | BCAST_QUEUED
        if job.retry:
            job.flags |= BCAST_WILLQUEUE
            job.qtime = self._requeue_time(now, job.retry)
        else:
            job.qtime = 0
        self.update_awake(job)
        self._into_queue(job, now, None)
        self.logged_again(job)

    def _queue_name(self, name: bytes) -> bytes:
        """The queue's own name object if it exists (shared by its jobs)."""
        queue = self.queues.get(name)
        return queue.name if queue is not None else name
