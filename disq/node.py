"""The node's state and the operations commands perform on it: the job registry,
timers, queues and blocked consumers, ADDJOB here; operations on existing jobs in
jobops.py and memory bounds in memory.py (parts of `Node`).

Nothing here knows about sockets or the event loop. The server arms one loop timer
through `arm_timer`, blocked consumers are `Waiter` objects served after the command
that queued their jobs (`serve_ready`, which the server runs after each command and,
asked through `parked.on_ready`, at the end of the loop turn), and everything that
concerns other nodes goes through `self.cluster` (a `ClusterPort`, ports.py;
`SoloCluster` when the node is alone), so this module is testable without a network.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Final

from . import errors, lifecycle
from .clock import ms_after, now_ms, random_time_error
from .config import Config
from .dedup_table import DedupTable
from .failures import INCR_DELIV, INCR_NACKS, FailurePolicies, FailureStats
from .ids import JobIdGenerator
from .job import (
    ACKED,
    ACTIVE,
    BACKOFF_WAIT,
    BCAST_QUEUED,
    BCAST_WILLQUEUE,
    DEFAULT_PRIORITY,
    DELETED,
    DELIVERED,
    NO_HOLDERS,
    PROVISIONAL,
    PROVISIONAL_RECHECK_MS,
    QUEUED,
    WAIT_REPL,
    WILLQUEUE_ADVANCE_MS,
    Job,
    JobExt,
    holder_set,
)
from .jobops import JobOperations
from .memory import NO_MEMORY_LIMIT, MemoryBounds
from .policies import PolicyTable
from .ports import NO_PERSISTENCE, ClusterPort, Persistence, SoloCluster
from .queue import (
    NO_PRIORITY,
    PAUSED_ALL,
    PAUSED_IN,
    PAUSED_OUT,
    READY,
    READY_EXT,
    READY_QUEUED,
    READY_REQUEUED,
    ParkedConsumers,
    Queue,
    Waiter,
)
from .requests import AddJob
from .scantable import ScanTable
from .schedules import CronSchedule, CronTable
from .timers import JobTimers

# The clock is clock.py's; commands and the cluster layers take it from here too.
__all__ = ["DEFAULT_RETRY_MAX", "INCR_DELIV", "INCR_NACKS", "JOB_FOOTPRINT",
           "QUEUE_MAX_IDLE_MS", "TIMER_BATCH", "Node", "Stats", "now_ms",
           "random_time_error"]

DEFAULT_RETRY_MAX: Final = 300
QUEUE_MAX_IDLE_MS: Final = 300_000
# Memory per job beyond its body, as measured with 1M queued jobs (bench/RESULTS.md):
# what used_memory counts per job, so it falls when jobs go (RSS never does).
JOB_FOOTPRINT: Final = 416
TIMER_BATCH: Final = 10_000  # jobs handled per timer callback, so clients are not starved
# A peer said it has more urgent jobs of a queue than this node: its consumers wait
# this long at most for them (asked for at once) before they get this node's own.
URGENT_HOLD_MS: Final = 100


STATS_COUNTERS: Final = (
    "jobs_added", "jobs_delivered", "jobs_acked", "jobs_requeued", "jobs_expired",
    "jobs_nacked", "jobs_deleted", "jobs_imported", "jobs_exported", "jobs_evicted",
)


# A job body this long is let go of as soon as its job is deleted: the job timers keep
# the job object (a stale entry, skipped) until its next time, up to its TTL away.
RELEASED_BODY: Final = 64 * 1024


class Stats:
    """Counters the core keeps anyway; INFO and Prometheus read them at query time."""

    __slots__ = STATS_COUNTERS

    def __init__(self) -> None:
        self.jobs_added = self.jobs_delivered = self.jobs_acked = self.jobs_requeued = 0
        self.jobs_expired = self.jobs_nacked = self.jobs_deleted = self.jobs_imported = 0
        self.jobs_exported = self.jobs_evicted = 0

    def counters(self) -> dict[str, int]:
        """Every counter by name (a compiled Stats has no `__slots__` to read)."""
        return {name: getattr(self, name) for name in STATS_COUNTERS}


class Node(JobOperations, FailurePolicies, MemoryBounds):
    def __init__(self, config: Config, node_id: str) -> None:
        self.config = config
        self.set_id(node_id)
        self.jobs: ScanTable[bytes, Job] = ScanTable()
        self.queues: ScanTable[bytes, Queue] = ScanTable()
        self.dedup = DedupTable()  # ADDJOB DEDUP keys (a disq extension)
        # The table holds every key recorded here since this time (ms): 0 for a node
        # that is new, its start for one that was in a cluster before (keys are kept
        # in memory only).
        self.dedup_since = 0
        self.timers = JobTimers()
        self.schedules = CronTable()  # CRON (a disq extension)
        # Who fires the schedules whose tick came (replication/schedules.py).
        self.on_schedules_due: Callable[[list[tuple[CronSchedule, int]]], None] = (
            lambda due: None)
        self.stats = Stats()
        self.policies = PolicyTable()  # QPOLICY (a disq extension, failures.py)
        self.failures = FailureStats()
        self._rate_wakeups: dict[bytes, int] = {}  # queue -> when its next token comes
        self.cluster: ClusterPort = SoloCluster()
        # Where changes are recorded: the AOF writer installs itself while it records
        # (set_persistence), so the core calls it without asking whether it is there;
        # but the per-job paths (ADDJOB, ACK, a copy stored, a job gone, a batch's
        # commit) test `recording` first: a call to the null persistence costs ~700
        # instructions from compiled code, 4% of a compiled ADDJOB; this test, ~20.
        self.persistence: Persistence = NO_PERSISTENCE
        self.recording = False  # persistence.recording, as a plain field
        self.leaving = False
        self.arm_timer: Callable[[int], None] = lambda when_ms: None
        # Consumers blocked in GETJOB: how many, the queues to serve (serve_ready).
        # (In pure Python a node of 30 attributes or more reads each one slower:
        # ~900 instructions more per ADDJOB, measured; so one object for these.)
        self.parked = ParkedConsumers()
        # maxmemory's marks in job bytes (see set_memory_limit): above `warn_bytes`
        # (75%) new jobs are placed on other nodes, above `full_bytes` (95%) nothing
        # new is taken that eviction cannot make room for.
        self.warn_bytes = self.full_bytes = NO_MEMORY_LIMIT
        self.may_evict = True  # maxmemory-policy acks (noeviction: False)
        self._prev_ctime = 0
        self.job_bytes = 0  # estimated memory of the jobs held (JOB_FOOTPRINT + body)
        self._last_etime = 0
        self._last_requeue = (0, 0, 0)  # (now, retry, qtime) of the last enqueue
        self._queue_gc_names: list[bytes] = []

    def set_id(self, node_id: str) -> None:
        """The node's identity (a new one on CLUSTER RESET HARD): new jobs carry its
        ID prefix."""
        self.id = node_id
        self.ids = JobIdGenerator(node_id)
        self.only_me = holder_set((node_id,))  # a new job's holders before replication

    def set_persistence(self, persistence: Persistence) -> None:
        """Record the node's changes there from now on (NO_PERSISTENCE: nowhere)."""
        self.persistence = persistence
        self.recording = persistence.recording

    # -- registry ------------------------------------------------------------------
    def lookup(self, job_id: bytes) -> Job | None:
        return self.jobs.get(job_id)

    def register(self, job: Job) -> bool:
        if not self.jobs.add(job.id, job):
            return False
        self.job_bytes += JOB_FOOTPRINT + len(job.body or b"")
        return True

    def unregister(self, job: Job) -> None:
        """Forget a job entirely (eviction, expiry, GC, DELJOB)."""
        if job.state == QUEUED:
            self._queue_remove(job)
        state = job.state
        lifecycle.removed(job)
        if self.jobs.pop(job.id) is None:
            return
        body_len = len(job.body or b"")
        self.job_bytes -= JOB_FOOTPRINT + body_len
        if body_len >= RELEASED_BODY:  # the timers keep the job until its next time
            job.body = b""
        if self.recording and state in (ACTIVE, QUEUED):
            self.persistence.job_removed(job.id)

    # -- timers --------------------------------------------------------------------
    def update_awake(self, job: Job) -> None:
        """Disque's updateJobAwakeTime: the next moment the timer must look at the job."""
        at = job.etime
        if job.state == ACKED:
            if job.qtime and job.qtime < at:  # for acked jobs qtime = next GC attempt
                at = job.qtime
        elif job.qtime and (job.state == ACTIVE or job.state == QUEUED):
            q = job.qtime
            if job.flags & BCAST_WILLQUEUE and job.nodes_delivered is not None:
                q -= WILLQUEUE_ADVANCE_MS
            if q < at:
                at = q
        if at != job.awake and self.timers.schedule(job, at):  # a new earliest deadline
            self.arm_timer(at)

    def load_schedule(self, schedule: CronSchedule, now: int) -> None:
        """A CRON schedule read from disk at start-up (nodes.conf, the AOF): the ticks
        missed meanwhile fire once (CronTable.load); the timer is armed for its next."""
        self.schedules.load(schedule, now)
        deadline = self.schedules.next_deadline()
        if deadline is not None:
            self.arm_timer(deadline)

    def merge_schedule(self, schedule: CronSchedule) -> bool:
        """A CRON schedule defined, deleted or heard of (the newest version wins);
        the timer is armed for its next tick. True if the table changed."""
        if not self.schedules.merge(schedule, now_ms()):
            return False
        deadline = self.schedules.next_deadline()
        if deadline is not None:
            self.arm_timer(deadline)
        return True

    def run_timers(self, now: int | None = None) -> int | None:
        """Process due jobs; returns the next deadline (ms) or None."""
        if now is None:
            now = now_ms()
        self.timers.run_due(now, self._process_job, TIMER_BATCH)
        deadline = self.timers.next_deadline()
        if self._rate_wakeups:
            wake = self._serve_rate_limited(now)
            if wake is not None and (deadline is None or wake < deadline):
                deadline = wake
        cron_deadline = self.schedules.next_deadline()
        if cron_deadline is not None:
            if cron_deadline <= now:
                self.on_schedules_due(self.schedules.due(now))
                cron_deadline = self.schedules.next_deadline()
            if cron_deadline is not None and (deadline is None or cron_deadline < deadline):
                deadline = cron_deadline
        return deadline

    def _serve_rate_limited(self, now: int) -> int | None:
        """The waiters of the rate-limited queues whose next token came; the next
        such time, if any."""
        due = [name for name, when in self._rate_wakeups.items() if when <= now]
        for name in due:
            del self._rate_wakeups[name]
            queue = self.queues.get(name)
            if queue is not None and queue.waiters and queue.jobs:
                self.mark_ready(queue)
        return min(self._rate_wakeups.values(), default=None)

    def _process_job(self, job: Job, now: int) -> None:
        if job.etime <= now:
            self.stats.jobs_expired += 1
            if job.state == WAIT_REPL:
                self.cluster.job_dropped(job)
            self.unregister(job)
            return
        if (
            job.flags & BCAST_WILLQUEUE
            and (job.state == ACTIVE or job.state == QUEUED)
            and job.qtime
            and job.qtime - WILLQUEUE_ADVANCE_MS <= now
        ):
            if (job.state == ACTIVE and job.nodes_delivered is not None
                    and not job.flags & PROVISIONAL):
                self.cluster.send_willqueue(job)
            job.flags &= ~BCAST_WILLQUEUE
        if job.state == ACTIVE and job.qtime and job.qtime <= now and job.flags & PROVISIONAL:
            # a copy of an ADDJOB not known to have succeeded: the other holders first
            if self.cluster.size() > 1:
                job.qtime = now + PROVISIONAL_RECHECK_MS
                self.cluster.job_unconfirmed(job)
                self.update_awake(job)
                return
            self.confirm_copy(job)  # alone: nobody to ask
        if job.state == ACTIVE and job.qtime and job.qtime <= now:
            queue = self.queues.get(job.queue)
            if job.retry and queue is not None and queue.flags & PAUSED_IN:
                job.qtime = now + job.retry * 1000 + random_time_error()
            elif not self.enqueue(job, nack=False, now=now):
                job.qtime = 0  # never requeued again (at-most-once, already delivered)
        elif job.state == QUEUED and job.qtime and job.qtime <= now and job.retry:
            job.flags |= BCAST_WILLQUEUE
            job.qtime = now + job.retry * 1000 + random_time_error()
        elif job.state == ACKED:
            self.try_gc(job, now)
            if job.state == DELETED:
                return
        self.update_awake(job)

    # -- queues --------------------------------------------------------------------
    def queue(self, name: bytes, now: int | None = None) -> Queue:
        """Look up a queue, creating it on demand."""
        queue = self.queues.get(name)
        if queue is None:
            now = now_ms() if now is None else now
            queue = Queue(name, now)
            self.queues.add(name, queue)
            if self.policies.policies:
                self.apply_rate(queue, now)
        return queue

    def qlen(self, name: bytes) -> int:
        queue = self.queues.get(name)
        return len(queue.jobs) if queue is not None else 0

    def enqueue(self, job: Job, nack: bool, now: int | None = None,
                queue: Queue | None = None, delay_ms: int | None = None,
                policy: bool = True) -> bool:
        """Disque's enqueueJob: put an active job in its queue. False if not allowed
        (already queued, never to be requeued, or an at-most-once job already
        delivered). `queue`: the job's queue if the caller looked it up already.

        A requeue (a NACK, a RETRY) under a queue policy or with MAXDELIVERIES may
        make the job a dead letter or wait for a back-off (`failed_delivery`), as a
        NACK DELAY-MS (`delay_ms`) waits; `policy` False: an ENQUEUE, queued now."""
        retry, flags = job.retry, job.flags
        if job.state == QUEUED or job.qtime == 0 or (retry == 0 and flags & DELIVERED):
            return False
        if now is None:
            now = now_ms()
        after_backoff = False
        if flags & BACKOFF_WAIT:  # its back-off is over: counted when it began
            flags &= ~BACKOFF_WAIT
            after_backoff = True
        elif (flags & BCAST_QUEUED or nack) and policy and (
                delay_ms is not None or self.policies.policies or job.ext is not None) and (
                self.failed_delivery(job, nack, now, delay_ms)):
            return True
        lifecycle.queued(job)
        if retry:
            flags |= BCAST_WILLQUEUE
            job.qtime = self._requeue_time(now, retry)
        else:
            job.qtime = 0
        requeued = True
        if after_backoff:
            job.flags = flags
            self.cluster.job_queued(job, 0)  # the holders postpone their requeue
        elif flags & BCAST_QUEUED or nack:
            job.flags = flags
            if nack:
                job.nacks += 1
            else:
                job.deliveries += 1
                self.stats.jobs_requeued += 1
            self.cluster.job_queued(job, INCR_NACKS if nack else INCR_DELIV)
        else:
            job.flags = flags | BCAST_QUEUED  # the first queueing is not broadcast
            requeued = False
        self.update_awake(job)
        self._into_queue(job, now, queue, requeued)
        return True

    def _into_queue(self, job: Job, now: int, queue: Queue | None,
                    requeued: bool = False) -> None:
        """The end of enqueue(): the job joins its queue (created on demand), a
        blocked consumer or a node that asked for the queue gets it. `requeued`: queued
        here before (a NACK, a RETRY, the end of a back-off), not for the first time."""
        if queue is None:
            queue = self.queues.get(job.queue)
            if queue is None:
                queue = self.queue(job.queue, now)  # type: ignore[arg-type]  # queued: named
        if job.ext is None:
            queue.jobs.add(job)
        else:
            queue.jobs_for(job).add(job)  # priority, group: may switch the queue's order
        queue.atime = now  # Disque's enqueueJob: an enqueue is an access too
        queue.jobs_in += 1
        if queue.waiters and not queue.flags & PAUSED_OUT:
            # Its consumers are served after this operation (serve_ready), which then
            # does what follows here for the jobs they leave.
            why = READY_QUEUED
            if requeued:
                why |= READY_REQUEUED
            if job.ext is not None:
                why |= READY_EXT
            self.mark_ready(queue, why)
            return
        if queue.remote_wanted and queue.jobs:
            self.cluster.jobs_available(queue, requeued)
        if job.ext is not None:
            self._tell_best(queue, now)

    def _tell_best(self, queue: Queue, now: int) -> None:
        """Priorities across nodes: a job with a priority or group tells the peers when
        it makes the queue's best more urgent than they heard (a plain job says
        nothing; a queue this node imports keeps its jobs for its own consumers)."""
        if queue.best_priority() < queue.told_best and not queue.import_rate_at(now):
            self.cluster.best_changed(queue)

    def queue_when_due(self, job: Job, now: int, not_before: int = 0) -> bool:
        """Queue an active copy now, or schedule it for `not_before` or its due time
        (AT / DELAY-MS) if that is still ahead: a job another node queued, or asked
        this node to queue, is never delivered here before its due time. True if
        queued now."""
        ext = job.ext
        at = ext.due if ext is not None and ext.due > not_before else not_before
        if at > now:
            job.qtime = at
            self.update_awake(job)
            return False
        return self.enqueue(job, nack=False, now=now)

    def _requeue_time(self, now: int, retry: int) -> int:
        """now + RETRY, spread by a random error. The jobs queued in the same
        millisecond with the same RETRY share one value (one int object, 32 bytes per
        job saved in bursts); the spread that matters, between the nodes holding
        copies of a job, comes from each node drawing its own error."""
        last = self._last_requeue
        if last[0] == now and last[1] == retry:
            return last[2]
        qtime = now + retry * 1000 + random_time_error()
        self._last_requeue = (now, retry, qtime)
        return qtime

    def _queue_remove(self, job: Job) -> None:
        queue = self.queues.get(job.queue)
        if queue is not None:
            queue.jobs.remove(job)

    def dequeue(self, job: Job) -> bool:
        """QUEUED -> ACTIVE without delivering (DEQUEUE, WORKING, ACK)."""
        if job.state != QUEUED:
            return False
        self._queue_remove(job)
        lifecycle.dequeued(job)
        return True

    def take(self, queue: Queue, now: int, hold: bool = True) -> Job | None:
        """The one delivery of a queued job to a consumer: GETJOB's pass (get_jobs) and
        every serving of parked consumers (serve_ready) take their jobs here, so a
        queue's pause, its hold for a peer's more urgent jobs, its RATE and its order
        apply alike. The next job: the most urgent, the groups of a priority in turn,
        the oldest of a group (queue.py). None: none now (`failures.tokens_refused`
        counts one more if for lack of a RATE token). `hold` False (NOHANG): no hold
        for a peer's jobs."""
        if queue.flags & PAUSED_OUT:
            return None
        if hold and queue.remote_best < NO_PRIORITY and self.held_for_peers(queue, now):
            return None
        limiter = queue.limiter
        if limiter is not None and queue.jobs and not limiter.take(now):
            self.failures.tokens_refused += 1  # RATE (failures.py)
            return None
        job = queue.jobs.pop_first()
        if job is None:
            return None
        lifecycle.delivered(job)
        job.flags |= DELIVERED
        queue.atime = now
        queue.jobs_out += 1
        self.stats.jobs_delivered += 1
        if queue.told_best != NO_PRIORITY and queue.best_priority() > queue.told_best:
            self.cluster.best_changed(queue)  # the peers heard of a job gone now
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
            self.cluster.want_more_urgent(queue, local)
            return True
        if now < queue.hold_until:
            return True
        queue.forget_peer_best()
        return False

    def get_jobs(self, names: list[bytes], count: int, hold: bool = True) -> list[Job]:
        """GETJOB's non-blocking pass: one job per queue per round, left to right.
        `hold`: a queue whose more urgent jobs are on a peer gives none now
        (`held_for_peers`: a consumer that blocks gets them); False (NOHANG): it
        gives its own."""
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
                job = self.take(queue, now, hold)
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
        if self.leaving:
            return
        now = now_ms()
        for name in dict.fromkeys(names):
            queue = self.queue(name, now)
            if queue.limiter is None or not queue.jobs:
                self.cluster.need_jobs(queue)

    # -- blocked consumers -----------------------------------------------------------
    def block(self, waiter: Waiter, names: list[bytes]) -> list[Queue]:
        """Park a consumer on queues; the caller keeps the returned list to unblock."""
        now = now_ms()
        queues: list[Queue] = []
        for name in dict.fromkeys(names):
            queue = self.queue(name, now)
            queue.waiters.append(waiter)
            queues.append(queue)
            if queue.limiter is not None and queue.jobs:  # jobs, but no token: RATE
                self.wake_at_next_token(queue, now)
        self.parked.count += 1
        return queues

    def unblock(self, waiter: Waiter, queues: Iterable[Queue]) -> None:
        for queue in queues:
            try:
                queue.waiters.remove(waiter)
            except ValueError:
                pass
            federation = queue.federation
            if federation is not None and federation.asked_time and not queue.waiters:
                self.cluster.jobs_not_needed(queue)  # the last one left: stop the pushes
        self.parked.count -= 1

    @property
    def blocked_clients(self) -> int:
        """The consumers blocked in GETJOB (INFO's blocked_clients)."""
        return self.parked.count

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
            parked = self.parked
            if not parked.ready:
                parked.on_ready()
            parked.ready.append(queue)
        queue.ready |= why

    def serve_ready(self) -> None:
        """Serve the consumers blocked on the queues marked ready, the queues in the
        order they were marked, each one's consumers in the order they came, each
        job taken by `take`. A consumer gone meanwhile (timed out, disconnected) has
        left the queues: the jobs it would have had stay queued."""
        parked = self.parked
        while parked.ready:
            ready, parked.ready = parked.ready, []
            now = now_ms()
            for queue in ready:
                why, queue.ready = queue.ready, 0
                if queue.waiters and queue.jobs:
                    self._serve_waiters(queue, now)
                if why & READY_QUEUED:  # _into_queue's end, for the jobs left
                    if queue.remote_wanted and queue.jobs:
                        self.cluster.jobs_available(queue, bool(why & READY_REQUEUED))
                    if why & READY_EXT:
                        self._tell_best(queue, now)

    def _serve_waiters(self, queue: Queue, now: int) -> None:
        waiters = queue.waiters
        failures = self.failures
        refused = failures.tokens_refused
        while waiters and queue.jobs:
            job = self.take(queue, now)
            if job is None:
                if failures.tokens_refused != refused:
                    self.wake_at_next_token(queue, now)
                break
            waiters[0].serve_job(job)  # it leaves every queue it waited on

    # -- ADDJOB --------------------------------------------------------------------
    def add_job(self, request: AddJob) -> Job:
        """ADDJOB, its checks in Disque's order. The returned job is WAIT_REPL when the
        caller must wait for synchronous replication (the cluster layer answers later),
        else it is queued or scheduled already.

        A leaving node replicates externally, as Disque does: it keeps no copy, sends
        the job to REPLICATE other nodes and has one of them queue it. QUEUE-RANDOMLY
        (a later Disque option) does the same on purpose, in a cluster: the job is
        queued on a random one of the nodes it is replicated to, not here."""
        repl, retry, delay, ttl = request.repl, request.retry, request.delay, request.ttl
        body = request.body
        if len(body) > self.config.job_max_body:  # more than the bus may carry
            raise errors.body_too_big(len(body), self.config.job_max_body)
        now = now_ms()
        if repl is None:
            size = self.cluster.size()
            repl = size if size < 3 else 3
        if retry == 0 and repl > 1:
            raise errors.err(
                "With RETRY set to 0 please explicitly set  REPLICATE to 1 "
                "(at-most-once delivery)"
            )
        if delay >= ttl:
            raise errors.err(
                "The specified DELAY is greater than TTL. Job refused since would never "
                "be delivered"
            )
        ext = None if request.ext is None else self._job_ext(request, now, ttl)
        if retry is None:
            retry = DEFAULT_RETRY_MAX if ttl >= 10 * DEFAULT_RETRY_MAX else (ttl // 10 or 1)
        # Leaving, or short of memory: keep no copy here (Disque's external replication).
        size = JOB_FOOTPRINT + len(body)
        short = self.job_bytes > self.warn_bytes
        external = (self.leaving or short or request.queue_randomly) and (
            self.leaving or self.cluster.size() > 1)
        if repl > 1 or external:
            additional = repl if external else repl - 1
            if additional > self.cluster.reachable_peers():
                if external and (self.leaving or short) and (
                        additional - 1 == self.cluster.reachable_peers()):
                    raise errors.NOREPL_LEAVING if self.leaving else errors.NOREPL_OOM
                raise errors.NOREPL
        # A job kept here must fit under the 95% mark: a node full of big jobs
        # refuses the next big one and goes on taking the small ones that fit.
        if self.job_bytes + size > self.full_bytes and not external and (
                not self.make_room(size)):
            raise errors.OOM
        queue_name = request.queue
        queue = self.queues.get(queue_name)
        if queue is not None:
            maxlen = request.maxlen
            if maxlen and len(queue.jobs) >= maxlen:
                raise errors.MAXLEN
            if queue.flags & PAUSED_IN:
                raise errors.PAUSED
            queue_name = queue.name  # share one name object between the queue's jobs
        ctime = now * 1_000_000
        if ctime <= self._prev_ctime:
            ctime = self._prev_ctime + 1
        self._prev_ctime = ctime
        # Whole seconds, as Disque (server.unixtime + TTL): a job lives between TTL-1
        # and TTL seconds, and the jobs of one second share one expiry int object.
        etime = (now // 1000 + ttl) * 1000
        if etime == self._last_etime:
            etime = self._last_etime  # one int object for a burst's jobs: 32 bytes each
        else:
            self._last_etime = etime
        job = Job(self.ids.next(ttl, retry), queue_name, body, WAIT_REPL, ctime, etime,
                  delay, retry, repl)
        if ext is not None:
            job.ext = ext
        if external:
            self.stats.jobs_added += 1
            job.nodes_delivered = NO_HOLDERS
            async_ = request.async_
            self.cluster.replicate(job, request, not async_, True, now)
            if async_:
                lifecycle.not_kept(job)  # nothing kept here: the reply is just the ID
            return job
        if not self.jobs.add(job.id, job):  # 144 random bits: a collision means a bug
            raise errors.err("Internal error creating the job, check server logs")
        self.job_bytes += size  # register(), inlined: hot path
        self.stats.jobs_added += 1
        if repl > 1:
            job.nodes_delivered = self.only_me
            if not request.async_:
                self.cluster.replicate(job, request, True, False, now)
                return job
        self.activate(job, now, queue)
        if repl > 1:
            self.cluster.replicate(job, request, False, False, now)
        return job

    @staticmethod
    def _job_ext(request: AddJob, now: int, ttl: int) -> JobExt:
        """The JobExt of an ADDJOB with PRIORITY, GROUP, DELAY-MS, AT or MAXDELIVERIES: its due time
        in Unix ms (an AT in the past means now), refused if the job would expire
        first (as Disque refuses a DELAY not below the TTL)."""
        due = 0
        if request.delay_ms is not None:
            due = ms_after(now, request.delay_ms)
        elif request.at is not None:
            due = request.at if request.at > now else now
        if due and due >= (now // 1000 + ttl) * 1000:  # the expiry add_job gives the job
            raise errors.err(
                f"The specified {'DELAY-MS' if request.delay_ms is not None else 'AT'} is "
                "beyond the TTL. Job refused since would never be delivered")
        priority = request.priority
        return JobExt(DEFAULT_PRIORITY if priority is None else priority, request.group, due,
                      request.max_deliveries or 0)

    def activate(self, job: Job, now: int | None = None, queue: Queue | None = None) -> None:
        """A new job's copies exist: queue it now, or schedule it after its delay, or
        for its due time (AT / DELAY-MS: the one timer, to the millisecond; its RETRY
        then counts from there, as after a DELAY). `queue`: the job's queue if the
        caller looked it up already."""
        if now is None:
            now = now_ms()
        ext = job.ext
        if job.delay or (ext is not None and ext.due > now):
            lifecycle.replicated(job)
            job.qtime = ext.due if ext is not None and ext.due > now else now + job.delay * 1000
            self.update_awake(job)
            if self.recording:
                self.persistence.job_stored(job)
            return
        # enqueue() and update_awake() for a job never queued before, inlined: this
        # is ADDJOB's hot path. The first queueing is not broadcast (BCAST_QUEUED).
        lifecycle.replicated_queued(job)
        at = job.etime
        if job.retry:
            job.qtime = qtime = self._requeue_time(now, job.retry)
            job.flags |= BCAST_WILLQUEUE | BCAST_QUEUED
            if job.nodes_delivered is not None:
                qtime -= WILLQUEUE_ADVANCE_MS
            if qtime < at:
                at = qtime
        else:
            job.qtime = 0
            job.flags |= BCAST_QUEUED
        if at != job.awake and self.timers.schedule(job, at):  # a new earliest deadline
            self.arm_timer(at)
        if self.recording:  # logged queued, as Disque does (after enqueueJob)
            self.persistence.job_stored(job)
        self._into_queue(job, now, queue)

    # -- pause -----------------------------------------------------------------------
    def set_pause(self, name: bytes, flags: int, broadcast: bool) -> None:
        queue = self.queue(name)
        old = queue.flags
        queue.flags = (old & ~PAUSED_ALL) | (flags & PAUSED_ALL)
        if old & PAUSED_OUT and not queue.flags & PAUSED_OUT and queue.waiters:
            self.mark_ready(queue)
        if broadcast:
            self.cluster.pause(name, flags & PAUSED_ALL)

    def pause_flags(self, name: bytes) -> int:
        queue = self.queues.get(name)
        return queue.flags & PAUSED_ALL if queue is not None else 0

    # -- housekeeping ------------------------------------------------------------------
    def gc_queues(self, now: int, budget: int = 100) -> int:
        """Drop empty, idle, unpaused queues nobody waits on; a few per call. The idle
        time allowed shrinks under memory pressure (Disque: /30 above 75% of
        maxmemory, 2 s above 95%)."""
        level = self.memory_level
        max_idle = QUEUE_MAX_IDLE_MS if level == 0 else (
            QUEUE_MAX_IDLE_MS // 30 if level == 1 else 2000)
        removed = 0
        if not self._queue_gc_names:
            self._queue_gc_names = [q.name for q in self.queues.values()]
        names = self._queue_gc_names
        while names and budget > 0:
            budget -= 1
            queue = self.queues.get(names.pop())
            if (
                queue is not None
                and not queue.jobs
                and not queue.waiters
                and not queue.flags & PAUSED_ALL
                and now - queue.atime > max_idle
            ):
                self.queues.pop(queue.name)
                removed += 1
            elif queue is not None:
                queue.compact()
        return removed

    def flushall(self) -> None:
        persistence = self.persistence
        for job in list(self.jobs.values()):
            if job.state == ACTIVE or job.state == QUEUED:
                persistence.job_removed(job.id)  # as Disque's flushServerData: a DELJOB each
            lifecycle.removed(job)
        self.jobs.clear()
        self.job_bytes = 0
        waiting = [q for q in self.queues.values() if q.waiters]
        self.queues.clear()
        for queue in waiting:  # keep the blocked consumers' queues alive
            queue.clear_jobs()
            queue.flags = 0
            self.queues.add(queue.name, queue)
        self.timers.clear()
        self.dedup.clear()
        self._queue_gc_names = []
