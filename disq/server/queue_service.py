"""The queue operations every front end runs (`Server.queues_service`): QLEN, GLOBALQLEN,
QSTAT, QPEEK, QSCAN, PAUSE, QPOLICY, DEADLETTER REQUEUE, QDEL and QPURGE, typed arguments in, typed
results out. A RESP handler is parse -> service -> encode (commands/queues.py,
commands/policies.py); an HTTP route is JSON -> service -> JSON (http/api_queues.py).

What waits for other nodes (GLOBALQLEN's sum, a policy change every reachable node
confirms, the dead letters requeued on every node) comes as a `Later` (later.py).
Permissions are the caller's: the RESP dispatch checks the queues a command names
before its handler runs, an HTTP route through `JobService.gate(..., queues)`; what
lists (QSCAN) shows only what the user may see.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .. import errors
from ..node import now_ms
from ..policies import DEAD_PREFIX, NO_DEFAULTS, QueueDefaults, QueuePolicy, format_rate
from ..queue import PAUSE_NAMES, PAUSED_ALL
from ..queue_requests import check_defaults
from .later import Later, all_held

if TYPE_CHECKING:
    from ..acl import User
    from ..grouplimits import GroupLimits
    from ..job import Job
    from ..node import Node
    from ..queue import Queue
    from ..queue_requests import DeadletterRequeue, JScan, Pause, QPolicySet, QScan
    from ..scantable import ScanTable
    from .app import Server

# A field of QSTAT or QPOLICY GET: text, a number, a list (of node IDs, of the back-off's
# two numbers), or none.
QueueField = bytes | int | list[bytes] | list[int] | None


def queue_fields(queue: Queue, now: int) -> list[tuple[bytes, QueueField]]:
    """A queue's counters in QSTAT's order, for QSTAT's reply and the HTTP API alike;
    a queue with GROUP-CONCURRENCY or GROUP-RATE (grouplimits.py) has three more:
    the groups held back here now, the jobs of groups running here, and those the other
    nodes reported running (a report lags up to 200 ms)."""
    federation = queue.federation  # (None: federation never imported for it)
    importers = federation.responders if federation is not None else None
    groups = queue.groups
    if groups is not None:
        return [*_counters(queue, now, importers), *group_fields(groups)]
    return _counters(queue, now, importers)


def group_fields(groups: GroupLimits) -> list[tuple[bytes, QueueField]]:
    return [
        (b"groups-held", len(groups.cap_parked) + len(groups.rate_parked)),
        (b"group-jobs-running", groups.running_here()),
        (b"group-jobs-running-elsewhere", sum(groups.elsewhere.values())),
    ]


def _counters(queue: Queue, now: int, importers: dict[str, int] | None
              ) -> list[tuple[bytes, QueueField]]:
    return [
        (b"name", queue.name),
        (b"len", len(queue.jobs)),
        (b"age", (now - queue.ctime) // 1000),
        (b"idle", (now - queue.atime) // 1000),
        (b"blocked", len(queue.waiters)),
        (b"import-from", [n.encode() for n in sorted(importers or ())]),
        (b"import-rate", queue.import_rate_at(now)),
        (b"jobs-in", queue.jobs_in),
        (b"jobs-out", queue.jobs_out),
        (b"pause", PAUSE_NAMES[queue.flags & PAUSED_ALL]),
    ]


def policy_fields(policy: QueuePolicy) -> list[tuple[bytes, QueueField]]:
    """A policy as QPOLICY GET shows it: queue, maxdeliveries (None: none), deadletter
    (where its dead letters go), backoff ([base-ms, max-ms] or None), rate (jobs per
    second as text, or None), concurrency (None: no limit), result-ttl (seconds, None: the default
    hour), the ADDJOB defaults retry, ttl, replicate, maxlen (None: none), group-concurrency
    and group-rate (None: no limit; the rate as text), retain and retain-bytes (None:
    acked jobs are not kept)."""
    defaults = policy.defaults or NO_DEFAULTS
    return [
        (b"queue", policy.queue),
        (b"maxdeliveries", policy.max_deliveries or None),
        (b"deadletter", policy.deadletter_queue),
        (b"backoff", [policy.backoff_base, policy.backoff_max] if policy.backoff_base
         else None),
        (b"rate", format_rate(policy.rate) if policy.rate else None),
        (b"concurrency", policy.concurrency or None),
        (b"result-ttl", policy.result_ttl if policy.result_ttl >= 0 else None),
        (b"retry", defaults.retry if defaults.retry >= 0 else None),
        (b"ttl", defaults.ttl or None),
        (b"replicate", defaults.replicate or None),
        (b"maxlen", defaults.maxlen or None),
        (b"group-concurrency", policy.group_concurrency or None),
        (b"group-rate", format_rate(policy.group_rate) if policy.group_rate else None),
        (b"retain", policy.retain or None),
        (b"retain-bytes", policy.retain_bytes or None),
    ]


def scan(table: ScanTable[Any, Any], request: QScan | JScan,
         keep: Callable[[Any], bool] | None) -> tuple[int, list[Any]]:
    """QSCAN's and JSCAN's walk. A negative COUNT scans to the end, as in Disque (its
    bounds wrap around)."""
    cursor, count, busyloop = request.cursor, request.count, request.busyloop
    if count < 0:
        busyloop = True
    items: list[Any] = []
    while True:
        cursor, found = table.scan(cursor, count, keep)
        items.extend(found)
        if cursor == 0 or not busyloop:
            return cursor, items


class QueueService:
    """The queue operations of one node."""

    __slots__ = ("server", "node")

    def __init__(self, server: Server) -> None:
        self.server = server
        self.node: Node = server.node

    # -- reads ----------------------------------------------------------------------------
    def length(self, queue: bytes) -> int:
        """QLEN: the jobs queued on this node."""
        return self.node.qlen(queue)

    def global_length(self, queue: bytes) -> Later[int]:
        """GLOBALQLEN: this node's QLEN plus each reachable node's, once they all
        answered (at once on a node alone)."""
        local = self.node.qlen(queue)
        replication = self.server.replication
        if replication is None or self.node.cluster.size() <= 1:
            return Later.now(local)
        return Later.of(lambda total: replication.global_qlen(
            queue, lambda others: total(local + others)))

    def get(self, queue: bytes) -> Queue | None:
        """The queue (QSTAT: `queue_fields`), None if this node has none of that name."""
        return self.node.queues.get(queue)

    def peek(self, queue: bytes, count: int) -> list[Job]:
        """QPEEK: the next `count` jobs GETJOB would deliver, in that order; count < 0:
        the last -count it would deliver, the last first. For plain jobs that is
        Disque's oldest first / newest first; with priorities and groups it is the
        delivery order (most urgent first, the groups of a priority in turn)."""
        found = self.node.queues.get(queue)
        if found is None or count == 0:
            return []
        return found.jobs.head(count) if count > 0 else found.jobs.tail(-count)

    def scan(self, user: User, request: QScan) -> tuple[int, list[Queue]]:
        """QSCAN: a step of the walk over this node's queues, those `user` may see."""
        minlen, maxlen, importrate = request.minlen, request.maxlen, request.importrate
        now = now_ms()
        everything = user.all_queues  # (ACL: else only the user's queues)

        def keep(queue: Queue) -> bool:
            n = len(queue.jobs)
            return (
                (everything or user.may_use(queue.name))
                and (minlen < 0 or n >= minlen)
                and (maxlen < 0 or n <= maxlen)
                and (importrate < 0 or queue.import_rate_at(now) >= importrate)
            )

        return scan(self.node.queues, request, keep)

    # -- changes --------------------------------------------------------------------------
    def pause(self, request: Pause) -> int:
        """PAUSE: the queue's resulting pause flags. As Disque: the state asked
        replaces the queue's, it does not add to it."""
        node = self.node
        queue, flags = request.queue, request.flags
        old = node.pause_flags(queue)
        if flags is not None and (flags != old or node.queues.get(queue) is not None):
            node.set_pause(queue, flags, request.bcast)
            return flags
        if request.bcast:  # no update (or none on a missing queue): the state as is
            node.cluster.pause(queue, old)
        return old

    def policy(self, queue: bytes) -> QueuePolicy | None:
        """QPOLICY GET: the queue's policy (`policy_fields`), None if it has none."""
        return self.node.policies.get(queue)

    def set_policy(self, request: QPolicySet) -> Later[list[str]]:
        """QPOLICY SET: the fields given replace the policy's; the reachable nodes
        that did not confirm the change in time, once known (replication/tables.py)."""
        node = self.node
        now = now_ms()
        base = node.policies.get(request.queue) or QueuePolicy(request.queue)
        backoff = request.backoff or (base.backoff_base, base.backoff_max)
        old = base.defaults or NO_DEFAULTS
        defaults = QueueDefaults(
            old.retry if request.retry is None else request.retry,
            old.ttl if request.ttl is None else request.ttl,
            old.replicate if request.replicate is None else request.replicate,
            old.maxlen if request.maxlen is None else request.maxlen)
        check_defaults(defaults.retry, defaults.ttl, defaults.replicate)
        policy = QueuePolicy(
            request.queue,
            max_deliveries=base.max_deliveries if request.max_deliveries is None
            else request.max_deliveries,
            deadletter=request.deadletter or base.deadletter,
            backoff_base=backoff[0], backoff_max=backoff[1],
            rate=base.rate if request.rate is None else request.rate,
            result_ttl=base.result_ttl if request.result_ttl is None else request.result_ttl,
            concurrency=(base.concurrency if request.concurrency is None
                         else request.concurrency),
            defaults=None if defaults.empty() else defaults,
            group_concurrency=(base.group_concurrency if request.group_concurrency is None
                               else request.group_concurrency),
            group_rate=base.group_rate if request.group_rate is None else request.group_rate,
            retain=base.retain if request.retain is None else request.retain,
            retain_bytes=(base.retain_bytes if request.retain is None
                          else request.retain_bytes or 0),
            version=self._next_version(request.queue, now), origin=node.id)
        if request.retain_bytes is not None:
            self.server.retention.check_disk(request.retain_bytes)
        node.merge_policy(policy, now)
        return self._changed(policy)

    def delete_policy(self, queue: bytes) -> Later[list[str]] | None:
        """QPOLICY DEL: None if the queue had no policy, else as `set_policy`."""
        node = self.node
        if node.policies.get(queue) is None:
            return None
        now = now_ms()
        tombstone = QueuePolicy(queue, version=self._next_version(queue, now),
                                origin=node.id, deleted=True)
        node.merge_policy(tombstone, now)
        return self._changed(tombstone)

    def purge(self, user: User, queue: bytes, whole: bool) -> tuple[int, Later[list[str]]]:
        """QPURGE (`whole` False: the queue's jobs) or QDEL (the queue too: its policy,
        its topics' subscriptions, its pause state): the jobs deleted here, and the
        change answered once every reachable node deleted theirs (purges.py). ACL: the
        caller checked the queue."""
        node = self.node
        purge = node.policies.purges.make(queue, node.id, node.admission.stamp(now_ms()),
                                          whole)
        count = node.purge(purge)
        replication = self.server.replication
        helds: list[Later[list[str]]] = [
            Later.now([]) if replication is None else
            Later.of(lambda held: replication.purges.changed(purge, held))]
        if whole:
            held = self.delete_policy(queue)
            if held is not None:
                helds.append(held)
            topics = self.server.topic_service
            for topic, queues in list(node.topics.topics().items()):
                if queue in queues:
                    held = topics.change(user, topic, queue, unsubscribe=True)
                    if held is not None:
                        helds.append(held)
        return count, all_held(helds)

    def _next_version(self, queue: bytes, now: int) -> int:
        old = self.node.policies.policies.get(queue)  # (a tombstone too)
        return now if old is None or now > old.version else old.version + 1

    def _changed(self, policy: QueuePolicy) -> Later[list[str]]:
        replication = self.server.replication
        if replication is None:
            return Later.now([])
        return Later.of(lambda held: replication.failures.policy_changed(policy, held))

    def requeue_dead(self, request: DeadletterRequeue) -> Later[int]:
        """DEADLETTER REQUEUE: the dead letters of the queue (queued on any node) back
        to the queues they came from, their counters reset; how many. An error if the
        queue is no dead-letter queue."""
        node = self.node
        queue = request.queue
        if not self.is_dead_letter_queue(queue):
            name = queue.decode(errors="replace")[:200]
            raise errors.err(f"'{name}' is not a dead-letter queue (no QPOLICY names it "
                             "DEADLETTER, no dead: prefix, no dead letters in it)")
        replication = self.server.replication
        if replication is None:  # (no cluster layer: all at once)
            return Later.now(node.revive_queue(queue, request.count or len(node.jobs),
                                               now_ms()))
        return Later.of(lambda done: replication.failures.requeue_dead(
            queue, request.count, done))

    def requeue_dead_jobs(self, user: User, ids: list[bytes]) -> int:
        """DEADLETTER REQUEUE-JOB: the dead letters among these jobs that this node holds
        back to the queues they came from, their counters reset, their holders told;
        how many (a job not held here, or no dead letter, counts for nothing)."""
        node = self.node
        now = now_ms()
        count = 0
        for job_id in self.server.jobs.allowed(user, ids):
            job = node.lookup(job_id)
            if job is not None and job.ext is not None and job.ext.dead_from is not None:
                node.revive(job, now)
                count += 1
        return count

    def is_dead_letter_queue(self, queue: bytes) -> bool:
        node = self.node
        return queue.startswith(DEAD_PREFIX) or node.holds_dead_letters(queue) or any(
            policy.deadletter == queue for policy in node.policies.live())
