"""Queue commands: QLEN QPEEK QSTAT QSCAN JSCAN PAUSE, and the disq extensions QDEL and
QPURGE."""

from __future__ import annotations

from typing import TYPE_CHECKING

from disq_client import spec

from ... import errors
from ...node import now_ms
from ...options import parse_int
from ...purges import QUEUE_MAX_LEN
from ...queue import PAUSE_NAMES
from ...queue_requests import JScan, Pause, QScan
from .. import reply
from ..later import reply_held, reply_later
from ..queue_service import queue_fields
from ..table import At, command
from .jobs import show_job

if TYPE_CHECKING:
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
    return reply.integer(client.server.queues_service.length(args[1]))


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
    return reply_later(client, client.server.queues_service.global_length(args[1]),
                       reply.integer)


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
    jobs = client.server.queues_service.peek(args[1], count)
    if not jobs:
        return reply.EMPTY_ARRAY
    return b"*%d\r\n" % len(jobs) + b"".join(map(reply.job_entry_peek, jobs))


@command("qstat", 2, "rF",
         acl=("read",),
         syntax='QSTAT queue',
         summary="A queue's counters.",
         reply='array of field, value pairs, or a null array if the queue does not exist',
         queues=At(1))
def qstat(client: Client, args: list[bytes]) -> bytes:
    """QSTAT queue: the queue's counters, or a null array if it does not exist."""
    queue = client.server.queues_service.get(args[1])
    if queue is None:
        return reply.NULL_ARRAY
    return reply.encode([item for pair in queue_fields(queue, now_ms()) for item in pair])


@command("qscan", -1, "r",
         acl=("read",),
         syntax='QSCAN [cursor] [COUNT n] [BUSYLOOP] [MINLEN n] [MAXLEN n] [IMPORTRATE n]',
         summary='Iterate over the queues of this node.',
         reply='array: next cursor, queue names',
         options=(spec.QSCAN,))
def qscan(client: Client, args: list[bytes]) -> bytes:
    """QSCAN [cursor] [COUNT n] [BUSYLOOP] [MINLEN n] [MAXLEN n] [IMPORTRATE n]"""
    cursor, queues = client.server.queues_service.scan(client.user, QScan.parse(args))
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
    cursor, jobs = client.server.jobs.scan(client.user, request)
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
    flags = client.server.queues_service.pause(Pause.parse(args))
    return reply.status(PAUSE_NAMES[flags])


@command("qdel", 2, "w",
         acl=("write", "dangerous"),
         syntax="QDEL queue",
         summary=("Delete a queue on every node: every job of it added before, its policy, "
                  "its topics' subscriptions; copies that arrive late are refused."),
         reply=("integer: the jobs deleted on this node, once every reachable node deleted "
                "its own (else -NOREPL naming those that did not confirm)"),
         queues=At(1), extension=True)
def qdel(client: Client, args: list[bytes]) -> bytes | Pending:
    return _purge(client, args[1], whole=True)


@command("qpurge", 2, "w",
         acl=("write", "dangerous"),
         syntax="QPURGE queue",
         summary=("Delete every job of a queue added before, on every node; the queue keeps "
                  "its policy and subscriptions; copies that arrive late are refused."),
         reply=("integer: the jobs deleted on this node, once every reachable node deleted "
                "its own (else -NOREPL naming those that did not confirm)"),
         queues=At(1), extension=True)
def qpurge(client: Client, args: list[bytes]) -> bytes | Pending:
    return _purge(client, args[1], whole=False)


def _purge(client: Client, queue: bytes, whole: bool) -> bytes | Pending:
    if not queue:
        raise errors.err("a queue's name cannot be empty")
    if len(queue) > QUEUE_MAX_LEN:
        raise errors.err(f"a queue's name is at most {QUEUE_MAX_LEN} bytes")
    count, held = client.server.queues_service.purge(client.user, queue, whole)
    return reply_held(client, held, reply.integer(count))
