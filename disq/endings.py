"""How jobs end, on this node (disq extensions): the results kept (results.py's `Ends`,
counted in `job_bytes` with the jobs), WAITJOB's view of a job, and a CONCURRENCY
queue's consumers served when one of its jobs ends. A part of `Node` (disq/node.py),
which holds the state; the ACK that ends a job is jobops.py's."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from mypy_extensions import trait

from .batches import BatchTable
from .clock import now_ms
from .job import ACKED, QUEUED, Job
from .policies import PolicyTable
from .queue import PriorityJobs
from .results import ACKED_END, DEAD_END, DEFAULT_RESULT_TTL_MS, Ends, JobEnd
from .scantable import ScanTable

if TYPE_CHECKING:
    from .consumers import Consumers
    from .orderkeys import OrderKeys
    from .ports import Persistence
    from .queue import Queue


@trait  # a base of several (mypyc compiles traits, not multiple inheritance)
class JobEndings:
    """Node's results and job ends (a mixin: the state is set in Node.__init__). It
    comes first among Node's bases: JobOperations and the others declare these
    methods they call, and the first base's definition is the one that runs."""

    jobs: ScanTable[bytes, Job]
    queues: ScanTable[bytes, Queue]
    persistence: Persistence
    recording: bool
    ends: Ends
    consumers: Consumers
    policies: PolicyTable
    job_bytes: int
    full_bytes: int
    batches: BatchTable
    orderkeys: OrderKeys
    on_member_end: Callable[[bytes, bytes, int], None]

    def slot_freed(self, name: bytes | None, job: Job) -> None:
        """`job` of queue `name` ended: if the queue has a CONCURRENCY cap, its
        consumers waiting here are served after this operation (concurrency.py counts
        the job gone then); if its group was parked at its GROUP-CONCURRENCY, it is
        back in the turns (grouplimits.py)."""
        queue = self.queues.get(name) if name is not None else None
        if queue is None:
            return
        groups = queue.groups
        jobs = queue.jobs
        if groups is not None and type(jobs) is PriorityJobs and groups.job_ended(jobs, job):
            if queue.waiters:
                self.consumers.mark_ready(queue)
        elif queue.cap is not None and queue.waiters:
            self.consumers.mark_ready(queue)

    def member_ended(self, job: Job, how: int) -> None:
        """`job` ended here (batches.ACKED, DEAD or VOID): if it is a batch's member,
        its batch learns it, and the cluster tells every node (the first end stays)."""
        ext = job.ext
        if ext is not None and ext.orderkey is not None:  # the next of its key may go
            self.orderkeys.ended(job)
        if ext is not None and ext.batch is not None and self.batches.ended(
                ext.batch, job.id, how, now_ms()):
            self.on_member_end(ext.batch, job.id, how)

    def result_ttl_ms(self, queue: bytes | None) -> int:
        """How long a job of `queue` keeps its result: its RESULT-TTL policy, else
        an hour (a job this node does not know: an hour)."""
        policy = self.policies.get(queue) if queue is not None and (
            self.policies.policies) else None
        if policy is None or policy.result_ttl < 0:
            return DEFAULT_RESULT_TTL_MS
        return policy.result_ttl * 1000

    def keep_result(self, job_id: bytes, state: bytes, data: bytes | None, now: int,
                    ttl_ms: int | None = None, left_ms: int | None = None) -> bool:
        """Keep how `job_id` ended for its queue's RESULT-TTL unless `ttl_ms`, or
        `left_ms` if less (a peer's result: its time left there), within the memory
        left; False if a result was kept already."""
        job = self.jobs.get(job_id)
        queue = job.queue if job is not None else None
        if ttl_ms is None:
            ttl_ms = self.result_ttl_ms(queue)
        before = self.ends.bytes
        if not self.ends.keep(job_id, state, data, ttl_ms, now, queue, left_ms):
            return False
        end = self.ends.kept[job_id]
        self.results_changed(before)
        # The AOF records the result kept (unless eviction took it at once). Results
        # dropped later, past their time or evicted, get no record: a restart drops
        # them again, by their recorded expiry time or by memory as they load.
        if self.recording and self.ends.kept.get(job_id) is end:
            self.persistence.result_stored(end)
        return True

    def load_result(self, end: JobEnd, now: int) -> bool:
        """A result the AOF recorded (aof/loader.py): kept unless past its time or the
        job has one already (the first stays), within the memory left."""
        before = self.ends.bytes
        if not self.ends.load(end, now):
            return False
        self.results_changed(before)
        return True

    # The results count in job_bytes (memory.py): every mark, -OOM and used_memory see
    # them, and above the 95% mark the oldest go first, before any job.
    def results_changed(self, before: int) -> None:
        """The kept results took `before` bytes and now take `ends.bytes`: count the
        difference; above the 95% mark, drop the oldest."""
        self.job_bytes += self.ends.bytes - before
        if self.job_bytes > self.full_bytes:
            self.drop_results_to(self.full_bytes)

    def drop_results_to(self, target_job_bytes: int) -> None:
        """Drop the oldest results until `job_bytes` is at most the target (or none
        is left)."""
        ends = self.ends
        before = ends.bytes
        ends.evict(max(before - (self.job_bytes - target_job_bytes), 0))
        self.job_bytes += ends.bytes - before

    def expire_results(self, now: int) -> None:
        """The cron's: drop the results past their RESULT-TTL."""
        ends = self.ends
        before = ends.bytes
        ends.expire(now)
        self.job_bytes += ends.bytes - before

    def job_queue(self, job_id: bytes, now: int) -> bytes | None:
        """The queue of a job known here, or of its kept end (None: neither)."""
        job = self.jobs.get(job_id)
        if job is not None and job.queue is not None:
            return job.queue
        end = self.ends.get(job_id, now) if self.ends.kept else None
        return end.queue if end is not None else None

    def job_end(self, job_id: bytes, now: int) -> tuple[bytes, bytes | None]:
        """WAITJOB's view of a job here: (state, what it ended with): `acked` (its
        result, None without one), `dead` (a dead letter: its last NACK ... ERROR, else
        why it is one), `queued`, `active` (not acked yet, not queued: the progress
        data its consumer last reported, if any), `unknown` (neither the job nor its end is
        known here)."""
        job = self.jobs.get(job_id)
        end = self.ends.get(job_id, now) if self.ends.kept else None
        if job is None or job.queue is None:  # (a dummy ack: its result, if any)
            if end is not None:
                return end.how, end.data
            return (ACKED_END, None) if job is not None else (b"unknown", None)
        if job.state == ACKED:
            return ACKED_END, end.data if end is not None else None
        ext = job.ext
        if ext is None:
            return (b"queued" if job.state == QUEUED else b"active"), None
        notes = ext.notes
        if ext.dead_from is not None:
            last = notes.last_error if notes is not None else None
            return DEAD_END, ext.dead_reason if last is None else last
        if job.state == QUEUED:
            return b"queued", None
        return b"active", notes.progress_data if notes is not None else None
