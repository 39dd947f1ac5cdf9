"""Requeue coordination, as Disque does it: a node that queues a job tells the other
holders (QUEUED), one about to requeue it asks first (WILLQUEUE), one delivering it
again says it works on it (WORKING), and a node that replicated a job without keeping
it has one holder queue it (ENQUEUE).

disq's additions: a QUEUED for a job waiting for a back-off says when it
will be queued (the holders postpone their requeue to RETRY after that, so a holder
taking over still honours the back-off), and QUEUED / WILLQUEUE carry the generation
of the sender's copy (a dead letter's moves, failures.py): a holder whose copy is
newer answers with its state (JOBMOVE), one whose copy is older asks for it
(JOBMOVE_ASK), so a holder that missed a move catches up. A QUEUED for a NACK ...
ERROR carries the error, and a WORKING ... PROGRESS / DATA the progress (extra fields
an older node ignores): the holders keep them with their copies.
"""

from __future__ import annotations

import hashlib
from typing import Any

from ..cluster import messages as m
from ..cluster.membership import ClusterNode
from ..cluster.port import BusPort
from ..ids import is_valid_job_id
from ..job import (
    ACKED,
    ACTIVE,
    BCAST_QUEUED,
    DELIVERED,
    MAX_PROGRESS,
    MAX_PROGRESS_DATA,
    MIN_PROGRESS,
    NO_PROGRESS,
    PLACED,
    PROVISIONAL,
    QUEUED,
    Job,
    JobError,
    job_notes,
)
from ..node import INCR_DELIV, INCR_NACKS, Node, now_ms
from ..queue import PAUSED_IN
from .acks import job_in, learn_holders, send_setack
from .clock import to_local_ms
from .wire import MAX_DUE_MS, MAX_GENERATION, MAX_U32, decode_error


class Requeue:
    """ENQUEUE / QUEUED / WORKING / WILLQUEUE, and what the core tells of them."""

    def __init__(self, node: Node, bus: BusPort) -> None:
        self.node = node
        self.bus = bus
        bus.on(m.ENQUEUE, self._on_enqueue)
        bus.on(m.QUEUED, self._on_queued)
        bus.on(m.WORKING, self._on_working)
        bus.on(m.WILLQUEUE, self._on_willqueue)
        bus.on(m.JOBMOVE_ASK, self._on_jobmove_ask)

    # -- what the core tells the cluster ------------------------------------------------
    def job_queued(self, job: Job, flags: int, not_before: int = 0) -> None:
        if job.nodes_delivered:
            generation = generation_of(job)
            error = this_nacks_error(job) if flags & INCR_NACKS and job.ext else None
            if error is not None:
                self.bus.broadcast(m.QUEUED, job.id, flags, not_before, generation,
                                   list(error), node_ids=job.nodes_delivered)
            elif generation or not_before:
                self.bus.broadcast(m.QUEUED, job.id, flags, not_before, generation,
                                   node_ids=job.nodes_delivered)
            else:
                self.bus.broadcast(m.QUEUED, job.id, flags, node_ids=job.nodes_delivered)

    def send_willqueue(self, job: Job) -> None:
        if job.nodes_delivered:
            generation = generation_of(job)
            if generation:
                self.bus.broadcast(m.WILLQUEUE, job.id, generation,
                                   node_ids=job.nodes_delivered)
            else:
                self.bus.broadcast(m.WILLQUEUE, job.id, node_ids=job.nodes_delivered)

    def job_working(self, job: Job) -> None:
        if job.nodes_delivered:
            notes = job_notes(job)
            if notes is not None and (notes.progress != NO_PROGRESS
                                      or notes.progress_data is not None):
                self.bus.broadcast(m.WORKING, job.id, notes.progress, notes.progress_data,
                                   node_ids=job.nodes_delivered)
            else:
                self.bus.broadcast(m.WORKING, job.id, node_ids=job.nodes_delivered)

    # -- bus messages -------------------------------------------------------------------
    def _on_enqueue(self, sender: ClusterNode, fields: list[Any]) -> None:
        """Queue a copy now, or after `delay` seconds, or at its due time (AT /
        DELAY-MS) if later (sent by a node that replicated a job without keeping it).
        This node becomes its first queuer: no QUEUED. The sender is told it got
        the message (ENQUEUED, placement.py), and an ENQUEUE sent again for a copy
        that had one (`PLACED`) changes nothing."""
        if len(fields) < 2 or type(fields[0]) is not bytes or not is_valid_job_id(fields[0]):
            return
        self.bus.send_batched((sender.id,), m.ENQUEUED, [fields[0]])
        job = job_in(self.node, fields)
        if job is None or job.state != ACTIVE or job.flags & PLACED:
            return
        delay = fields[1]
        if type(delay) is not int or not 0 <= delay <= MAX_U32:
            return
        queue = self.node.queues.get(job.queue)
        if queue is not None and queue.flags & PAUSED_IN:
            return
        if job.flags & PROVISIONAL:  # its ADDJOB succeeded (placed once confirmed)
            self.node.confirm_copy(job)
        job.flags = (job.flags & ~BCAST_QUEUED) | PLACED
        now = now_ms()
        if job.qtime == 0 and job.retry == 0 and not job.flags & DELIVERED:
            job.qtime = now  # an at-most-once copy never queued: it may be, once
        self.node.queue_when_due(job, now, now + delay * 1000 if delay else 0)

    def _on_queued(self, sender: ClusterNode, fields: list[Any]) -> None:
        job = job_in(self.node, fields)
        if job is None or len(fields) < 2:
            return
        flags = fields[1]
        if type(flags) is not int or not 0 <= flags <= 0xFF:
            return
        not_before, generation = 0, 0
        error = None
        if len(fields) >= 4:
            not_before, generation = fields[2], fields[3]
            if not (type(not_before) is int and 0 <= not_before <= MAX_DUE_MS
                    and type(generation) is int and 0 <= generation <= MAX_GENERATION):
                return
            if len(fields) >= 5:
                error = decode_error(fields[4])
                if error is None:
                    return
            if not_before:
                not_before = to_local_ms(self.bus, sender.id, not_before)
        self._queued_elsewhere(sender, job, flags, working=False, not_before=not_before)
        if error is not None:
            self.node.learn_errors(job, [error])
        self._newer_here(sender, job, generation)

    def _on_working(self, sender: ClusterNode, fields: list[Any]) -> None:
        job = job_in(self.node, fields)
        if job is None:
            return
        if len(fields) >= 3:  # WORKING ... PROGRESS / DATA
            progress, data = fields[1], fields[2]
            if not (type(progress) is int and (progress == NO_PROGRESS
                                               or MIN_PROGRESS <= progress <= MAX_PROGRESS)
                    and (data is None or type(data) is bytes
                         and len(data) <= MAX_PROGRESS_DATA)):
                return
            if job.state == ACTIVE or job.state == QUEUED:
                self.node.set_progress(job, None if progress == NO_PROGRESS else progress,
                                       data)
        self._queued_elsewhere(sender, job, 0, working=True)

    def _queued_elsewhere(self, sender: ClusterNode, job: Job, flags: int,
                          working: bool, not_before: int = 0) -> None:
        """QUEUED / WORKING from another node: requeue here only after another RETRY
        (counted from `not_before` if later: the end of the sender's back-off). A copy
        queued here too leaves the queue on WORKING, or on QUEUED when the sender wins
        `sender_wins`, so that concurrent requeues leave one copy queued."""
        state = job.state
        if state == ACTIVE or state == QUEUED:
            if state == QUEUED and (working or sender_wins(sender.id, self.node.id, job.id)):
                self.node.dequeue(job)
            self.node.postpone_requeue(job, not_before=not_before)
            if flags & INCR_NACKS:
                job.nacks += 1
            if flags & INCR_DELIV:
                job.deliveries += 1
        elif state == ACKED:
            send_setack(self.bus, sender.id, job)

    def _on_willqueue(self, sender: ClusterNode, fields: list[Any]) -> None:
        """The sender will requeue its copy in 500 ms: if ours is queued, say so (it
        postpones); if it is acked here, tell it (it acks too)."""
        job = job_in(self.node, fields)
        if job is None:
            return
        if job.state == ACTIVE or job.state == QUEUED:
            learn_holders(self.node, job, (sender.id,))
            if job.state == QUEUED:
                self.job_queued(job, 0)
            generation = fields[1] if len(fields) >= 2 else 0
            if type(generation) is int:
                self._newer_here(sender, job, generation)
        elif job.state == ACKED:
            send_setack(self.bus, sender.id, job)

    def _newer_here(self, sender: ClusterNode, job: Job, generation: int) -> None:
        """The sender's copy and mine differ in generation (one of us missed a move: a
        dead letter, or one put back): tell it mine if mine is newer, else ask for
        its own (JOBMOVE_ASK)."""
        mine = generation_of(job)
        if job.state == ACKED or mine == generation:
            return
        if mine > generation:
            send_jobmove(self.bus, sender.id, job)
        else:
            self.bus.send(sender.id, m.JOBMOVE_ASK, job.id, mine)

    def _on_jobmove_ask(self, sender: ClusterNode, fields: list[Any]) -> None:
        job = job_in(self.node, fields)
        if job is not None and len(fields) >= 2 and type(fields[1]) is int:
            self._newer_here(sender, job, fields[1])


def generation_of(job: Job) -> int:
    ext = job.ext
    return 0 if ext is None else ext.generation


def this_nacks_error(job: Job) -> JobError | None:
    """The error of the NACK that just requeued the job (counted already: its
    delivery is the job's nacks + deliveries), if it had one."""
    notes = job_notes(job)
    if notes is None or not notes.errors:
        return None
    error = notes.errors[-1]
    return error if error[0] == job.nacks + job.deliveries else None


def send_jobmove(bus: BusPort, node_id: str | None, job: Job) -> None:
    """JOBMOVE: the job's queue and dead-letter state, and its errors if it has some,
    to `node_id` (None: every other holder)."""
    ext = job.ext
    assert ext is not None
    fields: tuple[Any, ...] = (job.id, job.queue, ext.dead_from, ext.dead_reason,
                               ext.generation, job.nacks, job.deliveries)
    if ext.notes is not None and ext.notes.errors:
        fields += ([list(error) for error in ext.notes.errors],)
    if node_id is not None:
        bus.send(node_id, m.JOBMOVE, *fields)
    elif job.nodes_delivered:
        bus.broadcast(m.JOBMOVE, *fields, node_ids=job.nodes_delivered)


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
