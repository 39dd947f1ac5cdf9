"""Job commands: ADDJOB GETJOB ACKJOB FASTACK NACK ENQUEUE DEQUEUE DELJOB WORKING
SHOW LOADJOB, and ADDJOBS and JOBSET (disq extensions)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from disq_client import spec

from ... import errors
from ...ids import is_valid_job_id
from ...job import STATE_NAMES, WAIT_REPL, Job
from ...node import now_ms
from ...requests import AddJob, AddJobs, GetJob, JobSet, Nack, validate_ids
from .. import reply
from ..guard import check_jobs, check_queue
from ..pending import BatchReplies
from ..table import ADMIN, CONSUME, PRODUCE, AfterOptions, AfterToken, At, From, command
from .dedup import add_deduped, park_for_replication

if TYPE_CHECKING:
    from ..connection import Client
    from ..pending import Pending

@command("addjob", -4, "wmF",
         acl=PRODUCE,
         syntax='ADDJOB queue body ms-timeout [options]',
         summary=('Add a job, replicated to REPLICATE nodes (synchronously unless ASYNC) before '
                  'the reply.'),
         reply="status: the job's ID",
         options=(spec.ADDJOB,), queues=At(1))
def addjob(client: Client, args: list[bytes]) -> bytes | Pending:
    """ADDJOB queue body ms-timeout [REPLICATE n] [DELAY s] [RETRY s] [TTL s]
    [MAXLEN n] [ASYNC] [QUEUE-RANDOMLY] [DEDUP key] [DELAY-MS ms] [AT unix-ms]
    [PRIORITY p] [GROUP g]  (DEDUP and the last four: disq extensions)"""
    request = AddJob.parse(args)
    client.user.jobs_added += 1
    return _add(client, request)


def _add(client: Client, request: AddJob) -> bytes | Pending:
    """One job of ADDJOB or ADDJOBS: its reply now, or the Pending it comes through."""
    if request.dedup is not None:
        return add_deduped(client, request)
    job = client.node.add_job(request)
    if job.state == WAIT_REPL:
        return park_for_replication(client, job)
    return b"+" + job.id + b"\r\n"


@command("addjobs", -5, "wm",
         acl=PRODUCE,
         syntax=("ADDJOBS queue ms-timeout [ADDJOB's options but DEDUP] JOBS body [body ...] | "
                 'DEDUP-JOBS key body [key body ...]'),
         summary='Add several jobs in one request, each as its own ADDJOB with the options would.',
         reply="array: each job's ADDJOB reply (its ID or its error) in its place",
         options=(spec.ADDJOB,), queues=At(1), extension=True)
def addjobs(client: Client, args: list[bytes]) -> bytes | Pending:
    """ADDJOBS queue ms-timeout [ADDJOB's options but DEDUP] JOBS body [body ...]
    | DEDUP-JOBS key body [key body ...] (a disq extension): each job added in order as
    its own ADDJOB with the options would be; one array reply, each job's ADDJOB reply
    (its ID, or its error) in its place, once every job has one. A producer's batch
    pays one request's parsing, dispatch and reply."""
    user = client.user
    batch = AddJobs.parse(args)
    replies = BatchReplies(batch.count)
    for i in range(batch.count):
        request = batch.job(i)
        user.jobs_added += 1
        try:
            rep = _add(client, request)
        except errors.DisqError as exc:
            rep = exc.reply()
        except Exception as exc:  # a bug: this job's error, the batch's others stand
            client.server.log_exception("Error while executing addjobs", exc)
            rep = b"-ERR internal error while executing 'addjobs'\r\n"
        if type(rep) is bytes:
            replies.give(i, rep)
        else:
            replies.adopt(i, rep)  # type: ignore[arg-type]
    return replies.result(client)


@command("getjob", -2, "wF",
         acl=CONSUME,
         syntax='GETJOB [NOHANG] [TIMEOUT ms] [COUNT n] [WITHCOUNTERS] FROM queue [queue ...]',
         summary=('Take jobs from the first queues that have some, waiting up to TIMEOUT (0: for '
                  'ever) unless NOHANG.'),
         reply=('array of [queue, id, body] (with WITHCOUNTERS: nacks and additional deliveries '
                'too), or null on timeout'),
         options=(spec.GETJOB,), queues=AfterToken(b"FROM"))
def getjob(client: Client, args: list[bytes]) -> bytes | Pending:
    """GETJOB [NOHANG] [TIMEOUT ms] [COUNT n] [WITHCOUNTERS] FROM queue [queue ...]"""
    request = GetJob.parse(args)
    names, with_counters = request.queues, request.with_counters
    node = client.node
    jobs = node.get_jobs(names, request.count, hold=not request.nohang)
    if jobs:
        client.user.jobs_consumed += len(jobs)
        encode = reply.job_entry_with_counters if with_counters else reply.job_entry
        if len(jobs) == 1:
            return b"*1\r\n" + encode(jobs[0])
        return b"*%d\r\n" % len(jobs) + b"".join(map(encode, jobs))
    if request.nohang:
        node.want_jobs(names)
        return reply.NULL_ARRAY
    if node.leaving:
        raise errors.LEAVING
    queues = node.block(client, names)
    parked = client.park(queues, request.timeout, with_counters)
    node.want_jobs(names)  # parked first: the NEEDJOBS says how long this client waits
    return parked


def _ids(client: Client, args: list[bytes]) -> list[bytes]:
    """The job IDs of the command, checked; for a user restricted to some queues,
    those it may act on (guard.check_jobs)."""
    ids = args[1:]
    validate_ids(ids)
    return ids if client.user.all_queues else check_jobs(client, ids)


@command("ackjob", -1, "wF",
         acl=CONSUME,
         syntax='ACKJOB id [id ...]',
         summary='Acknowledge jobs: every node holding a copy forgets them.',
         reply='integer: the jobs known and not already acknowledged',
         jobs=From(1))
def ackjob(client: Client, args: list[bytes]) -> bytes:
    """ACKJOB id [id ...]: the number of jobs known and not already acknowledged."""
    acked = client.node.ack(_ids(client, args))
    client.user.jobs_acked += acked
    return reply.integer(acked)


@command("fastack", -1, "wF",
         acl=CONSUME,
         syntax='FASTACK id [id ...]',
         summary=('Acknowledge jobs at once, telling every node that may hold a copy, without '
                  'waiting.'),
         reply='integer: the jobs known and not already acknowledged',
         jobs=From(1))
def fastack(client: Client, args: list[bytes]) -> bytes:
    """FASTACK id [id ...]: delete now, telling every node that may hold a copy."""
    acked = client.node.fast_ack(_ids(client, args))
    client.user.jobs_acked += acked
    return reply.integer(acked)


@command("nack", -1, "mwF",
         acl=CONSUME,
         syntax='NACK [DELAY-MS ms] id [id ...]',
         summary=('Put delivered jobs back in their queue, counting a nack (after DELAY-MS, or the'
                  " queue's back-off)."),
         reply='integer: the jobs requeued',
         options=(spec.NACK,), jobs=AfterOptions(spec.NACK))
def nack(client: Client, args: list[bytes]) -> bytes:
    """NACK [DELAY-MS ms] id [id ...]: put delivered jobs back in the queue, counting
    a nack; after DELAY-MS (a disq extension), or the queue's BACKOFF policy, if any.
    A job at its MAXDELIVERIES becomes a dead letter instead (disq/failures.py)."""
    request = Nack.parse(args)
    return reply.integer(client.node.requeue(check_jobs(client, request.ids), nack=True,
                                             delay_ms=request.delay_ms))


@command("enqueue", -1, "mwF",
         acl=CONSUME,
         syntax='ENQUEUE id [id ...]',
         summary='Queue active jobs now (counts an additional delivery).',
         reply='integer: the jobs queued',
         jobs=From(1))
def enqueue(client: Client, args: list[bytes]) -> bytes:
    """ENQUEUE id [id ...]: queue active jobs now (counts an additional delivery)."""
    return reply.integer(client.node.requeue(_ids(client, args), nack=False))


@command("dequeue", -1, "wF",
         acl=CONSUME,
         syntax='DEQUEUE id [id ...]',
         summary='Take queued jobs out of their queue (they stay active).',
         reply='integer: the jobs dequeued',
         jobs=From(1))
def dequeue(client: Client, args: list[bytes]) -> bytes:
    """DEQUEUE id [id ...]: take queued jobs out of their queue (they stay active)."""
    return reply.integer(client.node.dequeue_ids(_ids(client, args)))


@command("deljob", -1, "wF",
         acl=("write",),
         syntax='DELJOB id [id ...]',
         summary='Evict jobs from this node only.',
         reply='integer: the jobs deleted',
         jobs=From(1))
def deljob(client: Client, args: list[bytes]) -> bytes:
    """DELJOB id [id ...]: evict jobs from this node only."""
    return reply.integer(client.node.delete(_ids(client, args)))


@command("working", 2, "wF",
         acl=CONSUME,
         syntax='WORKING id',
         summary="Postpone the job's next requeue: the consumer is still working on it.",
         reply="integer: the job's retry, in seconds",
         jobs=At(1))
def working(client: Client, args: list[bytes]) -> bytes:
    """WORKING id: postpone the next requeue; replies the job's retry in seconds."""
    if not is_valid_job_id(args[1]):
        raise errors.BADID
    if not check_jobs(client, [args[1]]):
        raise errors.NOJOB  # (a restricted user: a job this node does not know)
    return reply.integer(client.node.working(args[1]))


@command("jobset", -2, "wF",
         acl=PRODUCE,
         syntax='JOBSET id [PRIORITY p] [AT unix-ms] [DELAY-MS ms]',
         summary='Change a job not acknowledged yet on every node that holds it.',
         reply='status OK once every holder applied it; -NOREPL if one may not have',
         options=(spec.JOBSET,), jobs=At(1), extension=True)
def jobset(client: Client, args: list[bytes]) -> bytes | Pending:
    """JOBSET id [PRIORITY p] [AT unix-ms] [DELAY-MS ms] (a disq extension): change a
    job not acknowledged yet on every node that holds it (Node.set_job here, the
    others asked; replication/jobset.py). +OK once every holder applied it, -NOREPL
    if one may not have, -NOJOB if no reachable node knows the job."""
    request = JobSet.parse(args)
    if not check_jobs(client, [request.job_id]):
        raise errors.NOJOB  # (a restricted user: a job this node does not know)
    node = client.node
    now = now_ms()
    due = request.due(now)
    job = node.lookup(request.job_id)
    replication = client.server.replication
    if job is not None:
        node.set_job(job, request.priority, due, now, broadcast=replication is None)
        if replication is None:
            return reply.OK
        pending = client.pending()
        replication.set_job_on_holders(job, request.priority, due, pending.answer)
        return pending
    if replication is None or node.cluster.size() <= 1:
        raise errors.NOJOB
    pending = client.pending()
    replication.set_job_elsewhere(request.job_id, request.priority, due, pending.answer)
    return pending


@command("show", 2, "rF",
         acl=("read",),
         syntax='SHOW id',
         summary='Every field of a job.',
         reply='array of field, value pairs, or a null bulk if the job is unknown',
         jobs=At(1))
def show(client: Client, args: list[bytes]) -> bytes:
    """SHOW id: every field of a job, or a null bulk if unknown."""
    if not is_valid_job_id(args[1]):
        raise errors.BADID
    job = client.node.lookup(args[1])
    if job is None:
        return reply.NULL_BULK
    if not client.user.all_queues:
        if job.queue is None:  # (a dummy ack: as unknown to a restricted user)
            return reply.NULL_BULK
        check_queue(client, job.queue)
    return show_job(job, client.node.id)


def show_job(job: Job, my_id: str) -> bytes:
    now = now_ms()
    delivered = job.nodes_delivered
    if delivered is None:
        delivered_ids = [my_id]
    else:
        delivered_ids = sorted(delivered)
    confirmed = sorted(job.nodes_confirmed) if job.nodes_confirmed else []
    ttl = max((job.etime - now) // 1000, 0)
    fields = [
        reply.bulk(b"id"), reply.bulk(job.id),
        reply.bulk(b"queue"), reply.bulk(job.queue) if job.queue is not None else reply.NULL_BULK,
        reply.bulk(b"state"), reply.bulk(STATE_NAMES.get(job.state, b"deleted")),
        reply.bulk(b"repl"), reply.integer(job.repl),
        reply.bulk(b"ttl"), reply.integer(ttl),
        reply.bulk(b"ctime"), reply.integer(job.ctime),
        reply.bulk(b"delay"), reply.integer(job.delay),
        reply.bulk(b"retry"), reply.integer(job.retry),
        reply.bulk(b"nacks"), reply.integer(job.nacks),
        reply.bulk(b"additional-deliveries"), reply.integer(job.deliveries),
        reply.bulk(b"nodes-delivered"), reply.encode([n.encode() for n in delivered_ids]),
        reply.bulk(b"nodes-confirmed"), reply.encode([n.encode() for n in confirmed]),
        reply.bulk(b"next-requeue-within"),
        reply.integer(max(job.qtime - now, 0)) if job.qtime else reply.NULL_BULK,
        reply.bulk(b"next-awake-within"),
        reply.integer(max(job.awake - now, 0)) if job.awake else reply.NULL_BULK,
        reply.bulk(b"body"), reply.bulk(job.body) if job.body is not None else reply.NULL_BULK,
    ]
    if job.ext is not None:  # after Disque's fields: their positions stay
        count, extra = reply.ext_fields(job.ext)
        fields.append(extra)
        return b"*%d\r\n" % (30 + count) + b"".join(fields)
    return b"*30\r\n" + b"".join(fields)


@command("loadjob", 2, "w",
         acl=ADMIN,
         syntax='LOADJOB serialized-job',
         summary='Only processed from the AOF.',
         reply='error')
def loadjob(client: Client, args: list[bytes]) -> bytes:
    return reply.error("ERR LOADJOB is a special command only processed from AOF")

