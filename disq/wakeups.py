"""What the node does when its timer fires (`run`): the jobs whose time came (expiry,
a RETRY's requeue, the end of a DELAY, a WILLQUEUE to send, the GC of an acked job, a
copy of an unconfirmed ADDJOB to check), the rate-limited queues whose next token came,
and the CRON ticks due. A part of `Node` (disq/node.py), `Node.wakeups`: the node
keeps the job timers (`Node.timers`, which every change of a job schedules into) and
the CRON table; this part owns the rate limits' wake-ups and who fires the CRON ticks,
and arms the node's one timer (`Node.arm_timer`) for them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Final

from .batches import DEAD as MEMBER_DEAD
from .batches import VOID as MEMBER_VOID
from .clock import now_ms, random_time_error
from .job import (
    ACKED,
    ACTIVE,
    BCAST_WILLQUEUE,
    DELETED,
    DELIVERED,
    PROVISIONAL,
    PROVISIONAL_RECHECK_MS,
    QUEUED,
    WAIT_REPL,
    WILLQUEUE_ADVANCE_MS,
    Job,
)
from .queue import PAUSED_IN, Queue
from .schedules import CronSchedule

if TYPE_CHECKING:
    from .node import Node

TIMER_BATCH: Final = 10_000  # jobs handled per timer callback, so clients are not starved


def _fire_nothing(due: list[tuple[CronSchedule, int]]) -> None:
    pass


class Wakeups:
    """The node's timer work, and the wake-ups it owns besides the jobs': when each
    rate-limited queue's next token comes (`rate_wakeups`), and who fires the CRON
    ticks that came (`on_schedules_due`, replication/schedules.py)."""

    __slots__ = ("node", "rate_wakeups", "on_schedules_due")

    def __init__(self, node: Node) -> None:
        self.node = node
        self.rate_wakeups: dict[bytes, int] = {}  # queue -> when its next token comes
        self.on_schedules_due: Callable[[list[tuple[CronSchedule, int]]], None] = (
            _fire_nothing)

    def run(self, now: int | None = None) -> int | None:
        """Process due jobs, tokens and ticks; returns the next deadline (ms) or None."""
        if now is None:
            now = now_ms()
        node = self.node
        node.timers.run_due(now, self._process_job, TIMER_BATCH)
        deadline = node.timers.next_deadline()
        if self.rate_wakeups:
            wake = self._serve_rate_limited(now)
            if wake is not None and (deadline is None or wake < deadline):
                deadline = wake
        schedules = node.schedules
        cron_deadline = schedules.next_deadline()
        if cron_deadline is not None:
            if cron_deadline <= now:
                self.on_schedules_due(schedules.due(now))
                cron_deadline = schedules.next_deadline()
            if cron_deadline is not None and (deadline is None or cron_deadline < deadline):
                deadline = cron_deadline
        return deadline

    # -- the rate limits' tokens -----------------------------------------------------------
    def at_next_token(self, queue: Queue, now: int) -> None:
        """`queue` has jobs and waiting consumers but no token: serve them when the
        next token comes (one wake-up per queue at a time)."""
        limiter, groups = queue.limiter, queue.groups
        if (limiter is None and groups is None) or self.rate_wakeups.get(queue.name, 0) > now:
            return
        when = limiter.next_token_ms(now) if limiter is not None else None
        group_wake = groups.next_wake_ms() if groups is not None else None
        if group_wake is not None and (when is None or when == now or group_wake < when):
            when = group_wake  # (GROUP-RATE: the first group parked for a token gets it)
        if when is None:
            return
        self.rate_wakeups[queue.name] = when
        self.node.arm_timer(when)

    def _serve_rate_limited(self, now: int) -> int | None:
        """The waiters of the rate-limited queues whose next token came; the next
        such time, if any."""
        due = [name for name, when in self.rate_wakeups.items() if when <= now]
        node = self.node
        for name in due:
            del self.rate_wakeups[name]
            queue = node.queues.get(name)
            if queue is not None and queue.waiters and queue.jobs:
                node.consumers.mark_ready(queue)
        return min(self.rate_wakeups.values(), default=None)

    # -- CRON ------------------------------------------------------------------------------
    def load_schedule(self, schedule: CronSchedule, now: int) -> None:
        """A CRON schedule read from disk at start-up (nodes.conf, the AOF): the ticks
        missed meanwhile fire once (CronTable.load); the timer is armed for its next."""
        schedules = self.node.schedules
        schedules.load(schedule, now)
        deadline = schedules.next_deadline()
        if deadline is not None:
            self.node.arm_timer(deadline)

    def merge_schedule(self, schedule: CronSchedule) -> bool:
        """A CRON schedule defined, deleted or heard of (the newest version wins);
        the timer is armed for its next tick. True if the table changed."""
        schedules = self.node.schedules
        if not schedules.merge(schedule, now_ms()):
            return False
        deadline = schedules.next_deadline()
        if deadline is not None:
            self.node.arm_timer(deadline)
        return True

    # -- a job whose time came ---------------------------------------------------------------
    def _process_job(self, job: Job, now: int) -> None:
        node = self.node
        if job.etime <= now:
            node.stats.jobs_expired += 1
            if job.state == WAIT_REPL:
                node.cluster.job_dropped(job)
            if job.ext is not None and job.state != ACKED:  # a batch's member: it ended
                node.member_ended(job, MEMBER_VOID if job.state == WAIT_REPL else MEMBER_DEAD)
            node.unregister(job)
            return
        if (
            job.flags & BCAST_WILLQUEUE
            and (job.state == ACTIVE or job.state == QUEUED)
            and job.qtime
            and job.qtime - WILLQUEUE_ADVANCE_MS <= now
        ):
            if (job.state == ACTIVE and job.nodes_delivered is not None
                    and not job.flags & PROVISIONAL):
                node.cluster.send_willqueue(job)
            job.flags &= ~BCAST_WILLQUEUE
        if job.state == ACTIVE and job.qtime and job.qtime <= now and job.flags & PROVISIONAL:
            # a copy of an ADDJOB not known to have succeeded: the other holders first
            if node.cluster.size() > 1:
                job.qtime = now + PROVISIONAL_RECHECK_MS
                node.cluster.job_unconfirmed(job)
                node.update_awake(job)
                return
            node.confirm_copy(job)  # alone: nobody to ask
        if job.state == ACTIVE and job.qtime and job.qtime <= now:
            queue = node.queues.get(job.queue)
            if job.retry and queue is not None and queue.flags & PAUSED_IN:
                job.qtime = now + job.retry * 1000 + random_time_error()
            elif not (node.requeue_after_retry(job, now) if job.flags & DELIVERED
                      else node.enqueue(job, nack=False, now=now)):
                job.qtime = 0  # never requeued again (at-most-once, already delivered)
        elif job.state == QUEUED and job.qtime and job.qtime <= now and job.retry:
            job.flags |= BCAST_WILLQUEUE
            job.qtime = now + job.retry * 1000 + random_time_error()
        elif job.state == ACKED:
            node.try_gc(job, now)
            if job.state == DELETED:
                return
        node.update_awake(job)
