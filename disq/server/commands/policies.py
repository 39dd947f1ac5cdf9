"""When jobs fail, disq extensions: QPOLICY (a queue's MAXDELIVERIES,
DEADLETTER, BACKOFF, RATE, ..., its ADDJOB defaults and group limits) and DEADLETTER
REQUEUE. The policies are
`node.policies` (disq/policies.py) and what they do is disq/failures.py; the
operations are the queue service's (queue_service.py), which tells the other nodes
through `replication.failures` (disq/replication/failures.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from disq_client import spec

from ... import errors
from ...queue_requests import DeadletterRequeue, QPolicySet
from .. import reply
from ..later import reply_held, reply_later
from ..queue_service import policy_fields
from ..table import CONSUME, At, Both, From, OptionValue, Subcommand, command

if TYPE_CHECKING:
    from ..connection import Client
    from ..pending import Pending


@command("qpolicy", -3, "wm",
         acl=("write",),
         syntax=('QPOLICY queue SET [MAXDELIVERIES n] [DEADLETTER queue] [BACKOFF base-ms max-ms] '
                 '[RATE jobs-per-second] [CONCURRENCY n] [RESULT-TTL s] [RETRY s] [TTL s] '
                 '[REPLICATE n] [MAXLEN n] [GROUP-CONCURRENCY n] [GROUP-RATE jobs-per-second] '
                 '[RETAIN s [RETAIN-BYTES n]] | '
                 'QPOLICY queue GET | QPOLICY queue DEL'),
         summary=("A queue's policy (delivery limit, dead letters, back-off, rate, concurrency, "
                  "ADDJOB defaults, per-group limits, retention of acked jobs), kept by every "
                  "node."),
         reply='SET: status OK; GET: array of field, value pairs or null; DEL: integer',
         options=(spec.QPOLICY_SET,), queues=Both(At(1), OptionValue(b"DEADLETTER", 3)),
         extension=True)
def qpolicy(client: Client, args: list[bytes]) -> bytes | Pending:
    """QPOLICY queue SET [field value ...] (queue_requests.QPolicySet) | QPOLICY queue
    GET | QPOLICY queue DEL"""
    sub = args[2].lower()
    if sub == b"set":
        return _set(client, QPolicySet.parse(args))
    if sub in (b"get", b"del") and len(args) != 3:
        raise errors.err(f"wrong number of arguments for 'qpolicy {sub.decode()}'")
    if sub == b"get":
        return _get(client, args[1])
    if sub == b"del":
        return _delete(client, args[1])
    raise errors.err("unknown QPOLICY subcommand, try SET, GET or DEL")


def _set(client: Client, request: QPolicySet) -> bytes | Pending:
    return reply_held(client, client.server.queues_service.set_policy(request), reply.OK)


def _delete(client: Client, queue: bytes) -> bytes | Pending:
    held = client.server.queues_service.delete_policy(queue)
    if held is None:
        return reply.integer(0)
    return reply_held(client, held, reply.integer(1))


def _get(client: Client, queue: bytes) -> bytes:
    """The policy as field / value pairs (`policy_fields`); nil if the queue has no
    policy."""
    policy = client.server.queues_service.policy(queue)
    if policy is None:
        return reply.NULL_BULK
    return reply.encode([item for pair in policy_fields(policy) for item in pair])


@command("deadletter", -3, "wm",
         acl=CONSUME,
         syntax='DEADLETTER REQUEUE queue [COUNT n] | DEADLETTER REQUEUE-JOB id [id ...]',
         summary=('Dead letters back to the queues they came from: a queue\'s, on any node, or '
                  'the jobs named that this node holds.'),
         reply='integer: the jobs requeued',
         options=(spec.DEADLETTER_REQUEUE,), queues=Subcommand({b"requeue": At(2)}),
         jobs=Subcommand({b"requeue-job": From(2)}), extension=True)
def deadletter(client: Client, args: list[bytes]) -> bytes | Pending:
    """DEADLETTER REQUEUE queue [COUNT n]: the dead letters of `queue` (queued on any
    node) back to the queues they came from, their counters reset; how many.
    DEADLETTER REQUEUE-JOB id [id ...]: those of these jobs this node holds that are
    dead letters, the same way (their other holders told)."""
    sub = args[1].lower()
    if sub == b"requeue-job":
        return reply.integer(client.server.queues_service.requeue_dead_jobs(
            client.user, args[2:]))
    if sub != b"requeue":
        raise errors.err("unknown DEADLETTER subcommand, try REQUEUE or REQUEUE-JOB")
    request = DeadletterRequeue.parse(args)
    return reply_later(client, client.server.queues_service.requeue_dead(request),
                       reply.integer)
