"""Jobs across nodes, as Disque does them: synchronous and asynchronous replication
(REPLJOB / GOTJOB), requeue coordination (QUEUED, WILLQUEUE, WORKING, ENQUEUE), ACK
garbage collection (SETACK / GOTACK / DELJOB) and queue pauses (PAUSE).

`Replication` is the node's `ClusterPort`: the core calls it when something other
nodes must hear about, and it turns bus messages into calls on the core. It only uses
the narrow `BusPort`, so an in-memory bus can stand in for the network in tests.

Waiting ADDJOBs are kept in a dict ordered by their next retry time; one loop timer
(every 50 ms, only while something waits) retries them and enforces their timeouts.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import random
import zlib
from collections.abc import Callable, Iterable

from .. import errors
from ..cluster import messages as m
from ..cluster.membership import ClusterNode
from ..cluster.port import BusPort
from ..ids import is_valid_job_id
from ..job import (
    ACKED,
    ACTIVE,
    BCAST_QUEUED,
    DELETED,
    DELIVERED,
    NO_HOLDERS,
    QUEUED,
    WAIT_REPL,
    Job,
    holder_set,
    node_id_set,
    with_holders,
)
from ..node import INCR_DELIV, INCR_NACKS, Node, now_ms
from ..queue import PAUSED_ALL, PAUSED_IN, Queue
from ..requests import AddJob
from .dedup import (
    CONFLICT,
    REFUSED,
    SETTLE_SLACK_MS,
    Dedup,
    joined,
    key_order_salt,
    key_order_score,
)
from .federation import Federation
from .wire import (
    COPY_FIELDS,
    MAX_TTL_MS,
    MAX_U32,
    decode_copy,
    decode_holders,
    encode_copy,
)

log = logging.getLogger("disq")

ADD_NODE_PERIOD_MS = 50  # a waiting ADDJOB tries one more node this often (Disque)
MAX_PATIENCE_MS = 1000  # ...later when its nodes are slow to confirm (_targets_behind)
GLOBALQLEN_TIMEOUT_MS = 1000  # GLOBALQLEN answers with the nodes heard from by then

OnDone = Callable[[bytes], None]

_NOREPL_TIMEOUT = errors.NOREPL_TIMEOUT.REPLY
_NOREPL_EXPIRED = errors.NOREPL_EXPIRED.REPLY


class _WaitingAdd:
    """An ADDJOB waiting for its copies: the job, its timeout (0 = none), the next
    time to try one more node, and the server's callback once it has one."""

    __slots__ = ("job", "deadline", "next_try", "on_done", "external", "dedup_key",
                 "readd", "seq", "sent")

    def __init__(self, job: Job, deadline: int, next_try: int, external: bool) -> None:
        self.job = job
        self.deadline = deadline
        self.next_try = next_try
        self.on_done: OnDone | None = None
        self.external = external  # no copy kept here: a confirmer queues it (leaving)
        self.dedup_key: bytes | None = None  # ADDJOB's DEDUP key, sent with REPLJOB
        # When the copies check the key (replication/dedup.py): the ADDJOB, to add the
        # job again if a copy is refused.
        self.readd: AddJob | None = None
        self.seq = 0  # the waiting ADDJOBs are numbered in the order their copies left
        self.sent = 0  # when (ms)


class Replication:
    """The cluster side of the core (`node.cluster`). The server calls `wait` right
    after `Node.add_job` returns a WAIT_REPL job, and `cancel_wait` if that client
    goes away. `tick` is the periodic work; it runs on `loop` (or the running loop)
    by itself, and tests without a loop call it with their own clock."""

    def __init__(self, node: Node, bus: BusPort,
                 loop: asyncio.AbstractEventLoop | None = None) -> None:
        self.node = node
        self.bus = bus
        self.my_id = node.id
        self._loop = loop
        self._timer: asyncio.TimerHandle | None = None
        self._waiting: dict[bytes, _WaitingAdd] = {}  # ordered by next_try
        self._seq = 0  # the last _WaitingAdd.seq
        # peer -> [the highest seq of the copies it confirmed, its usual time to confirm
        # (ms, a moving average)]
        self._progress: dict[str, list[int]] = {}
        node.cluster = self
        handlers = {
            m.REPLJOB: self._on_repljob, m.GOTJOB: self._on_gotjob,
            m.ENQUEUE: self._on_enqueue, m.QUEUED: self._on_queued,
            m.WORKING: self._on_working, m.WILLQUEUE: self._on_willqueue,
            m.SETACK: self._on_setack, m.GOTACK: self._on_gotack,
            m.DELJOB: self._on_deljob, m.PAUSE: self._on_pause,
            m.QLEN_REQUEST: self._on_qlen_request, m.QLEN_REPLY: self._on_qlen_reply,
        }
        for mtype, handler in handlers.items():
            bus.on(mtype, handler)
        self.federation = Federation(node, bus, loop)
        # _add_targets' last answer: (peers, holders before, candidates, all holders,
        # [([candidate], holders with it), ...], {count: this loop turn's pick},
        # {targets in a DEDUP key's order: (targets, holders with them)})
        self._targets: tuple = (None, None, [], NO_HOLDERS, [], {}, {})
        self._salts: dict[str, int] = {}  # node ID -> key_order_salt(node ID)
        self.dedup = Dedup(self, loop)
        # GLOBALQLEN requests in flight: id -> [nodes yet to answer, sum, on_done]
        self._qlen_requests: dict[int, list] = {}
        self._qlen_request_id = 0
        self.size = bus.size  # type: ignore[method-assign]  # asked on every ADDJOB

    # -- the server's side ------------------------------------------------------------
    def wait(self, job: Job, on_done: OnDone) -> None:
        """Answer the ADDJOB of `job` (WAIT_REPL) through `on_done(reply)`, called
        exactly once: `+<id>` once replicated, else a -NOREPL error."""
        waiting = self._waiting.get(job.id)
        if waiting is not None and waiting.job is job:
            waiting.on_done = on_done
        else:  # settled already (a bus that delivers in the same loop turn)
            on_done(self._outcome(job))

    def global_qlen(self, queue: bytes, on_done: Callable[[int], None]) -> None:
        """GLOBALQLEN (a later Disque command): the sum of the queue's length on the
        other reachable nodes, through `on_done(sum)` once all answered or after
        GLOBALQLEN_TIMEOUT_MS (a node that does not answer counts for nothing)."""
        peers = [n.id for n in self.bus.reachable_peers() if self.bus.can_send(n.id)]
        if not peers:
            on_done(0)
            return
        self._qlen_request_id += 1
        request_id = self._qlen_request_id
        self._qlen_requests[request_id] = [set(peers), 0, on_done]
        for node_id in peers:
            self.bus.send(node_id, m.QLEN_REQUEST, request_id, queue)
        loop = self._loop or asyncio.get_running_loop()
        loop.call_later(GLOBALQLEN_TIMEOUT_MS / 1000, self._qlen_done, request_id)

    def _qlen_done(self, request_id: int) -> None:
        request = self._qlen_requests.pop(request_id, None)
        if request is not None:
            request[2](request[1])

    def cancel_wait(self, job_id: bytes) -> None:
        """The client of a waiting ADDJOB went away. As Disque does, a job that is not
        replicated yet is deleted here and, best effort, everywhere: nobody got its ID."""
        waiting = self._waiting.pop(job_id, None)
        if waiting is not None and waiting.job.state == WAIT_REPL:
            self._delete_everywhere(waiting.job)

    def tick(self, now: int | None = None) -> None:
        """Time out waiting ADDJOBs, and give the others one more node and a resend
        of REPLJOB to the nodes that did not confirm (every 50 ms). An ADDJOB is due
        at its next try or its deadline if sooner, so no structure orders deadlines:
        a timeout is noticed at the first tick after it."""
        if now is None:
            now = now_ms()
        waiting = self._waiting
        due: list[_WaitingAdd] = []
        for entry in waiting.values():
            if entry.next_try > now:
                break
            due.append(entry)
        for entry in due:
            job = entry.job
            if waiting.get(job.id) is not entry:
                continue
            del waiting[job.id]
            if job.state != WAIT_REPL:  # flushed, or acked by a client meanwhile
                self._answer(entry, self._outcome(job))
                continue
            deadline = entry.deadline
            if deadline and deadline <= now:
                self._answer(entry, _NOREPL_TIMEOUT)
                self._delete_everywhere(job)
                continue
            retry_at = now + ADD_NODE_PERIOD_MS
            entry.next_try = deadline if deadline and deadline < retry_at else retry_at
            waiting[job.id] = entry  # to the end: ordered by next_try (to a tick or so)
            if not job.awake:
                self.node.update_awake(job)  # so that it can expire while waiting
            if not self._targets_behind(entry, now):
                self._resend(job, now, entry.dedup_key, entry.readd is not None,
                             deadline)

    def close(self) -> None:
        self.dedup.close()
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    # -- ClusterPort: what the core tells the cluster -----------------------------------
    def identity_changed(self) -> None:
        """The node took a new ID (CLUSTER RESET HARD): copies carry the new one."""
        self.my_id = self.node.id

    def size(self) -> int:
        return self.bus.size()

    def reachable_peers(self) -> int:
        return len(self.bus.reachable_peers())

    def replicate(self, job: Job, request: AddJob, sync: bool,
                  external: bool = False, now: int = 0) -> None:
        """REPLJOB to REPLICATE-1 random reachable nodes (REPLICATE when `external`: this
        node keeps no copy; the first ones in the key's order when the copies check a
        DEDUP key). Synchronous: the job stays WAIT_REPL until enough GOTJOBs;
        asynchronous: fire and forget (NOREPLY), and an external job is queued by one
        of its targets (ENQUEUE)."""
        now = now or now_ms()
        key = request.dedup  # DEDUP: the copies record the key
        readd = request if request.dedup_check else None  # ... and check it: placed in
        targets = self._add_targets(job, job.repl if external else job.repl - 1,  # the
                                    key if readd is not None else None)  # key's order
        if not sync and external and targets:
            self._send_copies(job, now, True, targets, key)
            self.bus.send(random.choice(targets), m.ENQUEUE, job.id, job.delay)
            return
        deadline: int | None = None  # asynchronous: nothing can fail once copies left
        if sync:
            # A plain set: it lives until the copies are confirmed (then it is None).
            job.nodes_confirmed = set() if external else {self.my_id}
            timeout_ms = request.timeout
            deadline = now + timeout_ms if timeout_ms else 0
            retry_at = now + ADD_NODE_PERIOD_MS
            entry = _WaitingAdd(job, deadline, deadline if 0 < deadline < retry_at else retry_at,
                                external)
            entry.dedup_key = key
            entry.readd = readd
            self._seq = entry.seq = self._seq + 1
            entry.sent = now
            self._waiting[job.id] = entry
            # The job gets its expiry timer if it still waits at the first retry (tick):
            # most are confirmed before, and would be scheduled twice.
            if self._timer is None:
                self._arm()
        self._send_copies(job, now, not sync, targets, key, readd is not None, deadline)

    def abort_checked(self, job_id: bytes) -> None:
        """A node refused a copy of a waiting ADDJOB whose copies check its DEDUP key:
        delete the job everywhere, and answer the ADDJOB with dedup.CONFLICT (the DEDUP
        side then asks every node)."""
        entry = self._waiting.get(job_id)
        if entry is None or entry.readd is None or entry.job.state != WAIT_REPL:
            return  # replicated already (by other copies, all checked), or gone
        del self._waiting[job_id]
        self._delete_everywhere(entry.job)
        self._answer(entry, CONFLICT)

    def job_queued(self, job: Job, flags: int) -> None:
        if job.nodes_delivered:
            self.bus.broadcast(m.QUEUED, job.id, flags, node_ids=job.nodes_delivered)

    def send_willqueue(self, job: Job) -> None:
        if job.nodes_delivered:
            self.bus.broadcast(m.WILLQUEUE, job.id, node_ids=job.nodes_delivered)

    def job_working(self, job: Job) -> None:
        if job.nodes_delivered:
            self.bus.broadcast(m.WORKING, job.id, node_ids=job.nodes_delivered)

    def start_gc(self, job: Job) -> None:
        """SETACK to every node that may have a copy and did not confirm the ACK yet;
        a dummy ACK (no holder known) asks every node that did not answer yet."""
        delivered = job.nodes_delivered
        confirmed = job.nodes_confirmed or ()
        targets = delivered if delivered else self.bus.known_ids()
        self.bus.broadcast(m.SETACK, job.id, len(delivered or ()),
                           node_ids=[i for i in targets if i not in confirmed])

    def fast_ack(self, job_id: bytes, job: Job | None) -> None:
        if job is None:
            self.bus.broadcast(m.DELJOB, job_id)
            return
        if job.state == WAIT_REPL:
            self.job_dropped(job)
        if job.nodes_delivered:
            self.bus.broadcast(m.DELJOB, job.id, node_ids=job.nodes_delivered)

    def pause(self, queue: bytes, flags: int) -> None:
        self.bus.broadcast(m.PAUSE, queue, flags)

    def need_jobs(self, queue: Queue) -> None:
        self.federation.need_jobs(queue)

    def jobs_not_needed(self, queue: Queue) -> None:
        self.federation.jobs_not_needed(queue)

    def jobs_available(self, queue: Queue) -> None:
        self.federation.jobs_available(queue)

    def job_dropped(self, job: Job) -> None:
        """A WAIT_REPL job is going away (expired, deleted) before it was replicated."""
        self._settle(job, _NOREPL_EXPIRED)

    # -- bus messages -------------------------------------------------------------------
    def _on_repljob(self, sender: ClusterNode, fields: list) -> None:
        """Keep copies (active, not queued) and confirm them with one GOTJOB, unless
        leaving or the queue is paused in input. A copy held already only learns the
        new nodes. `fields`: noreply, the holders of every job of the message, jobs."""
        node = self.node
        if (len(fields) < 3 or type(fields[0]) is not bool or node.leaving
                or node.memory_level > 0):  # no new copies: leaving or short of memory
            return
        holders = decode_holders(fields[1], self.bus.known_id_map(), sender.id, self.my_id)
        if holders is None:
            log.warning("Received corrupted job holders from node %s", sender.id)
            return
        noreply: bool = fields[0]
        now = now_ms()
        queues = node.queues
        confirmed: list[bytes] = []
        refused: list[bytes] = []  # copies whose DEDUP key another job may have
        dedup_table = node.dedup
        names: dict[bytes, bytes] = {}  # one queue name object per message...
        etime = 0  # ...and one expiry int for a burst (32 bytes a job each)
        for data in fields[2:]:
            job = decode_copy(data, now)
            if job is None:
                log.warning("Received a corrupted job from node %s", sender.id)
                continue
            job.nodes_delivered = holders
            job.queue = names.setdefault(job.queue, job.queue)  # type: ignore[arg-type]
            if job.etime == etime:
                job.etime = etime
            else:
                etime = job.etime
            key = self.dedup.copy_key(data, job, now) if len(data) > COPY_FIELDS else None
            if key is REFUSED:
                refused.append(job.id)
                continue
            queue = queues.get(job.queue)
            if queue is not None and queue.flags & PAUSED_IN:
                mine = node.lookup(job.id)  # a paused queue takes no new copy
                if mine is None:
                    continue
            elif node.store_copy(job, now):  # new here: one table operation, no lookup
                mine = None
            else:
                mine = node.lookup(job.id)
            if key is not None:  # ADDJOB had DEDUP: the key lives as long as the job
                if len(data) > COPY_FIELDS + 2:  # its ADDJOB may still fail: unsettled
                    # until DEDUP_SETTLED, or SETTLE_SLACK_MS after the ADDJOB's timeout
                    # (the ms left it sent; 0: none, then until the job expires)
                    left = data[COPY_FIELDS + 2]
                    dedup_table.record_unsettled(
                        key, job.id, job.etime,
                        now + left + SETTLE_SLACK_MS if type(left) is int and 0 < left
                        <= MAX_TTL_MS else job.etime)
                else:
                    dedup_table.record(key, job.id, job.etime)
            if mine is not None:
                self._learn_holders(mine, holders)
                if mine.state == ACKED:  # tell the sender instead: it must not come back
                    self._send_setack(sender.id, mine)
                    continue
            if not noreply:
                confirmed.append(job.id)
        if refused:
            self.bus.send_batched((sender.id,), m.DEDUP_CONFLICT, refused)
        if not confirmed:
            return
        aof = node.aof
        if aof is None:
            self.bus.send_batched((sender.id,), m.GOTJOB, confirmed)
        else:  # confirmed once the copies are as safe as the AOF policy promises
            # (Disque writes, and with appendfsync always fsyncs, its AOF before the
            # GOTJOB leaves: both happen before its event loop writes to sockets)
            sender_id = sender.id
            aof.on_durable(lambda: self.bus.send_batched((sender_id,), m.GOTJOB, confirmed))

    def _on_gotjob(self, sender: ClusterNode, fields: list) -> None:
        """Confirmations of copies: every job still waiting for them is in `_waiting`
        (a small table, cheaper than the job store; it also holds the jobs replicated
        externally, which the store does not)."""
        waiting = self._waiting
        now = now_ms()
        sender_id = sender.id
        progress = self._progress.get(sender_id)
        if progress is None:
            progress = self._progress[sender_id] = [0, 0]
        last: _WaitingAdd | None = None
        settled: list[Job] = []  # DEDUP jobs replicated: one DEDUP_SETTLED per holder set
        for job_id in fields:
            entry = waiting.get(job_id) if type(job_id) is bytes else None
            if entry is None:
                continue
            last = entry
            job = entry.job
            if job.state != WAIT_REPL:
                continue
            delivered, confirmed = job.nodes_delivered, job.nodes_confirmed
            if delivered is None or confirmed is None:
                continue  # never: replicate() gave the waiting job both
            if sender_id not in delivered:  # a node added by a retry
                job.nodes_delivered = with_holders(delivered, (sender_id,))
            confirmed.add(sender_id)
            if len(confirmed) >= job.repl:
                self._replicated(job, entry, now, settled)
        if settled:
            self.dedup.settled(settled)
        if last is not None and last.seq > progress[0]:  # the sender's pace
            progress[0] = last.seq
            progress[1] += (now - last.sent - progress[1]) // 4

    def _on_qlen_request(self, sender: ClusterNode, fields: list) -> None:
        if len(fields) >= 2 and type(fields[0]) is int and type(fields[1]) is bytes:
            self.bus.send(sender.id, m.QLEN_REPLY, fields[0], self.node.qlen(fields[1]))

    def _on_qlen_reply(self, sender: ClusterNode, fields: list) -> None:
        if len(fields) < 2 or type(fields[0]) is not int or type(fields[1]) is not int:
            return
        request = self._qlen_requests.get(fields[0])
        if request is None or sender.id not in request[0]:
            return  # answered already, timed out, or not asked
        request[0].discard(sender.id)
        request[1] += max(0, fields[1])
        if not request[0]:
            self._qlen_done(fields[0])

    def _on_enqueue(self, sender: ClusterNode, fields: list) -> None:
        """Queue a copy now, or after `delay` seconds (sent by a node that replicated
        a job without keeping it). This node becomes its first queuer: no QUEUED."""
        job = self._job_in(fields)
        if job is None or job.state != ACTIVE or len(fields) < 2:
            return
        delay = fields[1]
        if type(delay) is not int or not 0 <= delay <= MAX_U32:
            return
        queue = self.node.queues.get(job.queue)
        if queue is not None and queue.flags & PAUSED_IN:
            return
        job.flags &= ~BCAST_QUEUED
        now = now_ms()
        if job.qtime == 0 and job.retry == 0 and not job.flags & DELIVERED:
            job.qtime = now  # an at-most-once copy never queued: it may be, once
        if delay:
            job.qtime = now + delay * 1000
            self.node.update_awake(job)
        else:
            self.node.enqueue(job, nack=False, now=now)

    def _on_queued(self, sender: ClusterNode, fields: list) -> None:
        job = self._job_in(fields)
        if job is None or len(fields) < 2:
            return
        flags = fields[1]
        if type(flags) is not int or not 0 <= flags <= 0xFF:
            return
        self._queued_elsewhere(sender, job, flags, working=False)

    def _on_working(self, sender: ClusterNode, fields: list) -> None:
        job = self._job_in(fields)
        if job is not None:
            self._queued_elsewhere(sender, job, 0, working=True)

    def _queued_elsewhere(self, sender: ClusterNode, job: Job, flags: int,
                          working: bool) -> None:
        """QUEUED / WORKING from another node: requeue here only after another RETRY.
        A copy queued here too leaves the queue on WORKING, or on QUEUED when the
        sender wins `sender_wins`, so that concurrent requeues leave one copy queued."""
        state = job.state
        if state == ACTIVE or state == QUEUED:
            if state == QUEUED and (working or sender_wins(sender.id, self.my_id, job.id)):
                self.node.dequeue(job)
            self.node.postpone_requeue(job)
            if flags & INCR_NACKS:
                job.nacks += 1
            if flags & INCR_DELIV:
                job.deliveries += 1
        elif state == ACKED:
            self._send_setack(sender.id, job)

    def _on_willqueue(self, sender: ClusterNode, fields: list) -> None:
        """The sender will requeue its copy in 500 ms: if ours is queued, say so (it
        postpones); if it is acked here, tell it (it acks too)."""
        job = self._job_in(fields)
        if job is None:
            return
        if job.state == ACTIVE or job.state == QUEUED:
            self._learn_holders(job, (sender.id,))
            if job.state == QUEUED:
                self.bus.broadcast(m.QUEUED, job.id, 0, node_ids=job.nodes_delivered)
        elif job.state == ACKED:
            self._send_setack(sender.id, job)

    def _on_setack(self, sender: ClusterNode, fields: list) -> None:
        """Mark the job acked and answer GOTACK, unless this node knows more nodes that
        may hold a copy than the sender does: then it runs the GC itself."""
        parsed = self._id_and_count(fields)
        if parsed is None:
            return
        job_id, may_have = parsed
        node = self.node
        job = node.lookup(job_id)
        if job is not None:
            if job.state == WAIT_REPL:  # acked before it was replicated: it was
                self._settle(job, b"+" + job.id + b"\r\n")
            if node.acknowledge(job):
                node.schedule_gc(job)  # in case the sender never finishes its GC
        if job is None or _holder_count(job) <= may_have:
            self.bus.send(sender.id, m.GOTACK, job_id, _has_job(job))
        else:
            if may_have == 0:  # the sender has a dummy ACK: it may forget it now
                self.bus.send(sender.id, m.GOTACK, job_id, True)
            node.try_gc(job)

    def _on_gotack(self, sender: ClusterNode, fields: list) -> None:
        """A node confirmed our SETACK. Normal job: once every node that may hold a copy
        confirmed, DELJOB to all of them and delete. Dummy ACK: delete as soon as a
        node knows the job (it runs the GC), or once every node said it does not."""
        if len(fields) < 2 or type(fields[1]) is not bool:
            return
        job = self._job_in(fields)
        if job is None or job.state != ACKED or job.nodes_delivered is None:
            return
        known: bool = fields[1]
        delivered = job.nodes_delivered
        if job.nodes_confirmed is None:  # a SETACK sent outside of a GC attempt
            job.nodes_confirmed = node_id_set((self.my_id,))
        confirmed = job.nodes_confirmed
        if not delivered:  # dummy ACK
            if known:
                self.node.unregister(job)
                return
            confirmed.add(sender.id)
            if confirmed.issuperset(self.bus.known_ids()):
                self.node.unregister(job)
            return
        if known or sender.id in delivered:
            job.nodes_delivered = delivered = with_holders(delivered, (sender.id,))
            confirmed.add(sender.id)
        if confirmed >= delivered:
            self._delete_everywhere(job)

    def _on_deljob(self, sender: ClusterNode, fields: list) -> None:
        job = self._job_in(fields)
        if job is not None:
            if job.state == WAIT_REPL:
                self.job_dropped(job)
            self.node.unregister(job)

    def _on_pause(self, sender: ClusterNode, fields: list) -> None:
        if len(fields) < 2:
            return
        queue, flags = fields[0], fields[1]
        if type(queue) is bytes and type(flags) is int and 0 <= flags <= PAUSED_ALL:
            self.node.set_pause(queue, flags, broadcast=False)

    # -- helpers ------------------------------------------------------------------------
    def _add_targets(self, job: Job, count: int, key: bytes | None = None) -> list[str]:
        """Add up to `count` random reachable nodes that do not hold the job yet to
        its `nodes_delivered`; returns them (a list that may be shared: read only).
        The jobs of one loop turn get the same random pick: their copies travel in
        one REPLJOB per target and come back confirmed together, so the replies to a
        client's pipeline leave in one write (a pick per job spread them over the
        GOTJOBs of several peers). Over many turns the load is spread as evenly.
        With the DEDUP `key` its copies check, the first nodes in the key's order
        instead when the cluster has more than REPLICATE+1 nodes (`_first_in_key_order`)."""
        delivered = job.nodes_delivered
        if delivered is None:
            job.nodes_delivered = delivered = self.node.only_me
        if count <= 0:
            return []
        peers = self.bus.reachable_peers()  # a new list when the topology changes
        cached = self._targets
        if cached[0] is peers and cached[1] is delivered:  # a new job, as the last one
            candidates, everyone, one_more, picks, in_key_order = cached[2:]
        else:
            candidates = [n.id for n in peers if n.id not in delivered]
            everyone = holder_set(delivered.union(candidates))
            one_more = [([i], holder_set(delivered.union((i,)))) for i in candidates]
            picks = {}
            in_key_order = {}
            self._targets = (peers, delivered, candidates, everyone, one_more, picks,
                             in_key_order)
        n = len(candidates)
        if count >= n:  # all of them (REPLICATE 3 on three nodes)
            if candidates:
                job.nodes_delivered = everyone
            return candidates
        if key is not None and self.size() > job.repl + 1:  # (see _first_in_key_order)
            return self._first_in_key_order(job, count, key, candidates, one_more,
                                            in_key_order)
        pick = picks.get(count)
        if pick is None:
            if count == 1:  # REPLICATE 2, or one more node for a waiting job
                pick = one_more[int(random.random() * n)]
            else:
                chosen = random.sample(candidates, count)
                pick = (chosen, holder_set(delivered.union(chosen)))
            if self._loop is not None:  # kept until the end of this loop turn
                picks[count] = pick
                self._loop.call_soon(picks.clear)
        targets, job.nodes_delivered = pick
        return targets

    def _first_in_key_order(self, job: Job, count: int, key: bytes, candidates: list[str],
                            one_more: list[tuple[list[str], frozenset[str]]],
                            in_key_order: dict[tuple[str, ...], tuple]) -> list[str]:
        """`_add_targets` for a job whose copies check its DEDUP key: the `count`
        candidates first in the key's order (rendezvous hashing, dedup.key_order), the
        same on every node. An origin killed while its copies were leaving leaves them
        on the first nodes of that order (but itself and the nodes it could not
        reach); a retry of the key on another node sends its copies to the same first
        nodes, and one more in that order each time it waits for a node (the dead
        origin), so they meet those copies, which refuse them: the retry then asks
        every node and gets the first job's ID (replication/dedup.py). Used when
        the cluster has more than REPLICATE+1 nodes: with fewer (REPLICATE 2 on
        three nodes), a retry's job needs every live peer but the dead origin, so
        the random pick of the loop turn stays (its copies travel together)."""
        salts = self._salts
        key_hash = zlib.crc32(key)
        if count == 1:  # REPLICATE 2, or one more node for a waiting job
            best, best_score = 0, -1
            for index, node_id in enumerate(candidates):
                salt = salts.get(node_id)
                score = key_order_score(key_hash, self._salt(node_id) if salt is None else salt)
                if score > best_score:
                    best, best_score = index, score
            targets, job.nodes_delivered = one_more[best]
            return targets
        scored = []
        for node_id in candidates:
            salt = salts.get(node_id)
            scored.append((key_order_score(key_hash, self._salt(node_id) if salt is None
                                           else salt), node_id))
        scored.sort(reverse=True)
        chosen = tuple(node_id for _, node_id in scored[:count])
        pick = in_key_order.get(chosen)
        if pick is None:
            delivered = job.nodes_delivered
            assert delivered is not None
            pick = in_key_order[chosen] = (list(chosen), holder_set(delivered.union(chosen)))
        targets, job.nodes_delivered = pick
        return targets

    def _salt(self, node_id: str) -> int:
        salts = self._salts
        if len(salts) >= 4096:  # node IDs come and go (CLUSTER RESET, FORGET): bounded
            salts.clear()
        salts[node_id] = salt = key_order_salt(node_id)
        return salt

    def _targets_behind(self, entry: _WaitingAdd, now: int) -> bool:
        """Whether every node yet to confirm the job usually takes longer than this to
        confirm (deep pipelines: each copy waits behind thousands), and confirmed no
        copy sent after this one: one more node would add load, not safety. Disque's
        "one more node every 50 ms" then starts at twice that usual time (at most
        MAX_PATIENCE_MS more). A node that confirmed a later copy and not this one
        skipped it (a paused queue): another node is tried at once."""
        job = entry.job
        confirmed = job.nodes_confirmed
        if not job.nodes_delivered or confirmed is None:
            return False
        waited = now - entry.sent
        progress = self._progress
        for node_id in job.nodes_delivered:
            if node_id in confirmed:
                continue
            seen = progress.get(node_id)
            if seen is None or seen[0] >= entry.seq or (
                    waited > min(2 * seen[1], MAX_PATIENCE_MS) + ADD_NODE_PERIOD_MS):
                return False
        return True

    def _resend(self, job: Job, now: int, dedup_key: bytes | None = None,
                check: bool = False, deadline: int | None = None) -> None:
        """One more node, and REPLJOB again to the nodes that did not confirm. When a
        node was added the confirmed ones get it too (NOREPLY), to learn the new holder."""
        added = self._add_targets(job, 1, dedup_key if check else None)
        delivered, confirmed = job.nodes_delivered, job.nodes_confirmed
        assert delivered is not None and confirmed is not None
        self._send_copies(job, now, False, [i for i in delivered if i not in confirmed],
                          dedup_key, check, deadline)
        if added:
            self._send_copies(job, now, True, [i for i in confirmed if i != self.my_id],
                              dedup_key, check, deadline)

    def _send_copies(self, job: Job, now: int, noreply: bool, node_ids: list[str],
                     dedup_key: bytes | None = None, check: bool = False,
                     deadline: int | None = None) -> None:
        """REPLJOB to `node_ids`. The copies sent to a node in one loop turn with the
        same holders share one message, which lists the holders once. A DEDUP key
        goes at the end of its job's copy; for an ADDJOB that waits for its copies
        (`deadline`: when it gives up, 0 = never), then whether the receiver must check
        the key, and the ms until that deadline (0: none): the receiver does not vouch
        for the key before the ADDJOB settles (DEDUP_SETTLED; replication/dedup.py)."""
        if not node_ids:
            return
        head = (noreply, job.nodes_delivered or NO_HOLDERS)  # a frozenset: packed as a list
        copy = encode_copy(job, now)
        if dedup_key is not None:
            copy.append(dedup_key)
            if deadline is not None:
                copy.append(check)
                copy.append(deadline - now if deadline > now else 1 if deadline else 0)
        self.bus.send_batched(node_ids, m.REPLJOB, [copy], head)

    def _replicated(self, job: Job, entry: _WaitingAdd, now: int,
                    settled: list[Job] | None = None) -> None:
        """Enough copies: queue the job (or schedule it after its delay), answer. A job
        replicated externally is queued by one of the nodes that confirmed it.
        (`settled`: see `_answer`.)"""
        if entry.external:
            assert job.nodes_confirmed
            self.bus.send(next(iter(job.nodes_confirmed)), m.ENQUEUE, job.id, job.delay)
            job.nodes_confirmed = None
            job.state = DELETED  # never registered here: the timers let it go
        else:
            job.nodes_confirmed = None
            self.node.activate(job, now)
        self._waiting.pop(job.id, None)  # _settle(), inlined: `entry` is known
        self._answer(entry, b"+" + job.id + b"\r\n", settled)

    def _settle(self, job: Job, reply: bytes) -> None:
        """The job's ADDJOB no longer waits: answer its client."""
        entry = self._waiting.pop(job.id, None)
        if entry is not None:
            self._answer(entry, reply)

    def _outcome(self, job: Job) -> bytes:
        """The ADDJOB reply for a job that no longer waits, from what became of it."""
        if job.state != DELETED and self.node.lookup(job.id) is job:
            return b"+" + job.id + b"\r\n"
        return _NOREPL_EXPIRED

    def _delete_everywhere(self, job: Job) -> None:
        """DELJOB to every node that may hold a copy (best effort), delete it here."""
        if job.nodes_delivered:
            self.bus.broadcast(m.DELJOB, job.id, node_ids=job.nodes_delivered)
        self.node.unregister(job)

    def _learn_holders(self, job: Job, node_ids: Iterable[str]) -> None:
        delivered = job.nodes_delivered
        if delivered is None:
            delivered = self.node.only_me
        elif not delivered and job.state == ACKED:
            job.nodes_confirmed = None  # a dummy ACK found holders: a fresh GC round
        job.nodes_delivered = with_holders(delivered, node_ids)

    def _send_setack(self, node_id: str, job: Job) -> None:
        self.bus.send(node_id, m.SETACK, job.id, _holder_count(job))

    def _job_in(self, fields: list) -> Job | None:
        """The job named by a message's first field, if valid and known here."""
        if not fields:
            return None
        job_id = fields[0]
        if type(job_id) is not bytes or not is_valid_job_id(job_id):
            return None
        return self.node.lookup(job_id)

    @staticmethod
    def _id_and_count(fields: list) -> tuple[bytes, int] | None:
        if len(fields) < 2:
            return None
        job_id, count = fields[0], fields[1]
        if (type(job_id) is not bytes or not is_valid_job_id(job_id)
                or type(count) is not int or not 0 <= count <= MAX_U32):
            return None
        return job_id, count

    def _answer(self, entry: _WaitingAdd, reply: bytes,
                settled: list[Job] | None = None) -> None:
        """Answer the waiting ADDJOB. A DEDUP job's holders are told it succeeded
        (DEDUP_SETTLED), or it joins `settled` for the caller to tell them."""
        if entry.dedup_key is not None and reply[:1] == b"+":
            if settled is None:
                self.dedup.settled((entry.job,))
            else:
                settled.append(entry.job)
        on_done, entry.on_done = entry.on_done, None
        if on_done is None:
            return
        if entry.readd is not None and reply[:1] != b"+":  # its copies checked a key
            self.dedup.checked_add_failed(entry.job, entry.readd, on_done, reply)
        else:
            on_done(reply)

    def waiting_for(self, job_id: bytes) -> bool:
        """Whether the ADDJOB of `job_id` waits for its copies."""
        return job_id in self._waiting

    def join(self, job_id: bytes, on_done: OnDone) -> bool:
        """`on_done` gets the reply of the waiting ADDJOB of `job_id` too (another
        ADDJOB of its DEDUP key on this node). False if it waits no more."""
        entry = self._waiting.get(job_id)
        if entry is None or entry.on_done is None:
            return False
        entry.on_done = joined(entry.on_done, on_done)
        return True

    def _arm(self) -> None:
        if self._timer is not None:
            return
        if self._loop is None:
            try:
                self._loop = asyncio.get_running_loop()
            except RuntimeError:
                return  # no loop (unit tests): whoever drives the node calls tick()
        self._timer = self._loop.call_later(ADD_NODE_PERIOD_MS / 1000, self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        try:
            self.tick()
        except Exception as exc:  # never let one bad job stop every waiting ADDJOB
            log.error("Error in the replication timer: %r", exc, exc_info=exc)
        if self._waiting:
            self._arm()


def _has_job(job: Job | None) -> bool:
    """GOTACK's "known". A dummy ACK here knows nothing of the job: answering "known"
    would let two dummy ACKs delete each other while the real holders are unreachable
    (Disque answers "known" for any job; disq answers for real ones only)."""
    return job is not None and (job.body is not None or bool(job.nodes_delivered))


def _holder_count(job: Job) -> int:
    """How many nodes may hold the job, as far as this node knows (SETACK's aux)."""
    return len(job.nodes_delivered) if job.nodes_delivered is not None else 1


def sender_wins(sender_id: str, my_id: str, job_id: bytes) -> bool:
    """Which of two nodes keeps a job both queued (Disque's compareNodeIDsByJob, as
    disq defines it): each node ID, read as a 160-bit number, is XORed with a 160-bit
    mask drawn from the job ID (BLAKE2b of the ID); the larger result wins. Every node
    computes the same order for a job, and the order changes from job to job, so no
    node always wins. True if the sender's copy stays queued rather than mine."""
    mask = int.from_bytes(hashlib.blake2b(job_id, digest_size=20).digest(), "big")
    return (_node_number(sender_id) ^ mask) > (_node_number(my_id) ^ mask)


def _node_number(node_id: str) -> int:
    try:
        return int(node_id, 16)
    except ValueError:  # not hex: still a deterministic number
        return int.from_bytes(hashlib.blake2b(node_id.encode(), digest_size=20).digest(),
                              "big")
