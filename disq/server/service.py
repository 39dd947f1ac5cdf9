"""The job operations every front end runs: typed arguments in, typed results out, the
caller's queue permissions applied once here. A RESP handler is parse -> service ->
encode (commands/jobs.py); an HTTP route is JSON -> service -> JSON (http/api.py),
with no RESP in between.

The operations that answer at once: ACKJOB, FASTACK, NACK, ENQUEUE, DEQUEUE, DELJOB,
WORKING, SHOW, JSCAN. Those that may answer later: ADDJOB and ADDJOBS (`add`, `add_many`:
the job waits for its copies, or for the other nodes' word on its DEDUP key) and JOBSET
(`set_job`: the job's other holders are asked). Only when it must wait, the service
asks the front end for its answer that comes later (disq/outcomes.py: `Answers.later`:
RESP's a `Pending`, server/pending.py; HTTP's a `HeldAnswer`, awaited with a Future), hands
the cluster its `added` / `changed`, which get the typed outcome, and returns it. The
service decides which answers wait for the AOF (an ADDJOB's) and what the front end
cancels if its client leaves first (an ADDJOB waiting for its copies is deleted
everywhere, as Disque does; a DEDUP add stands: a retry with its key gets the ID).
GETJOB (`get`) gives the jobs now, or the front end parks a consumer (`park`: a RESP
client, or an HTTP long poll's waiter), served after the command that queued its job.

`gate` is what a front end asks before running a command for a user when it does not
come through the RESP dispatch (connection.py): the checks the dispatch makes, the same
sequence (guard.py's `refusal`: whether the user may run it and use the queues the
request names, -OOM, -MISCONF, -LOADING), raised as `DisqError`s; it counts the call
in the command's statistics as the dispatch does.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

from .. import errors, history
from ..attrs import flat
from ..errors import DisqError, err
from ..ids import is_valid_job_id
from ..job import NO_PROGRESS, STATE_BY_NAME, STATE_NAMES, WAIT_REPL
from ..node import now_ms
from ..options import validate_ids
from ..outcomes import Answer, Answers
from ..requests import DEFAULT_TTL
from .guard import NOPERM_KEY, refusal
from .job_waits import JobWait
from .queue_service import scan
from .table import COMMANDS

if TYPE_CHECKING:
    from ..acl import User
    from ..end_requests import WaitJob
    from ..job import Job
    from ..node import Node
    from ..policies import QueuePolicy
    from ..queue import Queue, Waiter
    from ..queue_requests import JScan
    from ..requests import AddJob, AddJobs, GetJob, JobSet
    from .app import Server

A = TypeVar("A", bound=Answer)  # a front end's answer that comes later (disq/outcomes.py)

# A field of a job as SHOW gives it: text (bytes), a number, a list of node IDs, a list of
# errors ([delivery, unix ms, reason]), or none.
FieldValue = bytes | int | list[bytes] | list[list[int | bytes]] | None


def job_fields(job: Job, my_id: str, now: int) -> list[tuple[bytes, FieldValue]]:
    """Every field of a job, in SHOW's order (Disque's fields, then disq's extensions
    for a job that uses them: Disque clients parse fixed layouts), for SHOW's reply and
    the HTTP API's job object alike. After the dead-letter fields: `errors` (NACK ...
    ERROR's, oldest first) when there are some, `progress` and `progress-data` (WORKING
    ... PROGRESS / DATA) when one was reported, then `history` ([unix ms, event,
    detail], this node's view: history.py) for a job that failed a delivery, `batch`
    (ADDJOB ... BATCH) for a batch's member. A job whose JobExt holds only its history
    (a Disque job that failed) shows Disque's fields, then its history alone."""
    delivered = job.nodes_delivered
    fields: list[tuple[bytes, FieldValue]] = [
        (b"id", job.id), (b"queue", job.queue),
        (b"state", STATE_NAMES.get(job.state, b"deleted")),
        (b"repl", job.repl), (b"ttl", max((job.etime - now) // 1000, 0)),
        (b"ctime", job.ctime), (b"delay", job.delay), (b"retry", job.retry),
        (b"nacks", job.nacks), (b"additional-deliveries", job.deliveries),
        (b"nodes-delivered",
         [my_id.encode()] if delivered is None else [n.encode() for n in sorted(delivered)]),
        (b"nodes-confirmed",
         [n.encode() for n in sorted(job.nodes_confirmed)] if job.nodes_confirmed else []),
        (b"next-requeue-within", max(job.qtime - now, 0) if job.qtime else None),
        (b"next-awake-within", max(job.awake - now, 0) if job.awake else None),
        (b"body", job.body),
    ]
    ext = job.ext
    if ext is not None:
        if not history.only_history(ext):  # (a NACKed Disque job shows Disque's fields, then it)
            fields += [(b"priority", ext.priority), (b"group", ext.group),
                       (b"due-ms", ext.due)]
        if ext.extra:
            fields += [(b"max-deliveries", ext.max_deliveries),
                       (b"dead-from", ext.dead_from), (b"dead-reason", ext.dead_reason)]
        notes = ext.notes
        if notes is not None:
            if notes.errors:
                errors_shown: list[list[int | bytes]] = [
                    [delivery, when, reason] for delivery, when, reason in notes.errors]
                fields.append((b"errors", errors_shown))
            if notes.progress != NO_PROGRESS or notes.progress_data is not None:
                fields += [(b"progress", None if notes.progress == NO_PROGRESS
                            else notes.progress), (b"progress-data", notes.progress_data)]
            if notes.history is not None:  # this node's view (history.py)
                events: list[list[int | bytes]] = [
                    [when, event, detail] for when, event, detail in notes.history.events]
                fields.append((b"history", events))
        if ext.batch is not None:
            fields.append((b"batch", ext.batch))
        if ext.after is not None:  # a flow's child waiting for these parents
            fields.append((b"after", list(ext.after)))
        if ext.attrs is not None:  # ADDJOB ... ATTR: key, value, key, value...
            fields.append((b"attrs", flat(ext.attrs)))
        if ext.orderkey is not None:  # ADDJOB ... ORDERKEY k [STRICT]
            fields += [(b"orderkey", ext.orderkey), (b"orderkey-strict", int(ext.order_strict))]
    return fields


class JobService:
    """The job operations of one node (`Server.jobs`)."""

    __slots__ = ("server", "node", "policies", "latencies")

    def __init__(self, server: Server) -> None:
        self.server = server
        self.node: Node = server.node
        self.latencies = server.hot.latencies  # (a field: the Server's are looked up by name)
        # queue -> its QPOLICY (PolicyTable's dict, never replaced): ADDJOB's defaults
        self.policies: dict[bytes, QueuePolicy] = server.node.policies.policies

    # -- permissions ----------------------------------------------------------------------
    def allowed(self, user: User, ids: list[bytes]) -> list[bytes]:
        """The IDs checked; for a user restricted to some queues, those it may act on:
        -NOPERM if one names a job of a queue it may not use; the IDs of jobs this node
        does not know are left out (so an ACKJOB or FASTACK of an unknown ID, which
        Disque spreads to the whole cluster, cannot reach a job of another queue held
        elsewhere: it counts as unknown, as it would anyway)."""
        validate_ids(ids)
        return ids if user.all_queues else self._usable(user, ids)

    def _usable(self, user: User, ids: list[bytes]) -> list[bytes]:
        """`allowed`'s for a user restricted to some queues, the IDs checked."""
        lookup = self.node.lookup
        kept = []
        for job_id in ids:
            job = lookup(job_id)
            if job is None or job.queue is None:  # (unknown, or a dummy ack)
                continue
            self._check_job(user, job)
            kept.append(job_id)
        return kept

    def _check_job(self, user: User, job: Job) -> None:
        if not user.all_queues and (job.queue is None or not user.may_use(job.queue)):
            self.server.acl.denied_key += 1
            raise NOPERM_KEY

    # -- operations -----------------------------------------------------------------------
    def ack(self, user: User, ids: list[bytes], result: bytes | None = None) -> int:
        """ACKJOB: the number of jobs known and not already acknowledged. `result`
        (ACKJOB id RESULT blob: one ID) is kept on the job's holders (results.py)."""
        ids = self.allowed(user, ids)
        if result is not None:
            limit = self.node.config.job_max_body
            if len(result) > limit:
                raise errors.err(f"result of {len(result)} bytes is over job-max-body "
                                 f"({limit} bytes)")
            if not ids:  # (a restricted user, a job unknown here)
                return 0
        acked = self.node.ack(ids, result)
        user.jobs_acked += acked
        return acked

    def wait(self, user: User, request: WaitJob, peek: bool = False) -> JobWait:
        """WAITJOB: the wait, started; its `later` gives one entry per ID once every
        job ended (ANY: one), or at the timeout (server/job_waits.py). `peek`: once
        the nodes asked answered, whether the jobs ended or not."""
        wait = JobWait(self.node, self.server.replication, user, request, self.server.loop,
                       peek)
        wait.start(request.timeout)
        return wait

    def fast_ack(self, user: User, ids: list[bytes]) -> int:
        """FASTACK: as `ack`, deleting at once, telling every node that may hold a copy."""
        acked = self.node.fast_ack(self.allowed(user, ids))
        user.jobs_acked += acked
        return acked

    def nack(self, user: User, ids: list[bytes], delay_ms: int | None,
             error: bytes | None = None) -> int:
        """NACK: delivered jobs back in their queue, counting a nack; `error` (NACK ...
        ERROR) kept with each."""
        return self.node.requeue(self.allowed(user, ids), nack=True, delay_ms=delay_ms,
                                 error=error)

    def enqueue(self, user: User, ids: list[bytes]) -> int:
        """ENQUEUE: active jobs queued now (an additional delivery)."""
        return self.node.requeue(self.allowed(user, ids), nack=False)

    def dequeue(self, user: User, ids: list[bytes]) -> int:
        """DEQUEUE: queued jobs out of their queue (they stay active)."""
        return self.node.dequeue_ids(self.allowed(user, ids))

    def delete(self, user: User, ids: list[bytes]) -> int:
        """DELJOB: jobs evicted from this node only."""
        return self.node.delete(self.allowed(user, ids))

    def working(self, user: User, job_id: bytes, progress: int | None = None,
                data: bytes | None = None) -> int:
        """WORKING: the job's next requeue postponed; its retry in seconds. `progress`
        and `data` (WORKING ... PROGRESS / DATA) kept with the job."""
        if not self.allowed(user, [job_id]):
            raise errors.NOJOB  # (a restricted user: a job this node does not know)
        return self.node.working(job_id, progress, data)

    def show(self, user: User, job_id: bytes) -> Job | None:
        """SHOW: the job, None if this node does not know it (nor, for a restricted
        user, a dummy ack, which has no queue)."""
        if not is_valid_job_id(job_id):
            raise errors.BADID
        job = self.node.lookup(job_id)
        if job is None:
            return None
        if not user.all_queues:
            if job.queue is None:
                return None
            self._check_job(user, job)
        return job

    def get(self, user: User, request: GetJob,
            consumer: history.Consumer | None = None) -> list[Job]:
        """GETJOB: the jobs taken now (`Consumers.get_jobs`), counted as the user's. None
        to take: with NOHANG the cluster is asked for some and the answer is empty;
        else the caller parks a consumer (`park`), or gets -LEAVING on a leaving node."""
        node = self.node
        orderkeys = node.orderkeys
        if orderkeys.lines:  # the majority may be gone since the last check (every
            orderkeys.check_majority(now_ms())  # MAJORITY_CHECK_MS): no strict key's
            # job may leave this node then
        jobs = node.consumers.get_jobs(request.queues, request.count, not request.nohang,
                                       request.where)
        if jobs:
            user.jobs_consumed += len(jobs)
            latencies = self.latencies
            now = now_ms()
            for job in jobs:
                latencies.delivered(job, now)
                if job.ext is not None:  # (a plain job has no history: history.py)
                    history.delivered(job, now, node.id, consumer)
            return jobs
        if orderkeys.lines and not orderkeys.has_majority() and (
                not orderkeys.strict_queues().isdisjoint(request.queues)):
            raise errors.NOMAJORITY  # nothing here, and strict keys' jobs wait for one
        if request.nohang:
            node.consumers.want_jobs(request.queues)
        elif node.leaving:
            raise errors.LEAVING
        return jobs

    def park(self, waiter: Waiter, request: GetJob) -> list[Queue]:
        """GETJOB found nothing: `waiter` waits on the request's queues until its
        job comes (`Waiter.serve_job`, after the command that queued it), leaving the
        returned queues with `Consumers.unblock` (when served, at its timeout, or gone);
        the cluster is asked for jobs. Its timeout must be armed already: NEEDJOBS
        says how long it waits (`Waiter.wait_left_ms`)."""
        queues = self.node.consumers.block(waiter, request.queues)
        self.node.consumers.want_jobs(request.queues)
        return queues

    def scan(self, user: User, request: JScan, also: Callable[[Job], bool] | None = None
             ) -> tuple[int, list[Job]]:
        """JSCAN: the next cursor (0: done) and the jobs of the request's queue and
        states this step found, the ones the user may see (not a dummy ack); `also`:
        what else a job must match (the HTTP API's search)."""
        queue_name = request.queue
        states = {STATE_BY_NAME[name] for name in request.states}
        everything = user.all_queues  # (ACL: else only the user's queues)

        def keep(job: Job) -> bool:
            return (
                job.body is not None  # dummy acks are not listed
                and (everything or (job.queue is not None and user.may_use(job.queue)))
                and (queue_name is None or job.queue == queue_name)
                and (not states or job.state in states)
                and (also is None or also(job))
            )

        return scan(self.node.jobs, request, keep)

    # -- operations that may answer later --------------------------------------------------
    def add(self, user: User, request: AddJob, answers: Answers[A]) -> bytes | A:
        """ADDJOB: the job's ID now, or the front end's answer that comes later
        (`answers.later`: the job waits for its copies, or the other nodes are asked
        about its DEDUP key first); the core's errors, in Disque's order, are raised.
        The options the request does not give take the queue's QPOLICY defaults, if
        any (a node without policies tests one dict here)."""
        user.jobs_added += 1
        policies = self.policies
        if policies:
            policy = policies.get(request.queue)
            if policy is not None and policy.defaults is not None and not policy.deleted:
                policy.defaults.apply(request)
        ext = request.ext
        if ext is not None:
            if ext.batch is not None:  # a member of a batch: counted by CLOSE
                self.server.batch_service.check_add(user, request)
            if ext.after is not None:  # a flow's child: its parents checked first
                return self.server.flows.add(user, request, answers, self.add_now)
        return self.add_now(request, answers)

    def add_now(self, request: AddJob, answers: Answers[A]) -> bytes | A:
        """ADDJOB once its checks passed: `add`'s."""
        if request.dedup is not None:
            return self._add_deduped(request, answers)
        job = self.node.admission.add_job(request)
        if job.state == WAIT_REPL:
            return self._wait_for_copies(job, answers)
        return job.id

    def add_many(self, user: User, batch: AddJobs, answers: Answers[A]
                 ) -> list[bytes | DisqError | A]:
        """ADDJOBS: each job added in order as its own ADDJOB would be (`add`): its
        ID, its error, or its answer that comes later, in its place."""
        results: list[bytes | DisqError | A] = []
        for i in range(batch.count):
            request = batch.job(i)
            try:
                results.append(self.add(user, request, answers))
            except DisqError as exc:
                results.append(exc.with_traceback(None))  # (kept: not its frames)
            except Exception as exc:  # a bug: this job's error, the batch's others stand
                self.server.log_exception("Error while executing addjobs", exc)
                results.append(err("internal error while executing 'addjobs'"))
        return results

    def _wait_for_copies(self, job: Job, answers: Answers[A]) -> A:
        """ADDJOB waits until the job has its copies: the replication layer answers
        (the ID, or a NOREPL error), once the AOF has the job. If the front end's
        client goes away first, the job is deleted from the cluster, as Disque's
        unblockClientWaitingJobRepl does."""
        replication = self.server.replication
        if replication is None:  # no replication layer: nothing can confirm copies
            self.node.delete([job.id])
            raise errors.NOREPL
        later = answers.later(replication.cancel_wait, job.id, True)
        replication.wait(job, later.added)
        return later

    def _add_deduped(self, request: AddJob, answers: Answers[A]) -> bytes | A:
        """ADDJOB ... DEDUP key (a disq extension): the ID of the job added with the
        key if the cluster knows it, else add the job and record the key. The key
        table is `node.dedup` (disq/dedup_table.py), asking the other nodes is
        `replication.dedup` (disq/replication/dedup_checks.py). Answered later, once
        the AOF has the job, when the job waits for its copies or other nodes must be
        asked first; the front end's client going away does not cancel the add: with
        a key, a retry gets the ID. The key was checked by the request. A UNIQUE key
        (`ADDJOB ... UNIQUE`) takes the same path: its table entry names its job only
        while this node holds the job live (disq/dedup_table.py), here and in the
        answers to other nodes."""
        key = request.dedup
        assert key is not None
        if not request.ttl:  # (the other nodes keep a reservation for the job's TTL)
            request.ttl = DEFAULT_TTL
        node = self.node
        replication = self.server.replication
        dedup = replication.dedup if replication is not None else None
        now = now_ms()
        known = None
        asking = dedup is not None and key in dedup.pending  # the same key, asked for here
        if not asking:
            known = node.dedup.peek(key, now)
            if known:  # (not a reservation)
                if dedup is not None and dedup.adding_here(known):  # its outcome is ours
                    later = answers.later(None, b"", True)
                    dedup.join(known, later.added)
                    return later
                if dedup is None or dedup.vouches(known, now):
                    node.dedup.hits += 1
                    return known
                # A copy whose ADDJOB may still fail (unsettled): ask, as for a reservation.
        if dedup is None or node.cluster.size() <= 1:  # alone: this table is the truth
            job = node.admission.add_job(request)
            if job.state == WAIT_REPL:  # cannot happen alone; keep ADDJOB's own path
                return self._wait_for_copies(job, answers)
            node.dedup.record(key, job.id, job.etime)
            return job.id
        assert replication is not None  # (dedup is its part)
        # Checked by the copies unless ASYNC or QUEUE-RANDOMLY (no synchronous copy here),
        # a reservation (RESERVED: another node asked for the key) or an unsettled copy.
        if known is None and not (request.async_ or request.queue_randomly or asking) and (
                dedup.copies_can_check(request.repl, request.ttl, now)):
            job = dedup.add_checked(request)
            later = answers.later(None, b"", True)
            replication.wait(job, later.added)
            return later
        later = answers.later(None, b"", True)
        dedup.ask(request, later.added)
        return later

    def set_job(self, user: User, request: JobSet, answers: Answers[A]) -> A | None:
        """JOBSET (a disq extension): change a job not acknowledged yet on every node
        that holds it (Node.set_job here, the others asked: replication/jobset.py).
        None: done, nobody else to ask; else the answer that comes later: +OK once
        every holder applied it, -NOREPL if one may not have, -NOJOB if no reachable
        node knows the job. -NOJOB at once for a job of a queue the user may not use."""
        # (The ID was checked by JobSet.) A restricted user: a job this node knows.
        if not user.all_queues and not self._usable(user, [request.job_id]):
            raise errors.NOJOB
        node = self.node
        now = now_ms()
        due = request.due(now)
        job = node.lookup(request.job_id)
        replication = self.server.replication
        if job is not None:
            node.set_job(job, request.priority, due, now, broadcast=replication is None)
            if replication is None:
                return None
            later = answers.later(None, b"", False)
            replication.set_job_on_holders(job, request.priority, due, later.changed)
            return later
        if replication is None or node.cluster.size() <= 1:
            raise errors.NOJOB
        later = answers.later(None, b"", False)
        replication.set_job_elsewhere(request.job_id, request.priority, due, later.changed)
        return later

    # -- a command run outside the RESP dispatch ----------------------------------------
    def gate(self, user: User, name: str, queues: list[bytes] | None = None) -> None:
        """Before running command `name` for `user` from another front end: raise
        what the RESP dispatch would answer instead (the user may not run it, nor use
        one of the `queues` the request names, the node is out of memory, the AOF
        cannot be written, the node is loading: `refusal`); count the call."""
        spec = COMMANDS[name.encode()]
        refused = refusal(self.server, user, spec, None, queues)
        if refused is not None:
            raise refused
        spec.calls += 1
        user.calls += 1

