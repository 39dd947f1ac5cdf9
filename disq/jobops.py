"""What happens to jobs that exist, by command or by another node's message:
acknowledgement and its garbage collection, NACK/ENQUEUE/DEQUEUE/DELJOB/WORKING, JOBSET,
and the copies other nodes replicate here. A part of `Node` (disq/node.py), which holds
the state; ADDJOB, queues, timers and memory live there."""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from mypy_extensions import trait

from . import errors, history, lifecycle
from .batches import ACKED as MEMBER_ACKED
from .clock import now_ms
from .clock import random_time_error as _time_error
from .config import Config
from .ids import ttl_minutes_from_id
from .job import (
    ACKED,
    ACTIVE,
    BACKOFF_WAIT,
    BCAST_QUEUED,
    BCAST_WILLQUEUE,
    DELETED,
    DELIVERED,
    NO_HOLDERS,
    NO_PROGRESS,
    PROVISIONAL,
    QUEUED,
    WAIT_REPL,
    Job,
    JobError,
    JobExt,
    JobNotes,
    job_notes,
    node_id_set,
    notes_size,
)
from .policies import PolicyTable
from .purges import Purge
from .results import ACKED_END, Ends
from .scantable import ScanTable

if TYPE_CHECKING:
    from .consumers import Consumers
    from .node import Stats
    from .orderkeys import OrderKeys
    from .ports import ClusterPort, Persistence, Retention
    from .queue import Queue

# An end kept for the WAITJOBs told of it, even where results are not kept (RESULT-TTL 0)
WATCHED_END_MS: Final = 10_000
GC_RETRY_MAX_MS: Final = 180_000  # acked jobs: GC attempts back off from 1 s up to this


@trait  # a base of several (mypyc compiles traits, not multiple inheritance)
class JobOperations:
    """Node's operations on existing jobs (a mixin: the state is set in Node.__init__,
    and these use Node's registry, queue and timer methods)."""

    config: Config
    id: str
    jobs: ScanTable[bytes, Job]
    queues: ScanTable[bytes, Queue]
    cluster: ClusterPort
    persistence: Persistence
    retention: Retention
    recording: bool
    stats: Stats
    leaving: bool
    ends: Ends
    consumers: Consumers
    orderkeys: OrderKeys
    policies: PolicyTable
    job_bytes: int

    # Node's own methods, which these call (a trait declares them: Node defines them).
    def register(self, job: Job) -> bool:
        raise NotImplementedError

    def unregister(self, job: Job) -> None:
        raise NotImplementedError

    def update_awake(self, job: Job) -> None:
        raise NotImplementedError

    def enqueue(self, job: Job, nack: bool, now: int | None = None,
                queue: Queue | None = None, delay_ms: int | None = None,
                policy: bool = True) -> bool:
        raise NotImplementedError

    def dequeue(self, job: Job) -> bool:
        raise NotImplementedError

    def queue_when_due(self, job: Job, now: int, not_before: int = 0) -> bool:
        raise NotImplementedError

    def _requeue_time(self, now: int, retry: int) -> int:
        raise NotImplementedError

    # JobEndings' (endings.py), which these call.
    def slot_freed(self, name: bytes | None, job: Job) -> None:
        raise NotImplementedError

    def keep_result(self, job_id: bytes, state: bytes, data: bytes | None, now: int,
                    ttl_ms: int | None = None, left_ms: int | None = None) -> bool:
        raise NotImplementedError

    def result_ttl_ms(self, queue: bytes | None) -> int:
        raise NotImplementedError

    def member_ended(self, job: Job, how: int) -> None:
        raise NotImplementedError

    # -- acknowledgements ----------------------------------------------------------
    def ack(self, ids: list[bytes], result: bytes | None = None) -> int:
        """ACKJOB: the jobs known and not already acked. With `result` (ACKJOB id
        RESULT blob: one ID), the result is kept here first, and the SETACKs carry it
        to the job's other holders (results.py)."""
        known = 0
        multi = self.cluster.size() > 1
        now = now_ms()
        if result is not None:
            self.keep_result(ids[0], ACKED_END, result, now)
        for job_id in ids:
            job = self.jobs.get(job_id)
            if job is None:
                if multi and not self.leaving and ttl_minutes_from_id(job_id) & 1:
                    job = self._dummy_ack(job_id, now)
            elif self.acknowledge(job):
                known += 1
            if job is not None:
                self.try_gc(job, now)
        return known

    def acknowledge(self, job: Job) -> bool:
        """Mark a job acked (ACKJOB here, or SETACK from another node). False if it
        already was. Replication confirmations are dropped: GC collects its own."""
        if job.state == ACKED:
            return False
        self.dequeue(job)
        state = job.state
        lifecycle.acked(job)
        job.nodes_confirmed = None
        self.stats.jobs_acked += 1
        if self.policies.policies:  # (a RETAIN queue has a policy)
            self.slot_freed(job.queue, job)
            self.retention.job_acked(job)
        if job.ext is not None:  # (a batch's member; a job with a history)
            history.record(job, now_ms(), history.ACKED)
            self.member_ended(job, MEMBER_ACKED)
        if self.ends.watchers and job.id in self.ends.watchers:
            self._acked_for_watchers(job)
        if self.recording and state in (ACTIVE, QUEUED):
            self.persistence.job_removed(job.id)
        return True

    def _acked_for_watchers(self, job: Job) -> None:
        """A WAITJOB is told after this operation, when the job may be gone (no other
        holder: deleted now): its end is kept for it to read."""
        ttl = max(self.result_ttl_ms(job.queue), WATCHED_END_MS)
        self.keep_result(job.id, ACKED_END, None, now_ms(), ttl)
        self.ends.ended(job.id)

    def _dummy_ack(self, job_id: bytes, now: int) -> Job:
        """An ACK for a job this node never saw, kept to spread it (cluster only)."""
        ttl_ms = ttl_minutes_from_id(job_id) * 60_000
        job = Job(job_id, None, None, ACKED, 0, now + ttl_ms, 0, 0, 0)
        job.nodes_delivered = NO_HOLDERS
        self.register(job)
        return job

    def try_gc(self, job: Job, now: int | None = None) -> None:
        """Disque's tryJobGC: delete now if no other node may hold a copy, else let the
        cluster run a SETACK/GOTACK round and schedule the next attempt. The nodes that
        confirmed the ACK stay confirmed from one attempt to the next."""
        delivered = job.nodes_delivered
        if delivered is None or (delivered <= {self.id} and job.body is not None):
            self.unregister(job)
            return
        if job.nodes_confirmed is None:
            job.nodes_confirmed = node_id_set((self.id,))
        job.gc_retry += 1
        self.cluster.start_gc(job)
        if job.state == ACKED:
            self.schedule_gc(job, now)

    def schedule_gc(self, job: Job, now: int | None = None) -> None:
        """The next GC attempt of an acked job: 1 s, 2 s, 4 s... up to 3 min, by the
        number of attempts so far (for acked jobs `qtime` is that time)."""
        backoff = min(1000 << min(max(job.gc_retry - 1, 0), 8), GC_RETRY_MAX_MS)
        job.qtime = (now or now_ms()) + backoff + _time_error()
        self.update_awake(job)

    def fast_ack(self, ids: list[bytes]) -> int:
        deleted = 0
        for job_id in ids:
            job = self.jobs.get(job_id)
            self.cluster.fast_ack(job_id, job)
            if job is not None:
                if job.state != ACKED:
                    self.stats.jobs_acked += 1
                    if self.policies.policies:
                        self.retention.job_acked(job)
                    if self.ends.watchers and job.id in self.ends.watchers:
                        self._acked_for_watchers(job)  # (not just gone: acked)
                self.unregister(job)
                deleted += 1
        return deleted

    # -- other job commands ----------------------------------------------------------
    def requeue(self, ids: list[bytes], nack: bool, delay_ms: int | None = None,
                error: bytes | None = None) -> int:
        """NACK / ENQUEUE: active jobs back into their queue. A NACK may make a job a
        dead letter, or queue it after a back-off (its DELAY-MS, or the queue's
        BACKOFF policy: failures.py); an ENQUEUE queues it now. `error` (NACK ...
        ERROR reason, a disq extension) is kept with each job requeued."""
        count = 0
        now = now_ms()
        for job_id in ids:
            job = self.jobs.get(job_id)
            if job is None or job.state != ACTIVE:
                continue
            ext, notes_bytes = job.ext, notes_size(job)
            if nack:  # a failed delivery: the job's history begins, if not yet
                self._nack_recorded(job, error, now)
            if (self.enqueue(job, nack, now, delay_ms=delay_ms, policy=nack)
                    if error is None else self._nack_with_error(job, error, delay_ms, now)):
                count += 1
                if nack:
                    self.stats.jobs_nacked += 1
            elif nack:  # nothing done (never requeued): its history as it was
                self._history_undone(job, ext, notes_bytes)
        return count

    def _nack_recorded(self, job: Job, error: bytes | None, now: int) -> None:
        """The NACK in the job's history (begun now if it has none): its delivery
        number and its ERROR reason. Recorded first, as the events it leads to
        (queued, backing off, dead-lettered) follow it."""
        self.begin_history(job)
        detail = b"delivery %d" % (job.nacks + job.deliveries + 1)
        history.record(job, now, history.NACKED,
                       detail if error is None else detail + b": " + error)

    def begin_history(self, job: Job) -> None:
        """The job's history on this node from now on (history.py), in its notes,
        which count its bytes; it starts with the job's addition."""
        notes = job_notes(job)
        if notes is not None and notes.history is not None:
            return
        new_notes = (notes or JobNotes()).with_history()
        history.seed(new_notes.history, job)  # type: ignore[arg-type]  # just begun
        self._set_notes(job, notes, new_notes)

    def requeue_after_retry(self, job: Job, now: int) -> bool:
        """A job this node delivered is due again (`enqueue`): past its RETRY without
        an ACK, a failed delivery that begins its history (not so at the end of a
        back-off, already recorded)."""
        if not job.retry or job.flags & BACKOFF_WAIT:
            return self.enqueue(job, False, now)
        ext, notes_bytes = job.ext, notes_size(job)
        self.begin_history(job)
        history.record(job, now, history.REQUEUED, b"no ACK within its RETRY (%d s)" % job.retry)
        if self.enqueue(job, False, now):
            return True
        self._history_undone(job, ext, notes_bytes)
        return False

    def _history_undone(self, job: Job, ext: JobExt | None, notes_bytes: int) -> None:
        """The failure just recorded did not happen after all (the NACK of a job that
        is never requeued): the job as it was before, its event and a history begun
        for it gone (a history already there had the event: it is taken back)."""
        if ext is not None and ext.notes is not None and ext.notes.history is not None:
            events = ext.notes.history.events
            if events:
                events.pop()
        self.job_bytes += notes_bytes - notes_size(job)
        job.ext = ext

    def _nack_with_error(self, job: Job, error: bytes, delay_ms: int | None,
                         now: int) -> bool:
        """A NACK with its error: the error joins the job's notes first, so that the
        message telling the holders of the requeue (QUEUED, or JOBMOVE for a job
        that becomes a dead letter) carries it; nothing changes if the job cannot be
        requeued. The job is logged again (its errors are in the AOF)."""
        ext, notes = job.ext, job_notes(job)
        entry: JobError = (job.nacks + job.deliveries + 1, now, error)
        new_notes = (notes or JobNotes()).with_error(entry)
        job.ext = (ext or JobExt()).copy(notes=new_notes)
        if not self.enqueue(job, True, now, delay_ms=delay_ms):
            job.ext = ext
            return False
        self.job_bytes += new_notes.size - (notes.size if notes is not None else 0)
        moved = job.ext.generation != (ext.generation if ext is not None else 0)
        if self.recording and not moved:  # (a move logs the job itself)
            self.logged_again(job)
        return True

    def learn_errors(self, job: Job, errors: list[JobError]) -> None:
        """Another holder's errors of the job (with its QUEUED or JOBMOVE): kept
        here too, the job logged again if they are news."""
        notes = job_notes(job)
        new_notes = (notes or JobNotes()).with_errors(errors)
        if new_notes is notes or job.state == ACKED or job.state == DELETED:
            return
        self._set_notes(job, notes, new_notes)
        if self.recording and (job.state == ACTIVE or job.state == QUEUED):
            self.logged_again(job)

    def set_progress(self, job: Job, progress: int | None, data: bytes | None) -> None:
        """WORKING ... PROGRESS / DATA (here, or heard from another holder): kept in
        memory with the job (not logged: the next report replaces it)."""
        notes = job_notes(job)
        self._set_notes(job, notes, (notes or JobNotes()).with_progress(progress, data))

    def logged_again(self, job: Job) -> None:
        """The AOF's copy of a changed job: a DELJOB then its LOADJOB (the loader
        keeps the first LOADJOB of a job it knows)."""
        self.persistence.job_removed(job.id)
        self.persistence.job_stored(job)

    def _set_notes(self, job: Job, notes: JobNotes | None, new_notes: JobNotes) -> None:
        """The job's notes (`notes` until now) replaced, its JobExt copied (one may be
        shared), their bytes counted."""
        job.ext = (job.ext or JobExt()).copy(notes=new_notes)
        self.job_bytes += new_notes.size - (notes.size if notes is not None else 0)

    def job_progress(self, job_id: bytes) -> int | None:
        """The last progress a consumer reported for a job held here (None: none)."""
        job = self.jobs.get(job_id)
        notes = job_notes(job) if job is not None else None
        if notes is None or notes.progress == NO_PROGRESS:
            return None
        return notes.progress

    def dequeue_ids(self, ids: list[bytes]) -> int:
        count = 0
        for job_id in ids:
            job = self.jobs.get(job_id)
            if job is not None and self.dequeue(job):
                self.update_awake(job)
                count += 1
        return count

    def delete(self, ids: list[bytes]) -> int:
        count = 0
        for job_id in ids:
            job = self.jobs.get(job_id)
            if job is not None:
                if job.state == WAIT_REPL:
                    self.cluster.job_dropped(job)
                self.unregister(job)
                self.stats.jobs_deleted += 1
                count += 1
        return count

    def purge(self, purge: Purge) -> int:
        """QDEL / QPURGE here: every job of the purge's queue created before it,
        deleted as DELJOB deletes (the AOF records each); QDEL's also the queue (its
        pause state), unless jobs added since or blocked consumers keep it. How many.
        (One pass over the node's jobs: only the queued ones are indexed by queue.)"""
        name = purge.queue
        before = purge.at
        count = self.delete([job.id for job in self.jobs.values()
                             if job.queue == name and job.ctime < before])
        if purge.whole:
            queue = self.queues.get(name)
            if queue is not None and not queue.jobs:
                if queue.waiters:
                    queue.flags = 0
                else:
                    self.queues.pop(name)
        return count

    def working(self, job_id: bytes, progress: int | None = None,
                data: bytes | None = None) -> int:
        """WORKING: the job's requeue postponed here and on its holders; `progress`
        (0..100) and `data` (WORKING ... PROGRESS / DATA, disq extensions) kept with
        it and told to the holders with the WORKING."""
        job = self.jobs.get(job_id)
        if job is None or job.state == DELETED:
            raise errors.NOJOB
        now = now_ms()
        created_ms = job.ctime // 1_000_000
        ttl = job.etime - created_ms
        if ttl > 0 and now - created_ms > ttl // 2:
            raise errors.TOOLATE
        if job.state == QUEUED:
            self.dequeue(job)
        if job.state != ACKED:
            self.postpone_requeue(job, now)
            if progress is not None or data is not None:
                self.set_progress(job, progress, data)
        self.cluster.job_working(job)
        return job.retry

    def postpone_requeue(self, job: Job, now: int | None = None,
                         not_before: int = 0) -> None:
        """Someone works on the job, or queued it elsewhere: requeue it here only after
        another RETRY, announced by a WILLQUEUE, counted from `not_before` if later
        (another node queues it then: the end of its back-off). Nothing for
        at-most-once jobs. A back-off of this node's own is over: queued elsewhere."""
        if job.retry:
            job.flags = (job.flags | BCAST_WILLQUEUE) & ~BACKOFF_WAIT
            job.qtime = max(now or now_ms(), not_before) + job.retry * 1000 + _time_error()
            self.update_awake(job)

    # -- JOBSET ------------------------------------------------------------------------
    def set_job(self, job: Job, priority: int | None, due: int | None,
                now: int | None = None, broadcast: bool = True) -> None:
        """JOBSET (a disq extension) on this node's copy: a new priority and/or due time
        (Unix ms on this node's clock; None: unchanged). The job's group stays.

        * queued: out of its queue and back in its new place; moved into the future,
          it stays out (active) until its due time, when it is queued again as after
          an ADDJOB AT (the queueing is not broadcast: the other holders' requeue
          times follow the new due time, below);
        * active, waiting here for its due time or DELAY (`_waits_for_due`): queued
          at the new due time, or now if that is past;
        * active otherwise (delivered and not acked yet, or a copy kept here against
          the loss of the node that queues it): requeued here RETRY after the new due
          time (after now if it is past), as a copy is after its first due time;
          at-most-once jobs (RETRY 0) are never requeued, as before;
        * acked: -ERR, unchanged; being replicated (WAIT_REPL: its ADDJOB has not
          returned, so no client has its ID but through JSCAN): -ERR, try again.

        The job is written to the AOF again (a DELJOB then its LOADJOB: the loader
        keeps the first LOADJOB of a job it knows). `broadcast`: tell the job's other
        holders (a change asked on this node, not one heard from another)."""
        state = job.state
        if state == ACKED:
            raise errors.JOB_ACKED
        if state == WAIT_REPL:
            raise errors.JOB_WAIT_REPL
        if state == DELETED:
            raise errors.NOJOB
        if now is None:
            now = now_ms()
        if due is not None and due >= job.etime:
            raise errors.JOB_DUE_BEYOND_TTL
        waiting = state == ACTIVE and self._waits_for_due(job, now)
        ext = job.ext
        if ext is None:
            ext = JobExt()
        new_ext = ext.copy(priority=ext.priority if priority is None else priority,
                           due=ext.due if due is None else due)
        if state == QUEUED:
            # A queued job is found in its queue by its priority and group: out first.
            queue = self.queues.get(job.queue)
            if queue is not None:
                queue.jobs.remove(job)
            job.ext = new_ext
            if due is not None and due > now:
                lifecycle.dequeued(job)
                job.flags &= ~(BCAST_QUEUED | BCAST_WILLQUEUE)
                job.qtime = due
                self.update_awake(job)
            elif queue is not None:
                queue.jobs_for(job).add(job)
        else:
            job.ext = new_ext
            if due is not None and job.qtime:
                if waiting:
                    self.queue_when_due(job, now)
                elif job.retry:
                    job.flags |= BCAST_WILLQUEUE
                    job.qtime = max(due, now) + job.retry * 1000 + _time_error()
                    self.update_awake(job)
        self.logged_again(job)
        if broadcast:
            self.cluster.job_set(job, priority, due)

    @staticmethod
    def _waits_for_due(job: Job, now: int) -> bool:
        """Whether an active job is to be queued here at its due time or after its
        DELAY (an ADDJOB's job not queued yet, a copy another node asked to queue, a
        job JOBSET moved), rather than requeued after RETRY (a delivered job, or a
        copy kept against the loss of the node that queues it: both marked, by
        DELIVERED and by BCAST_QUEUED)."""
        if not job.qtime:
            return False
        ext = job.ext
        if ext is not None and ext.due > now and job.qtime == ext.due:
            return True
        return not job.flags & (BCAST_QUEUED | DELIVERED)

    # -- copies from other nodes -------------------------------------------------------
    def first_requeue_time(self, job: Job, now: int) -> int:
        """When a job that this node did not queue (a copy from another node, a job
        loaded from the AOF) is first requeued here: after DELAY + RETRY, counted from
        its due time if that is later (AT / DELAY-MS), so never before it."""
        ext = job.ext
        if ext is not None and ext.due > now:
            return ext.due + job.retry * 1000 + _time_error()
        # Shared by the copies that arrive together: one timer bucket, one int.
        return self._requeue_time(now, job.delay + job.retry)

    def confirm_copy(self, job: Job, now: int = 0) -> None:
        """A PROVISIONAL copy's job exists (its ADDJOB succeeded): the mark goes, in
        the AOF too (a DELJOB then its LOADJOB). `now`: the copy was held back from its
        queue while its holders were asked (replication/provisional.py): it is queued
        at once (the caller updates the timer)."""
        job.flags &= ~PROVISIONAL
        if job.state != ACTIVE and job.state != QUEUED:
            return
        self.logged_again(job)
        if now and job.state == ACTIVE and job.qtime:
            job.qtime = now

    def store_copy(self, job: Job, now: int | None = None) -> bool:
        """Keep a job another node replicated here (REPLJOB): active, not queued. Its
        first requeue here comes after DELAY + RETRY unless a node that queued it says
        so first. False if a job with that ID is here already."""
        if not self.register(job):
            return False
        queue = self.queues.get(job.queue)
        if queue is not None:
            job.queue = queue.name  # share one name object between the queue's jobs
        lifecycle.copy_stored(job)
        job.flags = (job.flags & ~DELIVERED) | BCAST_QUEUED  # queueing it here is news
        if job.retry:
            job.flags |= BCAST_WILLQUEUE
            job.qtime = self.first_requeue_time(job, now or now_ms())
        else:
            job.qtime = 0
        if self.recording:
            self.persistence.job_stored(job)
        self.update_awake(job)
        ext = job.ext
        if ext is not None and ext.orderkey is not None:  # the owner may queue it now
            self.orderkeys.copy_arrived(job, ext, now or now_ms())
        return True
