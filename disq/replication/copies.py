"""The copies of new jobs, as Disque makes them: REPLJOB to the targets (targets.py),
GOTJOB back, and the ADDJOBs that wait for their copies (synchronous replication). The
other side, the copies a peer sends here, is incoming.py's.

Waiting ADDJOBs are kept in a dict ordered by their next retry time; one loop timer
(every 50 ms, only while something waits) retries them and enforces their timeouts.
A copy may carry its ADDJOB's DEDUP key (dedup_checks.py, whose `Dedup` this part owns: the
copies record or check the key).
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Callable
from typing import Any, Final

from .. import errors, lifecycle
from ..cluster import messages as m
from ..cluster.membership import ClusterNode
from ..cluster.port import BusPort
from ..errors import DisqError
from ..history import shown_ext
from ..job import DELETED, NO_HOLDERS, WAIT_REPL, Job, with_holders
from ..node import Node, now_ms
from ..outcomes import Added, OnAdded
from ..requests import AddJob
from .acks import delete_everywhere
from .bigcopies import BIG_COPY, BigCopies
from .dedup_checks import CONFLICT, Dedup, joined
from .placement import Placements
from .targets import Targets, owner_key
from .wire import encode_copy

log = logging.getLogger("disq")


def _no_former_owner(queue: bytes, key: bytes) -> str | None:
    return None

ADD_NODE_PERIOD_MS: Final = 50  # a waiting ADDJOB tries one more node this often (Disque)
MAX_PATIENCE_MS: Final = 1000  # ...later when its nodes are slow to confirm (_targets_behind)
# ... and later by this much per 1,000 copies sent since a node's last confirmation
# (a node confirms 50k copies a second at the least, before counting as slow): one
# ADDJOBS of 5,000 jobs sends it thousands at once, which its first GOTJOB confirms.
BACKLOG_MS_PER_1000: Final = 20



class _WaitingAdd:
    """An ADDJOB waiting for its copies: the job, its timeout (0 = none), the next
    time to try one more node, and the server's callback once it has one."""

    __slots__ = ("job", "deadline", "next_try", "on_done", "external", "dedup_key",
                 "readd", "first", "seq", "sent", "big")

    def __init__(self, job: Job, deadline: int, next_try: int, external: bool) -> None:
        self.job = job
        self.deadline = deadline
        self.next_try = next_try
        self.on_done: OnAdded | None = None
        self.external = external  # no copy kept here: a confirmer queues it (leaving)
        self.dedup_key: bytes | None = None  # ADDJOB's DEDUP key, sent with REPLJOB
        # When the copies check the key (replication/dedup_checks.py): the ADDJOB, to add the
        # job again if a copy is refused.
        self.readd: AddJob | None = None
        # ... placed in the key's order: its first targets, which must confirm (`first_
        # confirmed`), else the ADDJOB asks every node as after a refusal
        self.first: list[str] | None = None
        self.seq = 0  # the waiting ADDJOBs are numbered in the order their copies left
        self.sent = 0  # when (ms)
        self.big: BigCopies | None = None  # a big body's copies (bigcopies.py)


def first_confirmed(first: list[str], confirmed: set[str]) -> bool:
    """Whether the first targets of a job whose copies check its DEDUP key in the key's
    order (`first`) all confirmed. The copies a killed origin left are on the first
    nodes of that order (replication/dedup_checks.py): only those nodes can refuse the
    retry's copies, so confirmations from the nodes tried next (one more every 50 ms,
    while a first one is dead, or slow to refuse) do not count, and the ADDJOB asks
    every node instead, as after a refusal. (The usual case: the first ones confirm.)"""
    for node_id in first:
        if node_id not in confirmed:
            return False
    return True


class Copies:
    """REPLJOB sent, GOTJOB, and the waiting ADDJOBs. `tick` is the periodic work; it runs
    on `loop` (or the running loop) by itself, and tests without a loop call it with
    their own clock."""

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
        self.targets = Targets(node, bus, loop)
        self.dedup = Dedup(self, loop)
        self.placements = Placements(bus)  # the ENQUEUEs of jobs placed elsewhere
        # (queue, ORDERKEY) -> the key's owner before a topology change this node saw
        # just now, if it is another (replication/orderkeys.py installs it)
        self.former_owner: Callable[[bytes, bytes], str | None] = _no_former_owner
        bus.on(m.GOTJOB, self._on_gotjob)

    # -- the server's side (through Replication) ----------------------------------------
    def wait(self, job: Job, on_done: OnAdded) -> None:
        """Answer the ADDJOB of `job` (WAIT_REPL) through `on_done(outcome)`, called
        exactly once: the job's ID once replicated, else a -NOREPL error."""
        waiting = self._waiting.get(job.id)
        if waiting is not None and waiting.job is job:
            waiting.on_done = on_done
        else:  # settled already (a bus that delivers in the same loop turn)
            on_done(self._outcome(job))

    def cancel_wait(self, job_id: bytes) -> None:
        """The client of a waiting ADDJOB went away. As Disque does, a job that is not
        replicated yet is deleted here and, best effort, everywhere: nobody got its ID."""
        waiting = self._waiting.pop(job_id, None)
        if waiting is not None and waiting.job.state == WAIT_REPL:
            delete_everywhere(self.node, self.bus, waiting.job)

    def tick(self, now: int | None = None) -> None:
        """Time out waiting ADDJOBs, and give the others one more node and a resend
        of REPLJOB to the nodes that did not confirm (every 50 ms). An ADDJOB is due
        at its next try or its deadline if sooner, so no structure orders deadlines:
        a timeout is noticed at the first tick after it. The ENQUEUEs of jobs placed
        elsewhere that were not answered are sent again (placement.py)."""
        if now is None:
            now = now_ms()
        if self.placements.pending:
            self.placements.tick(now)
        waiting = self._waiting
        reachable: set[str] | None = None  # the peers not failing, looked up once
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
                self._answer(entry, errors.NOREPL_TIMEOUT())
                delete_everywhere(self.node, self.bus, job)
                continue
            # An ADDJOB without a timeout would wait for ever for a failing target: it
            # answers now. One with a timeout waits it out, as Disque's does (its copies
            # are sent again to a target that comes back before the deadline).
            if not deadline:
                if reachable is None:
                    reachable = {n.id for n in self.bus.reachable_peers()}
                if self._out_of_nodes(entry, reachable):
                    self._answer(entry, errors.NOREPL())
                    delete_everywhere(self.node, self.bus, job)
                    continue
            retry_at = now + ADD_NODE_PERIOD_MS
            entry.next_try = deadline if deadline and deadline < retry_at else retry_at
            waiting[job.id] = entry  # to the end: ordered by next_try (to a tick or so)
            if not job.awake:
                self.node.update_awake(job)  # so that it can expire while waiting
            if entry.big is not None:
                self._resend_big(entry, entry.big, now)
            elif not self._targets_behind(entry, now):
                self._resend(job, now, entry.dedup_key, entry.readd is not None,
                             deadline)

    def close(self) -> None:
        self.dedup.close()
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    # -- the core's side (through Replication), DEDUP's --------------------------------
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
        ext = job.ext  # the key's order; an ORDERKEY's copies in its key's order (its
        if ext is not None and ext.orderkey is not None and readd is None:  # owner first)
            targets = self.targets.add(job, job.repl if external else job.repl - 1,
                                       owner_key(request.queue, ext.orderkey), True)
            former = self.former_owner(request.queue, ext.orderkey)
            if former is not None and former not in (job.nodes_delivered or ()):
                # A node that has not seen the change yet still acts for the key as
                # its owner: it gets the job too, or it could release a later job of
                # the key, placed by such a node, before this one
                job.nodes_delivered = with_holders(job.nodes_delivered or NO_HOLDERS,
                                                   (former,))
                targets = [*targets, former]
        else:
            targets = self.targets.add(job, job.repl if external else job.repl - 1,
                                       key if readd is not None else None)
        if not sync and external and targets:
            self._send_copies(job, now, True, targets, key)
            self.bus.send(random.choice(targets), m.ENQUEUE, job.id, job.delay)
            return
        deadline: int | None = None  # asynchronous: nothing can fail once copies left
        entry: _WaitingAdd | None = None
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
            if readd is not None and self.bus.cluster_size > job.repl + 1:  # (targets.py)
                entry.first = targets
            self._seq = entry.seq = self._seq + 1
            entry.sent = now
            self._waiting[job.id] = entry
            # The job gets its expiry timer if it still waits at the first retry (tick):
            # most are confirmed before, and would be scheduled twice.
            if self._timer is None:
                self._arm()
            body_len = len(job.body or b"")
            if body_len >= BIG_COPY:
                entry.big = BigCopies(body_len)
                targets = entry.big.ready(self.bus, targets, now)
        self._send_copies(job, now, not sync, targets, key, readd is not None, deadline)
        if entry is not None and entry.big is not None:
            entry.big.record(self.bus, targets, now)

    def send_copy(self, job: Job, node_id: str, now: int) -> None:
        """One more copy of a job held here, to `node_id` (NOREPLY): an ORDERKEY's owner
        that has none (replication/orderkeys.py)."""
        self._send_copies(job, now, True, [node_id])

    def abort_checked(self, job_id: bytes) -> None:
        """A node refused a copy of a waiting DEDUP ADDJOB (its copies check the key,
        or it is a late copy: replication/dedup_checks.py), or confirmed copies came from
        other nodes than the first ones in the key's order (`first_confirmed`):
        delete the job everywhere, and answer the ADDJOB with CONFLICT (the
        DEDUP side then asks every node)."""
        entry = self._waiting.get(job_id)
        if entry is None or entry.dedup_key is None or entry.job.state != WAIT_REPL:
            return  # replicated already (by other copies, all checked), or gone
        del self._waiting[job_id]
        delete_everywhere(self.node, self.bus, entry.job)
        self._answer(entry, CONFLICT())

    def job_dropped(self, job: Job) -> None:
        """A WAIT_REPL job is going away (expired, deleted) before it was replicated."""
        if job.id in self._waiting:
            self.settle(job, errors.NOREPL_EXPIRED())

    # -- bus messages -------------------------------------------------------------------
    def _on_gotjob(self, sender: ClusterNode, fields: list[Any]) -> None:
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
                if entry.first is not None and not first_confirmed(entry.first, confirmed):
                    self.abort_checked(job.id)
                    continue
                self._replicated(job, entry, now, settled)
        if settled:
            self.dedup.settled(settled)
        if last is not None and last.seq > progress[0]:  # the sender's pace
            progress[0] = last.seq
            progress[1] += (now - last.sent - progress[1]) // 4

    # -- helpers ------------------------------------------------------------------------
    @staticmethod
    def _out_of_nodes(entry: _WaitingAdd, reachable: set[str]) -> bool:
        """Whether the job can no longer get its REPLICATE copies: the nodes that
        confirmed, and the peers not flagged failing (PFAIL or FAIL: `reachable`) that
        have yet to, are fewer. A target that fails is replaced by another node if
        there is one (`_resend`); if not, an ADDJOB without a timeout (the only ones
        asked about) would wait for ever: it answers -NOREPL now, as when the nodes
        are missing from the start."""
        job = entry.job
        needed = job.repl
        if len(reachable) + (0 if entry.external else 1) >= needed:
            return False  # (this node confirmed its own copy)
        confirmed = job.nodes_confirmed or ()
        possible = len(confirmed)
        for node_id in reachable:
            if node_id not in confirmed:
                possible += 1
        return possible < needed

    def _targets_behind(self, entry: _WaitingAdd, now: int) -> bool:
        """Whether every node yet to confirm the job usually takes longer than this to
        confirm (deep pipelines: each copy waits behind thousands), or has more copies
        to go through since its last confirmation than it could have in that time (a
        big ADDJOBS), and confirmed no copy sent after this one: one more node would
        add load, not safety. Disque's "one more node every 50 ms" then starts at
        twice that usual time plus BACKLOG_MS_PER_1000 per 1,000 copies sent since
        (at most MAX_PATIENCE_MS more). A node that confirmed a later copy and not this
        one skipped it (a paused queue): another node is tried at once."""
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
            if seen is None or seen[0] >= entry.seq:
                return False
            # (copies sent to any node since, those sent to it among them)
            backlog_ms = (self._seq - seen[0]) * BACKLOG_MS_PER_1000 // 1000
            if waited > min(2 * seen[1] + backlog_ms, MAX_PATIENCE_MS) + ADD_NODE_PERIOD_MS:
                return False
        return True

    def _resend(self, job: Job, now: int, dedup_key: bytes | None = None,
                check: bool = False, deadline: int | None = None) -> None:
        """One more node, and REPLJOB again to the nodes that did not confirm. When a
        node was added the confirmed ones get it too (NOREPLY), to learn the new holder."""
        added = self.targets.add(job, 1, dedup_key if check else None)
        delivered, confirmed = job.nodes_delivered, job.nodes_confirmed
        assert delivered is not None and confirmed is not None
        self._send_copies(job, now, False, [i for i in delivered if i not in confirmed],
                          dedup_key, check, deadline)
        if added:
            self._send_copies(job, now, True, [i for i in confirmed if i != self.my_id],
                              dedup_key, check, deadline)

    def _resend_big(self, entry: _WaitingAdd, big: BigCopies, now: int) -> None:
        """`_resend` for a big body (bigcopies.py): one more node only when no copy was
        sent to a node yet to confirm in the last patience; a copy again only to the
        nodes `BigCopies.ready` lets have it."""
        job = entry.job
        delivered, confirmed = job.nodes_delivered, job.nodes_confirmed
        assert delivered is not None and confirmed is not None
        key = entry.dedup_key
        check = entry.readd is not None
        if big.may_add_node([i for i in delivered if i not in confirmed], entry.sent, now) and (
                self.targets.add(job, 1, key if check else None)):
            delivered = job.nodes_delivered
            assert delivered is not None  # the confirmed ones learn the new holder:
            self._send_copies(job, now, True, [i for i in confirmed if i != self.my_id],
                              key, check, entry.deadline)
        ready = big.ready(self.bus, [i for i in delivered if i not in confirmed], now)
        self._send_copies(job, now, False, ready, key, check, entry.deadline)
        big.record(self.bus, ready, now)

    def _send_copies(self, job: Job, now: int, noreply: bool, node_ids: list[str],
                     dedup_key: bytes | None = None, check: bool = False,
                     deadline: int | None = None) -> None:
        """REPLJOB to `node_ids`. The copies sent to a node in one loop turn with the
        same holders share one message, which lists the holders once. A DEDUP key
        goes at the end of its job's copy; for an ADDJOB that waits for its copies
        (`deadline`: when it gives up, 0 = never), then whether the receiver must check
        the key, and the ms until that deadline (0: none): the receiver does not vouch
        for the key before the ADDJOB settles (DEDUP_SETTLED; replication/dedup_checks.py)."""
        if not node_ids:
            return
        head = (noreply, job.nodes_delivered or NO_HOLDERS)  # a frozenset: packed as a list
        copy = encode_copy(job, now)
        if dedup_key is not None:
            ext = copy.pop() if shown_ext(job) is not None else None  # the extended fields end it
            copy.append(dedup_key)
            if deadline is not None:
                copy.append(check)
                copy.append(deadline - now if deadline > now else 1 if deadline else 0)
            if ext is not None:
                copy.append(ext)
        self.bus.send_batched(node_ids, m.REPLJOB, [copy], head)

    def _replicated(self, job: Job, entry: _WaitingAdd, now: int,
                    settled: list[Job] | None = None) -> None:
        """Enough copies: queue the job (or schedule it after its delay), answer. A job
        replicated externally is queued by one of the nodes that confirmed it.
        (`settled`: see `_answer`.)"""
        if entry.external:
            assert job.nodes_confirmed
            self.placements.place(job, job.nodes_confirmed, now)  # ENQUEUE, until answered
            self._arm()  # (running already: this job was waiting)
            job.nodes_confirmed = None
            lifecycle.not_kept(job)  # never registered here: the timers let it go
        else:
            job.nodes_confirmed = None
            self.node.activate(job, now)
        self._waiting.pop(job.id, None)  # settle(), inlined: `entry` is known
        self._answer(entry, job.id, settled)

    def settle(self, job: Job, outcome: Added) -> None:
        """The job's ADDJOB no longer waits: answer its client."""
        entry = self._waiting.pop(job.id, None)
        if entry is not None:
            self._answer(entry, outcome)

    def _outcome(self, job: Job) -> Added:
        """The ADDJOB outcome for a job that no longer waits, from what became of it."""
        if job.state != DELETED and self.node.lookup(job.id) is job:
            return job.id
        return errors.NOREPL_EXPIRED()

    def _answer(self, entry: _WaitingAdd, outcome: Added,
                settled: list[Job] | None = None) -> None:
        """Answer the waiting ADDJOB. A DEDUP job's holders are told it succeeded
        (DEDUP_SETTLED), or it joins `settled` for the caller to tell them."""
        if entry.dedup_key is not None and type(outcome) is bytes:
            if settled is None:
                self.dedup.settled((entry.job,))
            else:
                settled.append(entry.job)
        on_done, entry.on_done = entry.on_done, None
        if on_done is None:
            return
        if entry.readd is not None and isinstance(outcome, DisqError):  # its copies checked
            self.dedup.checked_add_failed(entry.job, entry.readd, on_done, outcome)  # a key
        else:
            on_done(outcome)

    def waiting_for(self, job_id: bytes) -> bool:
        """Whether the ADDJOB of `job_id` waits for its copies."""
        return job_id in self._waiting

    def join(self, job_id: bytes, on_done: OnAdded) -> bool:
        """`on_done` gets the outcome of the waiting ADDJOB of `job_id` too (another
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
                self._loop = self.targets.loop = asyncio.get_running_loop()
            except RuntimeError:
                return  # no loop (unit tests): whoever drives the node calls tick()
        self._timer = self._loop.call_later(ADD_NODE_PERIOD_MS / 1000, self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        try:
            self.tick()
        except Exception as exc:  # never let one bad job stop every waiting ADDJOB
            log.error("Error in the replication timer: %r", exc, exc_info=exc)
        if self._waiting or self.placements.pending:
            self._arm()

