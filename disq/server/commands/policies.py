"""When jobs fail, disq extensions: QPOLICY (a queue's MAXDELIVERIES,
DEADLETTER, BACKOFF and RATE) and DEADLETTER REQUEUE. The policies are
`node.policies` (disq/policies.py) and what they do is disq/failures.py; telling the
other nodes is `replication.failures` (disq/replication/failures.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from disq_client import spec

from ... import errors
from ...node import now_ms
from ...policies import DEAD_PREFIX, QueuePolicy, format_rate
from ...queue_requests import DeadletterRequeue, QPolicySet
from ...replication.tables import held_reply
from .. import reply
from ..table import CONSUME, At, Both, OptionValue, Subcommand, command

if TYPE_CHECKING:
    from ..connection import Client
    from ..pending import Pending


@command("qpolicy", -3, "wm",
         acl=("write",),
         syntax=('QPOLICY queue SET [MAXDELIVERIES n] [DEADLETTER queue] [BACKOFF base-ms max-ms] '
                 '[RATE jobs-per-second] | QPOLICY queue GET | QPOLICY queue DEL'),
         summary=("A queue's policy (delivery limit, dead letters, back-off, rate), kept by every "
                  'node.'),
         reply='SET: status OK; GET: array of field, value pairs or null; DEL: integer',
         options=(spec.QPOLICY_SET,), queues=Both(At(1), OptionValue(b"DEADLETTER", 3)),
         extension=True)
def qpolicy(client: Client, args: list[bytes]) -> bytes | Pending:
    """QPOLICY queue SET [MAXDELIVERIES n] [DEADLETTER queue] [BACKOFF base-ms max-ms]
    [RATE jobs-per-second] | QPOLICY queue GET | QPOLICY queue DEL"""
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
    node = client.node
    now = now_ms()
    old = node.policies.get(request.queue)
    base = old or QueuePolicy(request.queue)
    backoff = request.backoff or (base.backoff_base, base.backoff_max)
    policy = QueuePolicy(
        request.queue,
        max_deliveries=base.max_deliveries if request.max_deliveries is None
        else request.max_deliveries,
        deadletter=request.deadletter or base.deadletter,
        backoff_base=backoff[0], backoff_max=backoff[1],
        rate=base.rate if request.rate is None else request.rate,
        version=_next_version(client, request.queue, now), origin=node.id)
    node.merge_policy(policy, now)
    return _changed(client, policy, reply.OK)


def _delete(client: Client, queue: bytes) -> bytes | Pending:
    node = client.node
    if node.policies.get(queue) is None:
        return reply.integer(0)
    now = now_ms()
    tombstone = QueuePolicy(queue, version=_next_version(client, queue, now),
                            origin=node.id, deleted=True)
    node.merge_policy(tombstone, now)
    return _changed(client, tombstone, reply.integer(1))


def _next_version(client: Client, queue: bytes, now: int) -> int:
    old = client.node.policies.policies.get(queue)  # (a tombstone too)
    return now if old is None or now > old.version else old.version + 1


def _changed(client: Client, policy: QueuePolicy, done: bytes) -> bytes | Pending:
    """Tell every node; answer `done` once every reachable one holds the change, else
    -NOREPL (replication/tables.py)."""
    replication = client.server.replication
    if replication is None:
        return done
    pending = client.pending()
    replication.failures.policy_changed(
        policy, lambda missing: pending.answer(held_reply(missing, done)))
    return pending


def _get(client: Client, queue: bytes) -> bytes:
    """The policy as field / value pairs: queue, maxdeliveries (nil: none),
    deadletter (where its dead letters go), backoff ([base-ms, max-ms] or nil), rate
    (jobs per second, or nil); nil if the queue has no policy."""
    policy = client.node.policies.get(queue)
    if policy is None:
        return reply.NULL_BULK
    return reply.array([
        reply.bulk(b"queue"), reply.bulk(policy.queue),
        reply.bulk(b"maxdeliveries"),
        reply.integer(policy.max_deliveries) if policy.max_deliveries else reply.NULL_BULK,
        reply.bulk(b"deadletter"), reply.bulk(policy.deadletter_queue),
        reply.bulk(b"backoff"),
        reply.encode([policy.backoff_base, policy.backoff_max]) if policy.backoff_base
        else reply.NULL_BULK,
        reply.bulk(b"rate"),
        reply.bulk(format_rate(policy.rate)) if policy.rate else reply.NULL_BULK,
    ])


@command("deadletter", -3, "wm",
         acl=CONSUME,
         syntax='DEADLETTER REQUEUE queue [COUNT n]',
         summary='The dead letters of a queue, on any node, back to the queues they came from.',
         reply='integer: the jobs requeued',
         options=(spec.DEADLETTER_REQUEUE,), queues=Subcommand({b"requeue": At(2)}), extension=True)
def deadletter(client: Client, args: list[bytes]) -> bytes | Pending:
    """DEADLETTER REQUEUE queue [COUNT n]: the dead letters of `queue` (queued on any
    node) back to the queues they came from, their counters reset; how many."""
    if args[1].lower() != b"requeue":
        raise errors.err("unknown DEADLETTER subcommand, try REQUEUE")
    request = DeadletterRequeue.parse(args)
    node = client.node
    if not _is_dead_letter_queue(client, request.queue):
        name = request.queue.decode(errors="replace")[:200]
        raise errors.err(f"'{name}' is not a dead-letter queue (no QPOLICY names it "
                         "DEADLETTER, no dead: prefix, no dead letters in it)")
    replication = client.server.replication
    if replication is None:  # (no cluster layer: all at once)
        return reply.integer(node.revive_queue(request.queue, request.count or len(node.jobs),
                                               now_ms()))
    pending = client.pending()
    replication.failures.requeue_dead(request.queue, request.count,
                                      lambda done: pending.answer(reply.integer(done)))
    return pending


def _is_dead_letter_queue(client: Client, queue: bytes) -> bool:
    node = client.node
    return queue.startswith(DEAD_PREFIX) or node.holds_dead_letters(queue) or any(
        policy.deadletter == queue for policy in node.policies.live())
