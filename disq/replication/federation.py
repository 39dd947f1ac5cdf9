"""Federation: jobs move to the node whose consumers wait (NEEDJOBS / YOURJOBS).

A GETJOB that finds a queue empty makes its node ask the cluster (NEEDJOBS), at once
the first time and then with back-off while nothing comes. A node that holds jobs of
that queue sends some of them (YOURJOBS: `count` if it has twice as many, else half,
Disque's sizing). A node that has none remembers who asked, and pushes the next job
queued there to that node right away: a consumer on another node gets a new job in
about one bus round trip instead of Disque's 100 ms poll. While consumers stay blocked
their node asks again every `ASK_PERIOD_MS` or more.

A node that imports the queue itself (its consumers took jobs from others in the last
5 s) or whose own consumers wait on it sends nothing when asked (Disque's rule against
jobs bouncing between nodes) but remembers the asker too: a job requeued there (a NACK,
a RETRY, the end of a back-off) while none of its consumers waits is pushed to it, one
per requeue. Before, a NACKed job waited there for the 5 s to end.

Pushes go only to consumers that still wait (a job pushed after they left
sits on a node where nobody asks for it). NEEDJOBS says how long the asker's consumers
wait, and the provider forgets the asker then (at most `WANTED_FOR_MS`, refreshed by
the asks that follow); when the last of them leaves (served, timed out, gone) the asker
sends NEEDJOBS_CANCEL at once, ahead of the reply the consumer gets, and the asks go
on no sooner than `ASK_PERIOD_MS` after the last one: a provider answers an ask with
the jobs it holds, which would then move them to a node whose consumer just gave up.
The cancel can still cross a push: a provider that reads a producer's ADDJOB before
the cancel's frame (two sockets, read in either order) pushes the job in the asker's
last millisecond; it then waits queued on the asker, as a Disque import would, not lost.

A moved job keeps the exporter in its `nodes_delivered` (and the exporter adds the
importer), so an ACK on the importer retires the exporter's copy too: a moved job is
never delivered again after its RETRY, as it is in Disque. A RETRY 0 job leaves the
exporter entirely, so it is never delivered twice.
"""

from __future__ import annotations

import asyncio
import logging
from functools import partial
from typing import Any, Final

from .. import lifecycle
from ..cluster import messages as m
from ..cluster.membership import ClusterNode
from ..cluster.port import BusPort
from ..job import ACTIVE, BCAST_QUEUED, job_priority, with_holders
from ..node import Node, now_ms
from ..queue import NO_PRIORITY, PAUSED_OUT, Queue
from ..queue_federation import QueueFederation
from .clock import to_local_ms
from .wire import decode_job, encode_job

log = logging.getLogger("disq")

ASK_PERIOD_MS: Final = 100  # blocked consumers: ask again this often at most...
ASK_BACKOFF_MAX_MS: Final = 2000  # ...backing off to this while nobody has jobs
WANTED_FOR_MS: Final = 3000  # a peer's NEEDJOBS is remembered for pushing jobs this long at most
REQUEST_COUNT: Final = 10  # jobs asked for at first...
MAX_BATCH: Final = 1000  # ...doubling up to this while a queue keeps running dry
BURST_GAP_MS: Final = 200  # imports closer than this belong to one burst


class Federation:
    def __init__(self, node: Node, bus: BusPort, loop: asyncio.AbstractEventLoop | None) -> None:
        self.node = node
        self.bus = bus
        self._to_local = partial(to_local_ms, bus)  # a peer's due times, here
        self.loop = loop
        # queue -> {node id: (ms until which it wants jobs, how many it asked for)}
        self.wanted: dict[bytes, dict[str, tuple[int, int]]] = {}
        self._timer: asyncio.TimerHandle | None = None
        bus.on(m.NEEDJOBS, self._on_needjobs)
        bus.on(m.YOURJOBS, self._on_yourjobs)
        bus.on(m.NEEDJOBS_CANCEL, self._on_needjobs_cancel)
        bus.on(m.QBEST, self._on_qbest)

    # -- consumer side -----------------------------------------------------------------
    def need_jobs(self, queue: Queue, now: int | None = None) -> None:
        """Ask the cluster for jobs of `queue`, unless asked too recently."""
        if now is None:
            now = now_ms()
        state = federation_of(queue)
        if now < state.bcast_time:
            return
        attempt = state.bcast_attempt
        state.bcast_time = now + min(ASK_PERIOD_MS << min(attempt, 8), ASK_BACKOFF_MAX_MS)
        state.bcast_attempt = attempt + 1
        wait = self._wait_ms(queue)
        self.bus.broadcast(m.NEEDJOBS, queue.name, state.adhoc_attempt or REQUEST_COUNT,
                           wait)
        if wait:
            state.asked_time = now
            self._arm()

    @staticmethod
    def _wait_ms(queue: Queue) -> int:
        """How long the consumers blocked on `queue` still wait, the longest, at most
        `WANTED_FOR_MS` (they ask again before that); 0 if none is blocked."""
        longest = 0
        for waiter in queue.waiters:
            left = waiter.wait_left_ms()
            if left is None or left >= WANTED_FOR_MS:
                return WANTED_FOR_MS
            if left > longest:
                longest = left
        return longest

    def jobs_not_needed(self, queue: Queue) -> None:
        """The last consumer blocked on `queue` left: the nodes asked stop pushing jobs
        here. Sent at once, so that it leaves before the consumer's reply: a producer
        this consumer then talks to finds the cancel handled. The next ask waits until
        `ASK_PERIOD_MS` after the last one, no longer, as its pushes stop now."""
        state = federation_of(queue)
        state.bcast_time = min(state.bcast_time, state.asked_time + ASK_PERIOD_MS)
        state.asked_time = 0
        self.bus.broadcast(m.NEEDJOBS_CANCEL, queue.name, urgent=True)

    def _arm(self) -> None:
        if self._timer is None and self.loop is not None:
            self._timer = self.loop.call_later(ASK_PERIOD_MS / 1000, self._on_timer)

    def _on_timer(self) -> None:
        """Ask again for the queues consumers still wait on."""
        self._timer = None
        node = self.node
        if node.leaving:
            return
        now = now_ms()
        waiting = False
        for queue in node.queues.values():
            if queue.waiters and not queue.jobs:
                waiting = True
                self.need_jobs(queue, now)
            elif queue.hold_until and queue.waiters:
                waiting = True  # held for a peer's more urgent jobs: over at hold_until
                if now >= queue.hold_until:
                    node.consumers.mark_ready(queue)  # served at the end of this loop turn
        if waiting:
            self._arm()

    def _on_yourjobs(self, sender: ClusterNode, fields: list[Any]) -> None:
        if not fields or type(fields[0]) is not list:
            return
        node = self.node
        now = now_ms()
        known = self.bus.known_id_map()
        purges = node.policies.purges
        for data in fields[0][:MAX_BATCH]:
            job = decode_job(data, now, known, sender.id, node.id, peer_id=sender.id,
                             to_local=self._to_local)
            if job is None:
                log.warning("Received a corrupted job from node %s", sender.id)
                continue
            assert job.nodes_delivered is not None
            mine = node.lookup(job.id)
            if mine is None:
                if purges.refuses(job.queue, job.ctime):
                    continue  # QDEL / QPURGE deleted it: the sender was cut off
                if not node.store_copy(job, now):
                    continue
                mine = job
            elif mine.nodes_delivered is None:
                mine.nodes_delivered = job.nodes_delivered
            else:
                mine.nodes_delivered = with_holders(mine.nodes_delivered, job.nodes_delivered)
            if mine.state != ACTIVE:
                continue  # queued here already, or acked: nothing to do
            mine.flags &= ~BCAST_QUEUED  # queued here for the first time: no QUEUED
            if mine.qtime == 0 and mine.retry == 0:
                mine.qtime = now  # an at-most-once job, never queued here yet
            node.stats.jobs_imported += 1
            queue = node.queue(mine.queue, now)  # type: ignore[arg-type]  # (named)
            queue.hold_until = 0  # a hold's jobs came: the next hold asks again
            state = federation_of(queue)
            state.bcast_attempt = 0  # jobs came: ask at once next time
            state.bcast_time = 0
            # Consumers drain imports fast: ask for more at a time (the size
            # of the next request; `adhoc_attempt` holds it).
            size = state.adhoc_attempt or REQUEST_COUNT
            if now - state.import_time > BURST_GAP_MS:
                size = REQUEST_COUNT
            elif state.import_time != now:
                size = min(size * 2, MAX_BATCH)
            state.adhoc_attempt = size
            responders = state.responders
            if responders is None:
                state.responders = responders = {}
            responders[sender.id] = now
            state.note_import(now)
            # Queued now, or at its due time on this node's clock (a scheduled job
            # pushed as it came due there is due here a little later: the clock
            # offset's uncertainty). Counted as an import first: what the consumers
            # here do not take at once stays here for them (jobs_available).
            node.queue_when_due(mine, now, sent=True)

    # -- provider side -----------------------------------------------------------------
    def _on_needjobs(self, sender: ClusterNode, fields: list[Any]) -> None:
        if len(fields) < 2 or type(fields[0]) is not bytes or type(fields[1]) is not int:
            return
        name, count = fields[0], max(1, min(fields[1], MAX_BATCH))
        wait = fields[2] if len(fields) > 2 else WANTED_FOR_MS  # older disq: no wait
        if type(wait) is not int:
            return
        queue = self.node.queues.get(name)
        if queue is not None and queue.flags & PAUSED_OUT:
            return
        if len(fields) > 3:
            if type(fields[3]) is int:
                self._send_more_urgent(sender, name, queue, count, fields[3])
            return
        now = now_ms()
        if queue is None or not queue.jobs or queue.waiters or queue.import_rate_at(now):
            # Nothing to give now, or our own consumers wait on it, or we import it
            # ourselves (we send none of it then: Disque's rule against jobs bouncing
            # between nodes). Consumers wait there: push them what is queued meanwhile.
            if wait > 0:
                until = now + min(wait, WANTED_FOR_MS)
                self.wanted.setdefault(name, {})[sender.id] = (until, count)
                self.node.queue(name).remote_wanted = True
            return
        qlen = len(queue.jobs)
        if self.bus.can_send(sender.id):
            self._send(sender.id, queue, count if qlen >= 2 * count else max(1, qlen // 2))

    def _on_needjobs_cancel(self, sender: ClusterNode, fields: list[Any]) -> None:
        """The sender's consumers of that queue are gone: push it nothing more."""
        if not fields or type(fields[0]) is not bytes:
            return
        wanted = self.wanted.get(fields[0])
        if wanted is None or wanted.pop(sender.id, None) is None or wanted:
            return
        del self.wanted[fields[0]]
        queue = self.node.queues.get(fields[0])
        if queue is not None:
            queue.remote_wanted = False

    def jobs_available(self, queue: Queue, requeued: bool = False) -> None:
        """Jobs were queued here and no local consumer took them: push them to a node
        that asked for this queue recently, as many as it asked for, if it can be
        reached now (a job sent to a node that just died would wait for its RETRY
        there, and an at-most-once job would be lost). Not while consumers of ours
        wait on it (a paused or rate-limited queue).

        A node that imports this queue itself moves none of its new jobs on (they came
        for its own consumers), but a job requeued here (`requeued`: a NACK, a RETRY,
        the end of a back-off) while none of them waits goes to an asker, one job per
        requeue; the asker is kept for the next (until it cancels or its wait ends).
        Without this the job stayed here until this node stopped counting its imports
        (5 s), as an ask is not answered before."""
        wanted = self.wanted.get(queue.name)
        if wanted is None or queue.waiters:
            return
        now = now_ms()
        if queue.import_rate_at(now):
            if requeued:
                self._push_one(wanted, queue, now)
            return
        while wanted and queue.jobs:
            node_id, (until, count) = next(iter(wanted.items()))
            del wanted[node_id]
            if until >= now and self.bus.can_send(node_id):
                self._send(node_id, queue, count)
        if not wanted:
            self.wanted.pop(queue.name, None)
            queue.remote_wanted = False

    def _push_one(self, wanted: dict[str, tuple[int, int]], queue: Queue, now: int) -> None:
        """One queued job to the first asker still waiting that can be reached; the
        askers whose wait ended are forgotten."""
        for node_id, (until, _) in list(wanted.items()):
            if until < now:
                del wanted[node_id]
            elif self.bus.can_send(node_id):
                self._send(node_id, queue, 1)
                break
        if not wanted:
            self.wanted.pop(queue.name, None)
            queue.remote_wanted = False

    # -- priorities across nodes -------------------------------------------------------
    def best_changed(self, queue: Queue) -> None:
        """Tell the peers the most urgent priority queued here now (QBEST): a node
        whose consumers would take a less urgent job asks for these first."""
        queue.told_best = best = queue.best_priority()
        self.bus.broadcast(m.QBEST, queue.name, best)

    def want_more_urgent(self, queue: Queue, priority: int) -> None:
        """Ask the peers that said they hold jobs of `queue` more urgent than
        `priority` (this node's best) for those (NEEDJOBS with that priority); the
        hold on the consumers here ends when they come, or in the timer."""
        state = federation_of(queue)
        count = state.adhoc_attempt or REQUEST_COUNT
        wait = self._wait_ms(queue)
        for node_id, best in (state.peer_best or {}).items():
            if best < priority and self.bus.can_send(node_id):
                self.bus.send(node_id, m.NEEDJOBS, queue.name, count, wait, priority)
        self._arm()

    def _send_more_urgent(self, sender: ClusterNode, name: bytes, queue: Queue | None,
                          count: int, better_than: object) -> None:
        """A NEEDJOBS for jobs more urgent than `better_than`: send those, or say what
        our best is then (QBEST). None while our own consumers wait on the queue or we
        import it (they are for our consumers: we say we have none, so that the
        asker serves its own instead of waiting for them)."""
        if type(better_than) is not int or not self.bus.can_send(sender.id):
            return
        if queue is None or queue.waiters or queue.import_rate_at(now_ms()):
            self.bus.send(sender.id, m.QBEST, name, NO_PRIORITY)
            return
        if queue.best_priority() < better_than:
            self._send(sender.id, queue, count, better_than)
        if queue.best_priority() >= better_than:
            self.bus.send(sender.id, m.QBEST, name, queue.best_priority())

    def _on_qbest(self, sender: ClusterNode, fields: list[Any]) -> None:
        if (len(fields) < 2 or type(fields[0]) is not bytes or type(fields[1]) is not int
                or not 0 <= fields[1] <= NO_PRIORITY):
            return
        name, best = fields[0], fields[1]
        node = self.node
        queue = node.queues.get(name)
        if queue is None:
            if best >= NO_PRIORITY:
                return
            queue = node.queue(name)
        remote_best = federation_of(queue).set_peer_best(sender.id, best)
        if remote_best is not None:
            queue.remote_best = remote_best
            queue.hold_until = 0  # answered: ask again when it is more urgent again
        if queue.waiters:
            node.consumers.mark_ready(queue)  # what they were held for is gone or came

    def _send(self, node_id: str, queue: Queue, count: int,
              better_than: int = NO_PRIORITY + 1) -> None:
        """Move up to `count` queued jobs to `node_id`, in delivery order (the most
        urgent first, groups in turn: queue.py), as a local GETJOB would take them;
        only those more urgent than `better_than`. Bodies of m.FRAME_SPLIT bytes at
        most a message, a big one alone: a message is never split between frames, and
        a frame may not pass m.MAX_FRAME."""
        node = self.node
        now = now_ms()
        batch: list[list[Any]] = []
        body_bytes = 0
        for _ in range(min(count, MAX_BATCH)):
            if better_than <= NO_PRIORITY:
                head = queue.jobs.first()
                if head is None or job_priority(head) >= better_than:
                    break
            first = queue.jobs.first() if batch else None
            if first is not None and body_bytes + len(first.body or b"") > m.FRAME_SPLIT:
                break
            job = queue.jobs.pop_first()
            if job is None:
                break
            lifecycle.exported(job)
            queue.jobs_out += 1
            job.nodes_delivered = with_holders(job.nodes_delivered or node.only_me,
                                               (node_id,))
            batch.append(encode_job(job, node.id, now))
            body_bytes += len(job.body or b"")
            node.stats.jobs_exported += 1
            if job.retry == 0:
                node.unregister(job)  # at most once: the job lives on there only
            else:
                node.update_awake(job)
        if batch:
            self.bus.send(node_id, m.YOURJOBS, batch)
        if queue.told_best != NO_PRIORITY and queue.best_priority() > queue.told_best:
            self.best_changed(queue)  # after the jobs, on the same link


def federation_of(queue: Queue) -> QueueFederation:
    """What federation keeps of `queue`, made the first time it needs it."""
    state = queue.federation
    if state is None:
        queue.federation = state = QueueFederation()
    return state
