"""The node's state and the operations commands perform on it: the job registry, the
job timers and the queues here, and the parts `Node` owns: ADDJOB's admission of a new
job (admission.py, `Node.admission`), the consumers of the queues, GETJOB's and the
blocked ones (consumers.py, `Node.consumers`), what the timer does when it fires
(wakeups.py, `Node.wakeups`). Operations on existing jobs are in jobops.py, results
and job ends in endings.py, queue policies in failures.py and memory bounds in
memory.py (traits of `Node`).

Nothing here knows about sockets or the event loop. The server arms one loop timer
through `arm_timer`, blocked consumers are `Waiter` objects served after the command
that queued their jobs (`Consumers.serve_ready`, which the server runs after each
command and, asked through `consumers.on_ready`, at the end of the loop turn), and
everything that concerns other nodes goes through `self.cluster` (a `ClusterPort`,
ports.py; `SoloCluster` when the node is alone), so this module is testable without a
network.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

from . import lifecycle
from .admission import Admission
from .batches import BatchTable
from .clock import now_ms, random_time_error
from .config import Config
from .consumers import Consumers
from .dedup_table import DedupTable
from .endings import JobEndings
from .failures import (
    INCR_DELIV,
    INCR_NACKS,
    REASON_PARENT_FAILED,
    FailurePolicies,
    FailureStats,
)
from .history import QUEUED as HISTORY_QUEUED
from .history import only_history as history_only
from .history import record as record_history
from .ids import JobIdGenerator
from .job import (
    ACKED,
    ACTIVE,
    BACKOFF_WAIT,
    BCAST_QUEUED,
    BCAST_WILLQUEUE,
    DELIVERED,
    QUEUED,
    WILLQUEUE_ADVANCE_MS,
    Job,
    holder_set,
    notes_size,
)
from .jobops import JobOperations
from .memory import JOB_FOOTPRINT, NO_MEMORY_LIMIT, MemoryBounds
from .orderkeys import OrderKeys
from .policies import PolicyTable
from .ports import (
    NO_PERSISTENCE,
    NO_RETENTION,
    ClusterPort,
    Persistence,
    Retention,
    SoloCluster,
)
from .queue import (
    PAUSED_ALL,
    PAUSED_OUT,
    READY_EXT,
    READY_QUEUED,
    READY_REQUEUED,
    PriorityJobs,
    Queue,
)
from .results import Ends
from .scantable import ScanTable
from .schedules import CronTable
from .timers import JobTimers
from .topics import TopicTable
from .wakeups import Wakeups

# The clock is clock.py's; commands and the cluster layers take it from here too.
__all__ = ["INCR_DELIV", "INCR_NACKS", "JOB_FOOTPRINT", "QUEUE_MAX_IDLE_MS", "Node",
           "Stats", "now_ms", "random_time_error"]

QUEUE_MAX_IDLE_MS: Final = 300_000


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


def _no_member_end(bid: bytes, job_id: bytes, how: int) -> None:
    """`Node.on_member_end` without a cluster: nothing to tell."""


def _no_flow(job: Job) -> None:
    """`Node.on_flow_child` / `on_flow_gone` before the server watches flows."""


class Node(JobEndings, JobOperations, FailurePolicies, MemoryBounds):
    def __init__(self, config: Config, node_id: str) -> None:
        self.config = config
        # ADDJOB: its checks, the new job's ID and times (a new ID generator on set_id).
        self.admission = Admission(self, node_id)
        self.set_id(node_id)
        self.jobs: ScanTable[bytes, Job] = ScanTable()
        self.queues: ScanTable[bytes, Queue] = ScanTable()
        # ADDJOB DEDUP and UNIQUE keys (disq extensions): a UNIQUE key names a job held here
        self.dedup = DedupTable(self.holds_live)
        # The table holds every key recorded here since this time (ms): 0 for a node
        # that is new, its start for one that was in a cluster before (keys are kept
        # in memory only).
        self.dedup_since = 0
        self.timers = JobTimers()
        self.schedules = CronTable()  # CRON (a disq extension)
        # What the timer does when it fires, the rate limits' and CRON's wake-ups.
        self.wakeups = Wakeups(self)
        self.stats = Stats()
        self.policies = PolicyTable()  # QPOLICY (a disq extension, failures.py)
        self.failures = FailureStats()
        self.ends = Ends()  # results kept and WAITJOBs' watches (a disq extension)
        self.batches = BatchTable()  # BATCH (a disq extension): batches, members' ends
        self.topics = TopicTable()  # TOPIC (a disq extension): the queues subscribed
        # A member of a batch ended here: the cluster tells every node (bid, id, how).
        self.on_member_end: Callable[[bytes, bytes, int], None] = _no_member_end
        # A flow's child waiting for its parents came here, or left (ADDJOB ... AFTER:
        # the server's flows.py watches its parents).
        self.on_flow_child: Callable[[Job], None] = _no_flow
        self.on_flow_gone: Callable[[Job], None] = _no_flow
        self.cluster: ClusterPort = SoloCluster()
        # Where changes are recorded: the AOF writer installs itself while it records
        # (set_persistence), so the core calls it without asking whether it is there;
        # but the per-job paths (ADDJOB, ACK, a copy stored, a job gone, a batch's
        # commit) test `recording` first: a call to the null persistence costs ~700
        # instructions from compiled code, 4% of a compiled ADDJOB; this test, ~20.
        self.persistence: Persistence = NO_PERSISTENCE
        # RETAIN queues' acked jobs (retention/store.py: the server installs it)
        self.retention: Retention = NO_RETENTION
        self.recording = False  # persistence.recording, as a plain field
        self.leaving = False
        self.arm_timer: Callable[[int], None] = lambda when_ms: None
        # GETJOB and the consumers blocked in it: how many, the queues to serve.
        # (In pure Python a node of 30 attributes or more reads each one slower:
        # ~900 instructions more per ADDJOB, measured; so one object for these.)
        self.consumers = Consumers(self)
        self.orderkeys = OrderKeys(self)  # ADDJOB ... ORDERKEY's lines
        # maxmemory's marks in job bytes (see set_memory_limit): above `warn_bytes`
        # (75%) new jobs are placed on other nodes, above `full_bytes` (95%) nothing
        # new is taken that eviction cannot make room for.
        self.warn_bytes = self.full_bytes = NO_MEMORY_LIMIT
        self.may_evict = True  # maxmemory-policy acks (noeviction: False)
        self.job_bytes = 0  # estimated memory of the jobs (JOB_FOOTPRINT + body) and results
        self._last_requeue = (0, 0, 0)  # (now, retry, qtime) of the last enqueue
        self._queue_gc_names: list[bytes] = []

    def set_id(self, node_id: str) -> None:
        """The node's identity (a new one on CLUSTER RESET HARD): new jobs carry its
        ID prefix."""
        self.id = node_id
        self.admission.ids = JobIdGenerator(node_id)
        self.only_me = holder_set((node_id,))  # a new job's holders before replication

    def set_persistence(self, persistence: Persistence) -> None:
        """Record the node's changes there from now on (NO_PERSISTENCE: nowhere)."""
        self.persistence = persistence
        self.recording = persistence.recording

    # -- registry ------------------------------------------------------------------
    def lookup(self, job_id: bytes) -> Job | None:
        return self.jobs.get(job_id)

    def holds_live(self, job_id: bytes) -> bool:
        """Whether this node holds `job_id` and the job has not ended: not acked, not a
        dead letter (deleted and expired jobs are not held). A UNIQUE key is held only
        while its job is (dedup_table.py)."""
        job = self.jobs.get(job_id)
        if job is None or job.state >= ACKED:
            return False
        ext = job.ext
        return ext is None or ext.dead_from is None

    def register(self, job: Job) -> bool:
        if not self.jobs.add(job.id, job):
            return False
        self.job_bytes += JOB_FOOTPRINT + len(job.body or b"")
        ext = job.ext
        if ext is not None:  # (a job loaded with its errors)
            self.job_bytes += notes_size(job)
            if ext.orderkey is not None:
                self.orderkeys.joined(job, ext)
            if ext.batch is not None:  # a copy of a batch's member kept here
                self.batches.held(ext.batch, job.id)
            if ext.after is not None:  # a flow's child, waiting for its parents
                self.on_flow_child(job)
        return True

    def unregister(self, job: Job) -> None:
        """Forget a job entirely (eviction, expiry, GC, DELJOB)."""
        if job.state == QUEUED:
            self._queue_remove(job)
        state = job.state
        lifecycle.removed(job)
        if self.jobs.pop(job.id) is None:
            return
        if self.ends.watchers and job.id in self.ends.watchers:
            self.ends.left(job.id)  # a WAITJOB follows it (an ended job: told as such)
        body_len = len(job.body or b"")
        self.job_bytes -= JOB_FOOTPRINT + body_len
        ext = job.ext
        if ext is not None:  # its errors, progress
            self.job_bytes -= notes_size(job)
            if ext.orderkey is not None:
                self.orderkeys.ended(job)
            if ext.after is not None:
                self.on_flow_gone(job)
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
                policy: bool = True, sent: bool = False) -> bool:
        """Disque's enqueueJob: put an active job in its queue. False if not allowed
        (already queued, never to be requeued, or an at-most-once job already
        delivered). `queue`: the job's queue if the caller looked it up already.

        A requeue (a NACK, a RETRY) under a queue policy or with MAXDELIVERIES may
        make the job a dead letter or wait for a back-off (`failed_delivery`), as a
        NACK DELAY-MS (`delay_ms`) waits; `policy` False: an ENQUEUE, queued now.
        A job with an ORDERKEY is queued only as its line allows (orderkeys.py; `sent`:
        federation brought it here, its owner queued it)."""
        retry, flags = job.retry, job.flags
        if job.state == QUEUED or job.qtime == 0 or (retry == 0 and flags & DELIVERED):
            return False
        if now is None:
            now = now_ms()
        ext = job.ext
        if ext is not None and ext.orderkey is not None and ext.dead_from is None and (
                not self.orderkeys.admits(job, ext, nack or sent, now)):
            return True
        flags = job.flags  # (the gate may have changed them)
        after_backoff = False
        if flags & BACKOFF_WAIT:  # its back-off is over: counted when it began
            flags &= ~BACKOFF_WAIT
            after_backoff = True
        elif (flags & BCAST_QUEUED or nack) and policy and (
                delay_ms is not None or self.policies.policies or job.ext is not None) and (
                self.failed_delivery(job, nack, now, delay_ms)):
            return True
        ext = job.ext
        if ext is not None and ext.parent_failed:  # a flow's child: a parent went dead
            self.dead_letter(job, now, self.policies.get(job.queue) if job.queue else None,
                             REASON_PARENT_FAILED)
            return True
        lifecycle.queued(job)
        if ext is not None:  # (a plain job has no history: history.py)
            record_history(job, now, HISTORY_QUEUED)
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
        ext = job.ext
        # a job whose JobExt holds only its history (a Disque job that failed a delivery:
        # history.py) is queued and told as a plain job (no priority for the peers)
        plain = ext is None or history_only(ext)
        if ext is None:
            queue.jobs.add(job)
        else:
            jobs = queue.jobs_for(job)  # priority, group: may switch the queue's order
            jobs.add(job)
            groups = queue.groups
            if requeued and groups is not None and type(jobs) is PriorityJobs:
                groups.job_ended(jobs, job)  # its run ended: its group may run one more
        queue.atime = now  # Disque's enqueueJob: an enqueue is an access too
        queue.jobs_in += 1
        if queue.waiters and not queue.flags & PAUSED_OUT:
            # Its consumers are served after this operation (serve_ready), which then
            # does what follows here for the jobs they leave.
            why = READY_QUEUED
            if requeued:
                why |= READY_REQUEUED
            if not plain:
                why |= READY_EXT
            consumers = self.consumers
            if consumers.filtered:  # consumers blocked with GETJOB ... WHERE look at it
                consumers.arrived(queue, job)
            consumers.mark_ready(queue, why)
            return
        if queue.remote_wanted and queue.jobs:
            self.cluster.jobs_available(queue, requeued)
        if not plain:
            self.tell_best(queue, now)

    def tell_best(self, queue: Queue, now: int) -> None:
        """Priorities across nodes: a job with a priority or group tells the peers when
        it makes the queue's best more urgent than they heard (a plain job says
        nothing; a queue this node imports keeps its jobs for its own consumers)."""
        if queue.best_priority() < queue.told_best and not queue.import_rate_at(now):
            self.cluster.best_changed(queue)

    def queue_when_due(self, job: Job, now: int, not_before: int = 0,
                       sent: bool = False) -> bool:
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
        return self.enqueue(job, nack=False, now=now, sent=sent)

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

    @property
    def blocked_clients(self) -> int:
        """The consumers blocked in GETJOB (INFO's blocked_clients)."""
        return self.consumers.count

    # -- a new job --------------------------------------------------------------------
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
        if ext is not None and ext.orderkey is not None:  # queued as its line allows
            lifecycle.replicated(job)
            job.qtime = now
            if self.recording:
                self.persistence.job_stored(job)
            self.enqueue(job, nack=False, now=now, queue=queue)
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
            self.consumers.mark_ready(queue)
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
        for job_id in list(self.ends.watchers):  # their WAITJOBs look elsewhere
            self.ends.left(job_id)
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
        self.orderkeys.clear()
        if self.ends.kept:
            persistence.results_flushed()  # or a restart would bring them back
        self.ends.clear()
        self._queue_gc_names = []
