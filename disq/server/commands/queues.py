"""Queue commands: QLEN QPEEK QSTAT QSCAN JSCAN PAUSE."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from disq_client import spec

from ... import errors
from ...job import STATE_BY_NAME, Job
from ...node import now_ms
from ...queue import PAUSE_NAMES, PAUSED_ALL, Queue
from ...queue_requests import JScan, Pause, QScan
from ...requests import parse_int
from .. import reply
from ..guard import may_see
from ..table import At, command
from .jobs import show_job

if TYPE_CHECKING:
    from ...scantable import ScanTable
    from ..connection import Client
    from ..pending import Pending

@command("qlen", 2, "rF",
         acl=("read",),
         syntax='QLEN queue',
         summary='The jobs queued in a queue on this node.',
         reply='integer',
         queues=At(1))
def qlen(client: Client, args: list[bytes]) -> bytes:
    """QLEN queue: jobs queued on this node."""
    return reply.integer(client.node.qlen(args[1]))


@command("globalqlen", 2, "r",
         acl=("read",),
         syntax='GLOBALQLEN queue',
         summary=("The jobs queued in a queue in the whole cluster (every reachable node's QLEN "
                  'summed).'),
         reply='integer',
         queues=At(1))
def globalqlen(client: Client, args: list[bytes]) -> bytes | Pending:
    """GLOBALQLEN queue (a later Disque command): jobs queued in the whole cluster,
    this node's QLEN plus each reachable node's, answered once they all replied."""
    local = client.node.qlen(args[1])
    replication = client.server.replication
    if replication is None or client.node.cluster.size() <= 1:
        return reply.integer(local)
    pending = client.pending()
    replication.global_qlen(args[1],
                            lambda others: pending.answer(reply.integer(local + others)))
    return pending


@command("qpeek", 3, "r",
         acl=("read",),
         syntax='QPEEK queue count',
         summary=('The next count jobs GETJOB would deliver (count < 0: the last ones), without '
                  'taking them.'),
         reply='array of [queue, id, body]',
         queues=At(1))
def qpeek(client: Client, args: list[bytes]) -> bytes:
    """QPEEK queue count: the next `count` jobs GETJOB would deliver, in that order;
    count < 0: the last -count it would deliver, the last first. For plain jobs that
    is Disque's oldest first / newest first; with priorities and groups it
    is the delivery order (most urgent first, the groups of a priority in turn)."""
    count = parse_int(args[2])
    if count is None:
        raise errors.NOT_INTEGER
    queue = client.node.queues.get(args[1])
    if queue is None or count == 0:
        return reply.EMPTY_ARRAY
    jobs = queue.jobs.head(count) if count > 0 else queue.jobs.tail(-count)
    return b"*%d\r\n" % len(jobs) + b"".join(map(reply.job_entry_peek, jobs))


@command("qstat", 2, "rF",
         acl=("read",),
         syntax='QSTAT queue',
         summary="A queue's counters.",
         reply='array of field, value pairs, or a null array if the queue does not exist',
         queues=At(1))
def qstat(client: Client, args: list[bytes]) -> bytes:
    """QSTAT queue: the queue's counters, or a null array if it does not exist."""
    queue = client.node.queues.get(args[1])
    if queue is None:
        return reply.NULL_ARRAY
    now = now_ms()
    federation = queue.federation
    importers = sorted(federation.responders or ()) if federation is not None else []
    return reply.encode([
        b"name", queue.name,
        b"len", len(queue.jobs),
        b"age", (now - queue.ctime) // 1000,
        b"idle", (now - queue.atime) // 1000,
        b"blocked", len(queue.waiters),
        b"import-from", [n.encode() for n in importers],
        b"import-rate", queue.import_rate_at(now),
        b"jobs-in", queue.jobs_in,
        b"jobs-out", queue.jobs_out,
        b"pause", PAUSE_NAMES[queue.flags & PAUSED_ALL],
    ])


def _scan(table: ScanTable[Any, Any], request: QScan | JScan,
          keep: Callable[[Any], bool] | None) -> tuple[int, list[Any]]:
    """A negative COUNT scans to the end, as in Disque (its bounds wrap around)."""
    cursor, count, busyloop = request.cursor, request.count, request.busyloop
    if count < 0:
        busyloop = True
    items: list[Any] = []
    while True:
        cursor, found = table.scan(cursor, count, keep)
        items.extend(found)
        if cursor == 0 or not busyloop:
            return cursor, items


@command("qscan", -1, "r",
         acl=("read",),
         syntax='QSCAN [cursor] [COUNT n] [BUSYLOOP] [MINLEN n] [MAXLEN n] [IMPORTRATE n]',
         summary='Iterate over the queues of this node.',
         reply='array: next cursor, queue names',
         options=(spec.QSCAN,))
def qscan(client: Client, args: list[bytes]) -> bytes:
    """QSCAN [cursor] [COUNT n] [BUSYLOOP] [MINLEN n] [MAXLEN n] [IMPORTRATE n]"""
    request = QScan.parse(args)
    minlen, maxlen, importrate = request.minlen, request.maxlen, request.importrate
    now = now_ms()
    everything = client.user.all_queues  # (ACL: else only the user's queues)

    def keep(queue: Queue) -> bool:
        n = len(queue.jobs)
        return (
            (everything or may_see(client, queue.name))
            and (minlen < 0 or n >= minlen)
            and (maxlen < 0 or n <= maxlen)
            and (importrate < 0 or queue.import_rate_at(now) >= importrate)
        )

    cursor, queues = _scan(client.node.queues, request, keep)
    return reply.encode([str(cursor).encode(), [q.name for q in queues]])


@command("jscan", -1, "r",
         acl=("read",),
         syntax='JSCAN [cursor] [COUNT n] [BUSYLOOP] [QUEUE q] [STATE s ...] [REPLY all|id]',
         summary='Iterate over the jobs of this node.',
         reply='array: next cursor, job IDs (or every field of each job with REPLY all)',
         options=(spec.JSCAN,))
def jscan(client: Client, args: list[bytes]) -> bytes:
    """JSCAN [cursor] [COUNT n] [BUSYLOOP] [QUEUE q] [STATE s ...] [REPLY all|id]"""
    request = JScan.parse(args)
    queue_name = request.queue
    states = {STATE_BY_NAME[name] for name in request.states}
    everything = client.user.all_queues  # (ACL: else only the user's queues)

    def keep(job: Job) -> bool:
        return (
            job.body is not None  # dummy acks are not listed
            and (everything or may_see(client, job.queue))
            and (queue_name is None or job.queue == queue_name)
            and (not states or job.state in states)
        )

    cursor, jobs = _scan(client.node.jobs, request, keep)
    if request.reply == "all":
        items = [show_job(job, client.node.id) for job in jobs]
    else:
        items = [b"+" + job.id + b"\r\n" for job in jobs]
    return b"*2\r\n" + reply.bulk(str(cursor).encode()) + reply.array(items)


@command("pause", -3, "rF",
         acl=("write",),
         syntax='PAUSE queue in|out|all|none|state|bcast ...',
         summary="Pause a queue's input, output or both (BCAST: on every node).",
         reply="status: the queue's resulting state",
         options=(spec.PAUSE,), queues=At(1))
def pause(client: Client, args: list[bytes]) -> bytes:
    """PAUSE queue in|out|all|none|state|bcast ...: replies the resulting state. As
    Disque: the state asked replaces the queue's, it does not add to it."""
    request = Pause.parse(args)
    node = client.node
    queue = request.queue
    flags = request.flags
    old = node.pause_flags(queue)
    if flags is not None and (flags != old or node.queues.get(queue) is not None):
        node.set_pause(queue, flags, request.bcast)
    else:
        flags = old  # no update (or none on a missing queue): report the state as is
        if request.bcast:
            node.cluster.pause(queue, flags)
    return reply.status(PAUSE_NAMES[flags])
