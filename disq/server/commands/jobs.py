"""Job commands: ADDJOB GETJOB ACKJOB FASTACK NACK ENQUEUE DEQUEUE DELJOB WORKING
SHOW LOADJOB, and ADDJOBS and JOBSET (disq extensions)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from disq_client import spec

from ...end_requests import Ack, WaitJob, Working
from ...errors import DisqError
from ...job import Job
from ...node import now_ms
from ...requests import AddJob, AddJobs, GetJob, JobSet, Nack
from .. import reply
from ..pending import BatchReplies
from ..service import job_fields
from ..table import ADMIN, CONSUME, PRODUCE, AfterOptions, AfterToken, At, From, command

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
    [MAXLEN n] [ASYNC] [QUEUE-RANDOMLY] [DEDUP key] [UNIQUE key] [DELAY-MS ms]
    [AT unix-ms] [PRIORITY p] [GROUP g] [MAXDELIVERIES n]  (DEDUP, UNIQUE and the last
    five: disq extensions)"""
    added = client.server.jobs.add(client.user, AddJob.parse(args), client)
    if type(added) is bytes:
        return b"+" + added + b"\r\n"
    return added  # (a Pending: answered later)


@command("addjobs", -5, "wm",
         acl=PRODUCE,
         syntax=("ADDJOBS queue ms-timeout [ADDJOB's options but DEDUP, UNIQUE] JOBS body [body ...] | "
                 'DEDUP-JOBS key body [key body ...]'),
         summary='Add several jobs in one request, each as its own ADDJOB with the options would.',
         reply="array: each job's ADDJOB reply (its ID or its error) in its place",
         options=(spec.ADDJOB,), queues=At(1), extension=True)
def addjobs(client: Client, args: list[bytes]) -> bytes | Pending:
    """ADDJOBS queue ms-timeout [ADDJOB's options but DEDUP, UNIQUE] JOBS body [body ...]
    | DEDUP-JOBS key body [key body ...] (a disq extension): each job added in order as
    its own ADDJOB with the options would be; one array reply, each job's ADDJOB reply
    (its ID, or its error) in its place, once every job has one. A producer's batch
    pays one request's parsing, dispatch and reply."""
    results = client.server.jobs.add_many(client.user, AddJobs.parse(args), client)
    replies = BatchReplies(len(results))
    for i, added in enumerate(results):
        if type(added) is bytes:
            replies.give(i, b"+" + added + b"\r\n")
        elif isinstance(added, DisqError):
            replies.give(i, added.reply())
        else:
            replies.adopt(i, added)  # type: ignore[arg-type]
    return replies.result(client)


@command("getjob", -2, "wF",
         acl=CONSUME,
         syntax=('GETJOB [NOHANG] [TIMEOUT ms] [COUNT n] [WITHCOUNTERS] '
                 '[WHERE key =|!=|PREFIX|<|> value | WHERE key EXISTS ...] FROM queue [queue ...]'),
         summary=('Take jobs from the first queues that have some, waiting up to TIMEOUT (0: for '
                  'ever) unless NOHANG. WHERE (a disq extension): only jobs whose ATTR '
                  'attributes match, each WHERE too; blocked, it gets only the jobs queued '
                  'later that match.'),
         reply=('array of [queue, id, body] (with WITHCOUNTERS: "nacks", n, '
                '"additional-deliveries", n too, then for a job using extensions its '
                'fields and "attrs", [key, value...]), or null on timeout'),
         options=(spec.GETJOB,), queues=AfterToken(b"FROM"))
def getjob(client: Client, args: list[bytes]) -> bytes | Pending:
    """GETJOB [NOHANG] [TIMEOUT ms] [COUNT n] [WITHCOUNTERS] FROM queue [queue ...]"""
    request = GetJob.parse(args)
    service = client.server.jobs
    jobs = service.get(client.user, request, client)
    client.jobs_taken += len(jobs)
    if jobs:
        encode = reply.job_entry_with_counters if request.with_counters else reply.job_entry
        if len(jobs) == 1:
            return b"*1\r\n" + encode(jobs[0])
        return b"*%d\r\n" % len(jobs) + b"".join(map(encode, jobs))
    if request.nohang:
        return reply.NULL_ARRAY
    client.where = request.where  # (a filtered consumer: served only the jobs that match)
    parked = client.park(request.timeout, request.with_counters)  # its timeout first:
    client.blocked_queues = service.park(client, request)  # NEEDJOBS says how long it waits
    return parked


@command("ackjob", -1, "wF",
         acl=CONSUME,
         syntax='ACKJOB id [id ...] | ACKJOB id RESULT blob',
         summary=('Acknowledge jobs: every node holding a copy forgets them. With RESULT (one '
                  "job, a disq extension), its result is kept on its holders for the queue's "
                  'RESULT-TTL (WAITJOB).'),
         reply='integer: the jobs known and not already acknowledged',
         options=(spec.ACKJOB,), jobs=From(1))
def ackjob(client: Client, args: list[bytes]) -> bytes:
    if Ack.has_result(args):
        request = Ack.parse(args)
        return reply.integer(_settled(client, client.server.jobs.ack(
            client.user, request.ids, request.result)))
    return reply.integer(_settled(client, client.server.jobs.ack(client.user, args[1:], None)))


@command("waitjob", -2, "r",
         acl=("read",),
         syntax='WAITJOB [TIMEOUT ms] [ANY] id [id ...]',
         summary=('Wait until every job (ANY: one) has ended, wherever it is held, or the '
                  'timeout (0 or none: no timeout).'),
         reply=('array: per ID as given, [id, state (acked, dead, queued, active, unknown), '
                'result (acked), last error (dead), progress DATA (active) or nil]'),
         options=(spec.WAITJOB,), jobs=AfterOptions(spec.WAITJOB), extension=True)
def waitjob(client: Client, args: list[bytes]) -> bytes | Pending:
    wait = client.server.jobs.wait(client.user, WaitJob.parse(args))
    later = wait.later
    if later.done:
        return reply.encode(later.value)
    pending = client.pending(wait.cancel)
    later.then(lambda statuses: pending.answer(reply.encode(statuses)))
    return pending


@command("fastack", -1, "wF",
         acl=CONSUME,
         syntax='FASTACK id [id ...]',
         summary=('Acknowledge jobs at once, telling every node that may hold a copy, without '
                  'waiting.'),
         reply='integer: the jobs known and not already acknowledged',
         jobs=From(1))
def fastack(client: Client, args: list[bytes]) -> bytes:
    return reply.integer(_settled(client, client.server.jobs.fast_ack(client.user, args[1:])))


@command("nack", -1, "mwF",
         acl=CONSUME,
         syntax='NACK [DELAY-MS ms] [ERROR reason] id [id ...]',
         summary=('Put delivered jobs back in their queue, counting a nack (after DELAY-MS, or the'
                  " queue's back-off); ERROR's reason is kept with each job (its last 5)."),
         reply='integer: the jobs requeued',
         options=(spec.NACK,), jobs=AfterOptions(spec.NACK))
def nack(client: Client, args: list[bytes]) -> bytes:
    """NACK [DELAY-MS ms] [ERROR reason] id [id ...]: put delivered jobs back in the
    queue, counting a nack; after DELAY-MS (a disq extension), or the queue's BACKOFF
    policy, if any. A job at its MAXDELIVERIES becomes a dead letter instead
    (disq/failures.py). ERROR (a disq extension): kept with each job requeued."""
    request = Nack.parse(args)
    return reply.integer(_settled(client, client.server.jobs.nack(
        client.user, request.ids, request.delay_ms, request.error)))


def _settled(client: Client, count: int) -> int:
    """`count` jobs this client acked or put back: no longer in its hands."""
    client.jobs_settled += count
    return count


@command("enqueue", -1, "mwF",
         acl=CONSUME,
         syntax='ENQUEUE id [id ...]',
         summary='Queue active jobs now (counts an additional delivery).',
         reply='integer: the jobs queued',
         jobs=From(1))
def enqueue(client: Client, args: list[bytes]) -> bytes:
    return reply.integer(client.server.jobs.enqueue(client.user, args[1:]))


@command("dequeue", -1, "wF",
         acl=CONSUME,
         syntax='DEQUEUE id [id ...]',
         summary='Take queued jobs out of their queue (they stay active).',
         reply='integer: the jobs dequeued',
         jobs=From(1))
def dequeue(client: Client, args: list[bytes]) -> bytes:
    return reply.integer(client.server.jobs.dequeue(client.user, args[1:]))


@command("deljob", -1, "wF",
         acl=("write",),
         syntax='DELJOB id [id ...]',
         summary='Evict jobs from this node only.',
         reply='integer: the jobs deleted',
         jobs=From(1))
def deljob(client: Client, args: list[bytes]) -> bytes:
    return reply.integer(client.server.jobs.delete(client.user, args[1:]))


@command("working", -2, "wF", shown=(2, "wF"),
         acl=CONSUME,
         syntax='WORKING id [PROGRESS 0-100] [DATA blob]',
         summary=("Postpone the job's next requeue: the consumer is still working on it; "
                  'PROGRESS and DATA are kept with the job on its holders (SHOW, WAITJOB).'),
         reply="integer: the job's retry, in seconds",
         options=(spec.WORKING,), jobs=At(1))
def working(client: Client, args: list[bytes]) -> bytes:
    if len(args) == 2:  # (plain WORKING: no request object)
        return reply.integer(client.server.jobs.working(client.user, args[1]))
    if len(args) % 2:  # an option without its value, or a second ID: Disque's arity error
        return b"-ERR wrong number of arguments for 'working' command\r\n"
    request = Working.parse(args)
    return reply.integer(client.server.jobs.working(client.user, request.job_id,
                                                    request.progress, request.data))


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
    later = client.server.jobs.set_job(client.user, JobSet.parse(args), client)
    return reply.OK if later is None else later


@command("show", 2, "rF",
         acl=("read",),
         syntax='SHOW id',
         summary='Every field of a job.',
         reply='array of field, value pairs, or a null bulk if the job is unknown',
         jobs=At(1))
def show(client: Client, args: list[bytes]) -> bytes:
    job = client.server.jobs.show(client.user, args[1])
    return reply.NULL_BULK if job is None else show_job(job, client.node.id)


def show_job(job: Job, my_id: str) -> bytes:
    """SHOW's reply: `job_fields` as name/value pairs."""
    fields = job_fields(job, my_id, now_ms())
    out = [b"*%d\r\n" % (2 * len(fields))]
    for name, value in fields:
        out.append(reply.bulk(name))
        if value is None:
            out.append(reply.NULL_BULK)
        elif type(value) is int:
            out.append(reply.integer(value))
        elif type(value) is list:
            out.append(reply.encode(value))
        else:
            out.append(reply.bulk(value))  # type: ignore[arg-type]
    return b"".join(out)


@command("loadjob", 2, "w",
         acl=ADMIN,
         syntax='LOADJOB serialized-job',
         summary='Only processed from the AOF.',
         reply='error')
def loadjob(client: Client, args: list[bytes]) -> bytes:
    return reply.error("ERR LOADJOB is a special command only processed from AOF")

