"""Every node's stats, asked over the bus (STATS_REQUEST / STATS_REPLY, a disq extension):
what the dashboard and GET /api/v1/cluster/stats show of the whole cluster from any
node. A node answers with its memory, jobs, clients, ops/s and its biggest queues
(at most MAX_STATS_QUEUES: name, length, the cumulative jobs in and out, blocked
consumers, pause state, whether it is a dead-letter queue); the asker takes the
answers that came within STATS_TIMEOUT_MS, checking every field.

What only the server knows (clients, ops/s, RSS) comes through `ClusterStats.local`,
which the server installs; this module reads the node alone. A node computes its stats
at most once every STATS_CACHE_MS, however many dashboards or peers ask.
"""

from __future__ import annotations

import asyncio
import heapq
from collections.abc import Callable
from typing import Any, ClassVar, Final

from ..cluster import messages as m
from ..cluster.membership import ClusterNode
from ..cluster.port import BusPort
from ..node import Node, now_ms
from ..policies import DEAD_PREFIX, MAX_QUEUE_NAME_LEN
from ..queue import PAUSED_ALL, Queue

STATS_TIMEOUT_MS = 1000  # a gather answers with the nodes heard from by then
STATS_CACHE_MS: Final = 500  # a node's stats are computed at most this often
MAX_STATS_QUEUES: Final = 2000  # the biggest queues of a node that its stats list
MAX_COUNTER: Final = 2**63 - 1


class QueueStats:
    """One queue on one node."""

    __slots__ = ("name", "length", "jobs_in", "jobs_out", "blocked", "pause",
                 "dead_letters")

    def __init__(self, name: bytes, length: int, jobs_in: int, jobs_out: int,
                 blocked: int, pause: int, dead_letters: bool) -> None:
        self.name = name
        self.length = length
        self.jobs_in = jobs_in  # cumulative: a reader computes rates from two samples
        self.jobs_out = jobs_out
        self.blocked = blocked  # consumers waiting in GETJOB
        self.pause = pause  # PAUSED_IN / PAUSED_OUT bits
        self.dead_letters = dead_letters  # a dead-letter queue

    def to_wire(self) -> list[Any]:
        return [self.name, self.length, self.jobs_in, self.jobs_out, self.blocked,
                self.pause, self.dead_letters]

    @classmethod
    def from_wire(cls, data: object) -> QueueStats | None:
        if type(data) is not list or len(data) != 7:
            return None
        name, length, jobs_in, jobs_out, blocked, pause, dead = data
        # (spelled out: a reply may list thousands of queues, a generator per entry
        # cost more than the rest of a gather)
        if not (type(name) is bytes and 0 < len(name) <= MAX_QUEUE_NAME_LEN
                and type(length) is int and 0 <= length <= MAX_COUNTER
                and type(jobs_in) is int and 0 <= jobs_in <= MAX_COUNTER
                and type(jobs_out) is int and 0 <= jobs_out <= MAX_COUNTER
                and type(blocked) is int and 0 <= blocked <= MAX_COUNTER
                and type(pause) is int and 0 <= pause <= PAUSED_ALL
                and type(dead) is bool):
            return None
        return cls(name, length, jobs_in, jobs_out, blocked, pause, dead)


# A user's usage on one node (INFO users): name, commands, jobs added, consumed, acked,
# bytes in, bytes out
UserUsage = tuple[str, int, int, int, int, int, int]
MAX_STATS_USERS: Final = 10_000  # of a node's reply (ACL users are few)
USER_NAME_MAX: Final = 256


class NodeStats:
    """One node: the figures INFO shows (used_memory, used_memory_rss, registered_jobs,
    registered_queues, connected_clients, blocked_clients, instantaneous_ops_per_sec,
    uptime_in_seconds), its biggest queues, biggest first, and its users' usage."""

    __slots__ = ("used_memory", "rss", "jobs", "queue_count", "clients", "blocked_clients",
                 "ops_per_sec", "uptime", "time", "queues", "users")
    FIELDS: ClassVar[int] = 9  # the numbers before the queues, on the wire

    def __init__(self, used_memory: int = 0, rss: int = 0, jobs: int = 0,
                 queue_count: int = 0, clients: int = 0, blocked_clients: int = 0,
                 ops_per_sec: int = 0, uptime: int = 0, time: int = 0,
                 queues: list[QueueStats] | None = None,
                 users: list[UserUsage] | None = None) -> None:
        self.used_memory = used_memory
        self.rss = rss
        self.jobs = jobs
        self.queue_count = queue_count  # every queue, listed in `queues` or not
        self.clients = clients
        self.blocked_clients = blocked_clients
        self.ops_per_sec = ops_per_sec
        self.uptime = uptime  # seconds
        # when they were taken, Unix ms of the node's clock: the rates of its counters
        # are over the time between two of its samples (they are cached a while)
        self.time = time
        self.queues = queues if queues is not None else []
        self.users = users if users is not None else []

    @classmethod
    def of_node(cls, node: Node, limit: int = MAX_STATS_QUEUES) -> NodeStats:
        """What the node alone knows: its jobs and queues (the server adds the rest)."""
        return cls(jobs=len(node.jobs), queue_count=len(node.queues),
                   blocked_clients=node.blocked_clients, time=now_ms(),
                   queues=queue_stats(node, limit))

    def to_wire(self) -> list[Any]:
        return [self.used_memory, self.rss, self.jobs, self.queue_count, self.clients,
                self.blocked_clients, self.ops_per_sec, self.uptime, self.time,
                [queue.to_wire() for queue in self.queues], [list(u) for u in self.users]]

    @classmethod
    def from_wire(cls, data: object) -> NodeStats | None:
        """A peer's stats, or None if its numbers are off; a malformed queue entry is
        left out, and no more than MAX_STATS_QUEUES are taken."""
        if type(data) is not list or len(data) not in (cls.FIELDS + 1, cls.FIELDS + 2):
            return None
        numbers, queues = data[:cls.FIELDS], data[cls.FIELDS]
        users = data[cls.FIELDS + 1] if len(data) > cls.FIELDS + 1 else []
        if not _counts(*numbers) or type(queues) is not list or type(users) is not list:
            return None
        listed = [q for q in map(QueueStats.from_wire, queues[:MAX_STATS_QUEUES])
                  if q is not None]
        usage = [u for u in map(_user_usage, users[:MAX_STATS_USERS]) if u is not None]
        used, rss, jobs, queue_count, clients, blocked, ops, uptime, time = numbers
        return cls(used, rss, jobs, queue_count, clients, blocked, ops, uptime, time, listed,
                   usage)


def _user_usage(data: object) -> UserUsage | None:
    """A peer's [name, counts...] of a user, checked."""
    if (type(data) is not list or len(data) != 7 or type(data[0]) is not str
            or not 0 < len(data[0]) <= USER_NAME_MAX or not _counts(*data[1:])):
        return None
    name, calls, added, consumed, acked, bytes_in, bytes_out = data
    return name, calls, added, consumed, acked, bytes_in, bytes_out


def _counts(*values: object) -> bool:
    return all(type(v) is int and 0 <= v <= MAX_COUNTER for v in values)


def queue_stats(node: Node, limit: int = MAX_STATS_QUEUES) -> list[QueueStats]:
    """The node's `limit` biggest queues, biggest first (then by name); names longer
    than MAX_QUEUE_NAME_LEN are left out (a reply stays a few MB at most). A
    dead-letter queue is one DEADLETTER REQUEUE takes: a dead: prefix, a policy's
    DEADLETTER, or dead letters in it (its next job is one: a cheap look, not a walk)."""
    policies = {policy.deadletter_queue for policy in node.policies.live()}
    queues: list[Queue] = heapq.nsmallest(
        limit, (q for q in node.queues.values() if len(q.name) <= MAX_QUEUE_NAME_LEN),
        key=lambda q: (-len(q.jobs), q.name))
    listed = []
    for queue in queues:
        name = queue.name
        dead = name.startswith(DEAD_PREFIX) or name in policies
        if not dead and queue.jobs:
            first = queue.jobs.head(1)[0]
            dead = first.ext is not None and first.ext.dead_from is not None
        listed.append(QueueStats(name, len(queue.jobs), queue.jobs_in, queue.jobs_out,
                                 len(queue.waiters), queue.flags & PAUSED_ALL, dead))
    return listed


OnStats = Callable[[dict[str, NodeStats]], None]


class _Gathering:
    __slots__ = ("request_id", "waiting", "found", "callbacks")

    def __init__(self, request_id: int, waiting: set[str], found: dict[str, NodeStats],
                 callbacks: list[OnStats]) -> None:
        self.request_id = request_id
        self.waiting = waiting  # the nodes asked that did not answer yet
        self.found = found
        self.callbacks = callbacks


class ClusterStats:
    """STATS_REQUEST / STATS_REPLY: a part of `Replication`."""

    def __init__(self, node: Node, bus: BusPort,
                 loop: asyncio.AbstractEventLoop | None = None) -> None:
        self.node = node
        self.bus = bus
        self._loop = loop
        # This node's stats; the server installs one that adds what it knows.
        self.local: Callable[[], NodeStats] = lambda: NodeStats.of_node(node)
        self._cached: tuple[int, NodeStats, list[Any]] | None = None
        self._gathering: _Gathering | None = None
        self._request_id = 0
        bus.on(m.STATS_REQUEST, self._on_request)
        bus.on(m.STATS_REPLY, self._on_reply)

    def mine(self, now: int | None = None) -> NodeStats:
        """This node's stats, computed at most every STATS_CACHE_MS."""
        return self._mine(now)[1]

    def _mine(self, now: int | None = None) -> tuple[int, NodeStats, list[Any]]:
        now = now_ms() if now is None else now
        cached = self._cached
        if cached is None or not 0 <= now - cached[0] < STATS_CACHE_MS:
            stats = self.local()
            cached = self._cached = (now, stats, stats.to_wire())
        return cached

    def gather(self, on_done: OnStats) -> None:
        """Every reachable node's stats and this node's: `on_done({node id: stats})`
        once they all answered or after STATS_TIMEOUT_MS (a node that did not answer,
        or answered nonsense, is not in it). A gather asked while another is under way
        shares its answer."""
        gathering = self._gathering
        if gathering is not None:
            gathering.callbacks.append(on_done)
            return
        found = {self.node.id: self.mine()}
        peers = {n.id for n in self.bus.reachable_peers() if self.bus.can_send(n.id)}
        self._request_id += 1
        request_id = self._request_id
        asked = {peer for peer in peers if self.bus.send(peer, m.STATS_REQUEST, request_id)}
        if not asked:
            on_done(found)
            return
        self._gathering = _Gathering(request_id, asked, found, [on_done])
        loop = self._loop or asyncio.get_running_loop()
        loop.call_later(STATS_TIMEOUT_MS / 1000, self._done, request_id)

    def _done(self, request_id: int) -> None:
        gathering = self._gathering
        if gathering is None or gathering.request_id != request_id:
            return
        self._gathering = None
        for callback in gathering.callbacks:
            callback(dict(gathering.found))

    # -- bus messages -------------------------------------------------------------------
    def _on_request(self, sender: ClusterNode, fields: list[Any]) -> None:
        if fields and type(fields[0]) is int:
            self.bus.send(sender.id, m.STATS_REPLY, fields[0], self._mine()[2])

    def _on_reply(self, sender: ClusterNode, fields: list[Any]) -> None:
        gathering = self._gathering
        if (gathering is None or len(fields) < 2 or fields[0] != gathering.request_id
                or type(fields[0]) is not int or sender.id not in gathering.waiting):
            return  # late, not asked, or answered already
        gathering.waiting.discard(sender.id)
        stats = NodeStats.from_wire(fields[1])
        if stats is not None:
            gathering.found[sender.id] = stats
        if not gathering.waiting:
            self._done(gathering.request_id)
