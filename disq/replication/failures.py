"""When jobs fail, across nodes: dead letters, queue policies and the rate limit's shares.

- JOBMOVE: a holder moved its copy of a job (a dead letter, or one put back by
  DEADLETTER REQUEUE): the other holders take the move if its generation is newer
  than their copy's (`Node.apply_move`). A holder that missed it (down, cut off)
  learns it later from requeue.py's exchanges (QUEUED and WILLQUEUE carry the
  sender's generation; a holder with a newer copy answers JOBMOVE).
- QPOLICY_SET / QPOLICY_SYNC: every node holds every queue policy (tables.py).
- RATE_DEMAND: every RATE_PERIOD_MS each node tells the others its demand for each
  rate-limited queue, and takes its share of the rate (disq/ratelimit.py), of its
  CONCURRENCY (disq/concurrency.py), and of each group's GROUP-CONCURRENCY and
  GROUP-RATE (disq/grouplimits.py).
- DLQ_REQUEUE / DLQ_REQUEUE_REPLY: DEADLETTER REQUEUE puts back the dead letters
  queued on every node: this node's first, then each reachable node's in turn
  (in turn so that COUNT is the total), each given REQUEUE_TIMEOUT_MS to answer;
  each node moves REQUEUE_SLICE of them a loop turn, serving its clients between.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable
from typing import Any, Final

from disq_client.spec import GROUP_MAX_LEN

from ..cluster import messages as m
from ..cluster.membership import ClusterNode
from ..cluster.port import BusPort
from ..concurrency import ConcurrencyCap, shares
from ..grouplimits import GroupLimits
from ..ids import is_valid_job_id
from ..node import Node, now_ms
from ..policies import QueuePolicy
from ..queue import PriorityJobs, Queue
from ..ratelimit import RateLimiter, share_of
from .requeue import send_jobmove
from .tables import OnHeld, SyncedTable
from .wire import MAX_GENERATION, MAX_U32, decode_errors

RATE_PERIOD_MS: Final = 200  # demand reports this often
RATE_REPORT_TTL_MS: Final = 1000  # a node's report counts this long
REQUEUE_TIMEOUT_MS: Final = 10_000  # a node asked to put back its dead letters: its answer by then
REQUEUE_SLICE: Final = 10_000  # dead letters put back per loop turn
MAX_REASON_LEN: Final = 64
MAX_GROUPS_REPORTED: Final = 10_000  # a queue's groups running in one RATE_DEMAND item


class Failures:
    """JOBMOVE, QPOLICY_SET/SYNC, RATE_DEMAND, DLQ_REQUEUE(_REPLY): a part of
    `Replication`."""

    def __init__(self, node: Node, bus: BusPort,
                 loop: asyncio.AbstractEventLoop | None = None) -> None:
        self.node = node
        self.bus = bus
        self._loop = loop
        self.policies = SyncedTable(bus, m.QPOLICY_SET, m.QPOLICY_SYNC, m.QPOLICY_HELD,
                                    lambda: node.policies.policies.values(), self._merge,
                                    loop)
        # The server persists what changed (the AOF when on, and nodes.conf).
        self.on_policy_change: Callable[[QueuePolicy], None] = lambda policy: None
        # queue -> node id -> (demand, when reported)
        self._demands: dict[bytes, dict[str, tuple[float, int]]] = {}
        self._reported: dict[bytes, float] = {}  # what this node said last
        # queue -> node id -> (jobs running there, when reported): CONCURRENCY
        self._running: dict[bytes, dict[str, tuple[int, int]]] = {}
        # queue -> node id -> (group -> jobs running there, when): GROUP-CONCURRENCY
        self._group_running: dict[bytes, dict[str, tuple[dict[bytes, int], int]]] = {}
        self._next_rate = 0
        # DLQ_REQUEUE in flight: request id -> (the node asked, what to do with its count)
        self._requeues: dict[int, tuple[str, Callable[[int], None]]] = {}
        self._request_id = 0
        bus.on(m.JOBMOVE, self._on_jobmove)
        bus.on(m.RATE_DEMAND, self._on_demand)
        bus.on(m.DLQ_REQUEUE, self._on_requeue)
        bus.on(m.DLQ_REQUEUE_REPLY, self._on_requeue_reply)

    # -- what the core tells the cluster ------------------------------------------------
    def job_moved(self, job: Any) -> None:
        send_jobmove(self.bus, None, job)

    def policy_changed(self, policy: QueuePolicy, on_held: OnHeld | None = None) -> None:
        """QPOLICY SET / DEL here: every node (`on_held` once every reachable one holds
        it: tables.py), and this node's disk."""
        self.policies.changed(policy.to_wire(), on_held)
        self.on_policy_change(policy)

    def cron(self, now: int) -> None:
        self.policies.cron(now)
        if now >= self._next_rate:
            self._next_rate = now + RATE_PERIOD_MS
            self._share_rates(now)

    # -- policies -----------------------------------------------------------------------
    def _merge(self, data: object) -> None:
        policy = QueuePolicy.from_wire(data)
        if policy is not None and self.node.merge_policy(policy, now_ms()):
            self.on_policy_change(policy)

    # -- rate shares --------------------------------------------------------------------
    def _share_rates(self, now: int) -> None:
        """Sample this node's demand for each rate-limited queue, tell the others,
        and set this node's share from every node's latest report."""
        report: list[list[Any]] = []
        limited = set()
        for queue in self.node.queues.values():
            limiter, cap, groups = queue.limiter, queue.cap, queue.groups
            if limiter is None and cap is None and groups is None:
                continue
            limited.add(queue.name)
            sampler: RateLimiter | ConcurrencyCap | GroupLimits | None = (
                limiter if limiter is not None else cap if cap is not None else groups)
            assert sampler is not None
            demand = round(sampler.sample(len(queue.waiters), now), 3)
            if cap is not None:
                cap.prune()
            if groups is not None:  # [name, demand, running, [[group, running] ...]]
                self._refresh_groups(queue, groups, now)
                report.append([queue.name, demand, len(cap.running) if cap is not None else 0,
                               groups.report()[:MAX_GROUPS_REPORTED]])
            elif cap is not None:  # and how many run here (never left out: it may fall)
                report.append([queue.name, demand, len(cap.running)])
            elif demand or self._reported.get(queue.name):
                report.append([queue.name, demand])
            self._reported[queue.name] = demand
            fresh = {node_id: d for node_id, (d, when)
                     in self._demands.get(queue.name, {}).items()
                     if now - when <= RATE_REPORT_TTL_MS}
            if limiter is not None:
                limiter.set_rate(limiter.rate, share_of(limiter.rate, demand,
                                                        sum(fresh.values())), now)
            if groups is not None and groups.rate:
                groups.rate_share = share_of(groups.rate, demand, sum(fresh.values()))
            if cap is not None:
                running = sum(r for r, when in self._running.get(queue.name, {}).values()
                              if now - when <= RATE_REPORT_TTL_MS)
                self._share_cap(queue, cap, demand, fresh, running)
        for name in [q for q in self._reported if q not in limited]:
            del self._reported[name]
        if report:
            self.bus.broadcast(m.RATE_DEMAND, report)
        for name in [q for q, reports in self._demands.items()
                     if all(now - when > RATE_REPORT_TTL_MS for _, when in reports.values())]:
            del self._demands[name]
            self._running.pop(name, None)
            self._group_running.pop(name, None)

    def _refresh_groups(self, queue: Queue, groups: GroupLimits, now: int) -> None:
        """GROUP-CONCURRENCY across nodes (grouplimits.py): what the others reported
        running of each group, fresh reports only; the groups that have room again
        back in the turns, and the consumers waiting here served."""
        elsewhere: dict[bytes, int] = {}
        for running, when in self._group_running.get(queue.name, {}).values():
            if now - when <= RATE_REPORT_TTL_MS:
                for group, count in running.items():
                    elsewhere[group] = elsewhere.get(group, 0) + count
        groups.elsewhere = elsewhere
        jobs = queue.jobs
        if groups.refresh(jobs if type(jobs) is PriorityJobs else None, now) and (
                queue.waiters):
            self.node.consumers.mark_ready(queue)

    def _share_cap(self, queue: Queue, cap: ConcurrencyCap, demand: float,
                   theirs: dict[str, float], running_elsewhere: int) -> None:
        """This node's part of the queue's CONCURRENCY, as every node with the same
        reports computes it (concurrency.py), and no more than what the others do not
        run (jobs started under an older share run on: a share is not taken back);
        consumers waiting here are served if it leaves room."""
        share = shares(cap.limit, {**theirs, self.node.id: demand})[self.node.id]
        # A share grows one round late, once the others have had this node's report
        # and shrunk theirs (each computes its own at its own time).
        grown, cap.allotted = min(share, cap.allotted), share
        cap.share = max(0, min(grown, cap.limit - running_elsewhere))
        if queue.waiters and queue.jobs and cap.has_room():
            self.node.consumers.mark_ready(queue)

    def _on_demand(self, sender: ClusterNode, fields: list[Any]) -> None:
        """RATE_DEMAND: [[queue, demand] or [queue, demand, running] (CONCURRENCY) or
        [queue, demand, running, [[group, running] ...]] (GROUP-CONCURRENCY) ...]."""
        if not fields or type(fields[0]) is not list:
            return
        now = now_ms()
        for item in fields[0][:10_000]:
            if type(item) is not list or len(item) not in (2, 3, 4):
                continue
            name, demand = item[:2]
            if type(name) is bytes and type(demand) in (int, float) and (
                    math.isfinite(demand) and 0 <= demand <= 1e9):
                self._demands.setdefault(name, {})[sender.id] = (float(demand), now)
                if len(item) >= 3 and type(item[2]) is int and 0 <= item[2] <= MAX_U32:
                    # a CONCURRENCY queue: the jobs running there
                    self._running.setdefault(name, {})[sender.id] = (item[2], now)
                if len(item) == 4:  # a GROUP-CONCURRENCY queue: each group's runs there
                    running = _group_counts(item[3])
                    if running is not None:
                        self._group_running.setdefault(name, {})[sender.id] = (running, now)

    # -- dead letters -------------------------------------------------------------------
    def _on_jobmove(self, sender: ClusterNode, fields: list[Any]) -> None:
        if len(fields) < 7:
            return
        job_id, queue, dead_from, reason, generation, nacks, deliveries = fields[:7]
        if not (type(job_id) is bytes and is_valid_job_id(job_id)
                and type(queue) is bytes and queue
                and (dead_from is None or type(dead_from) is bytes)
                and (reason is None or type(reason) is bytes
                     and len(reason) <= MAX_REASON_LEN)
                and type(generation) is int and 0 < generation <= MAX_GENERATION
                and type(nacks) is int and 0 <= nacks <= MAX_U32
                and type(deliveries) is int and 0 <= deliveries <= MAX_U32
                and (dead_from is not None) == (generation % 2 == 1)):
            return
        errors = decode_errors(fields[7]) if len(fields) >= 8 else []
        if errors is None:
            return
        job = self.node.lookup(job_id)
        if job is not None:
            if errors:  # (kept before the move: it logs the job again)
                self.node.learn_errors(job, errors)
            self.node.apply_move(job, queue, dead_from, reason, generation, nacks,
                                 deliveries, now_ms())

    def requeue_dead(self, queue: bytes, count: int, on_done: Callable[[int], None]) -> None:
        """DEADLETTER REQUEUE: this node's dead letters of `queue` (REQUEUE_SLICE a loop
        turn), then the reachable nodes' in turn, up to `count` (0: all) in all;
        `on_done(how many)` once, when every node answered or timed out."""
        peers = [n.id for n in self.bus.reachable_peers() if self.bus.can_send(n.id)]
        total = 0

        def ask_next(answered: int) -> None:
            nonlocal total
            total += answered
            while peers and not (count and total >= count):
                peer = peers.pop(0)
                self._request_id += 1
                request_id = self._request_id
                if self.bus.send(peer, m.DLQ_REQUEUE, request_id, queue,
                                 count - total if count else 0):
                    self._requeues[request_id] = (peer, ask_next)
                    self._loop_().call_later(REQUEUE_TIMEOUT_MS / 1000, self._answered,
                                             request_id, 0)
                    return
            on_done(total)

        self.revive_here(queue, count, ask_next)

    def revive_here(self, queue: bytes, count: int, on_done: Callable[[int], object],
                    done: int = 0) -> None:
        """This node's dead letters of `queue`, up to `count` (0: all), REQUEUE_SLICE
        a loop turn (the clients are served in between); `on_done(how many)`."""
        wanted = REQUEUE_SLICE if not count else min(REQUEUE_SLICE, count - done)
        revived = self.node.revive_queue(queue, wanted, now_ms()) if wanted > 0 else 0
        done += revived
        if revived < wanted or wanted <= 0:
            on_done(done)
        else:
            self._loop_().call_soon(self.revive_here, queue, count, on_done, done)

    def _loop_(self) -> asyncio.AbstractEventLoop:
        return self._loop or asyncio.get_running_loop()

    def _answered(self, request_id: int, count: int, sender: str | None = None) -> None:
        asked = self._requeues.get(request_id)
        if asked is not None and sender in (None, asked[0]):
            del self._requeues[request_id]
            asked[1](count)

    def _on_requeue(self, sender: ClusterNode, fields: list[Any]) -> None:
        if len(fields) < 3:
            return
        request_id, queue, count = fields[:3]
        if not (type(request_id) is int and type(queue) is bytes and queue
                and type(count) is int and 0 <= count <= MAX_U32):
            return
        def answer(done: int) -> None:
            self.bus.send(sender.id, m.DLQ_REQUEUE_REPLY, request_id, done)

        self.revive_here(queue, count, answer)

    def _on_requeue_reply(self, sender: ClusterNode, fields: list[Any]) -> None:
        if len(fields) >= 2 and type(fields[0]) is int and type(fields[1]) is int and (
                0 <= fields[1] <= MAX_U32):
            self._answered(fields[0], fields[1], sender.id)


def _group_counts(pairs: object) -> dict[bytes, int] | None:
    """A RATE_DEMAND item's [[group, jobs running] ...], checked; None if anything is
    off (the item's group counts are ignored then)."""
    if type(pairs) is not list or len(pairs) > MAX_GROUPS_REPORTED:
        return None
    counts: dict[bytes, int] = {}
    for pair in pairs:
        if not (type(pair) is list and len(pair) == 2 and type(pair[0]) is bytes
                and 0 < len(pair[0]) <= GROUP_MAX_LEN and type(pair[1]) is int
                and 0 < pair[1] <= MAX_U32):
            return None
        counts[pair[0]] = pair[1]
    return counts
