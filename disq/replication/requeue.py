"""Requeue coordination, as Disque does it: a node that queues a job tells the other
holders (QUEUED), one about to requeue it asks first (WILLQUEUE), one delivering it
again says it works on it (WORKING), and a node that replicated a job without keeping
it has one holder queue it (ENQUEUE).
"""

from __future__ import annotations

import hashlib
from typing import Any

from ..cluster import messages as m
from ..cluster.membership import ClusterNode
from ..cluster.port import BusPort
from ..job import ACKED, ACTIVE, BCAST_QUEUED, DELIVERED, QUEUED, Job
from ..node import INCR_DELIV, INCR_NACKS, Node, now_ms
from ..queue import PAUSED_IN
from .acks import job_in, learn_holders, send_setack
from .wire import MAX_U32


class Requeue:
    """ENQUEUE / QUEUED / WORKING / WILLQUEUE, and what the core tells of them."""

    def __init__(self, node: Node, bus: BusPort) -> None:
        self.node = node
        self.bus = bus
        bus.on(m.ENQUEUE, self._on_enqueue)
        bus.on(m.QUEUED, self._on_queued)
        bus.on(m.WORKING, self._on_working)
        bus.on(m.WILLQUEUE, self._on_willqueue)

    # -- what the core tells the cluster ------------------------------------------------
    def job_queued(self, job: Job, flags: int) -> None:
        if job.nodes_delivered:
            self.bus.broadcast(m.QUEUED, job.id, flags, node_ids=job.nodes_delivered)

    def send_willqueue(self, job: Job) -> None:
        if job.nodes_delivered:
            self.bus.broadcast(m.WILLQUEUE, job.id, node_ids=job.nodes_delivered)

    def job_working(self, job: Job) -> None:
        if job.nodes_delivered:
            self.bus.broadcast(m.WORKING, job.id, node_ids=job.nodes_delivered)

    # -- bus messages -------------------------------------------------------------------
    def _on_enqueue(self, sender: ClusterNode, fields: list[Any]) -> None:
        """Queue a copy now, or after `delay` seconds, or at its due time (AT /
        DELAY-MS) if later (sent by a node that replicated a job without keeping it).
        This node becomes its first queuer: no QUEUED."""
        job = job_in(self.node, fields)
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
        self.node.queue_when_due(job, now, now + delay * 1000 if delay else 0)

    def _on_queued(self, sender: ClusterNode, fields: list[Any]) -> None:
        job = job_in(self.node, fields)
        if job is None or len(fields) < 2:
            return
        flags = fields[1]
        if type(flags) is not int or not 0 <= flags <= 0xFF:
            return
        self._queued_elsewhere(sender, job, flags, working=False)

    def _on_working(self, sender: ClusterNode, fields: list[Any]) -> None:
        job = job_in(self.node, fields)
        if job is not None:
            self._queued_elsewhere(sender, job, 0, working=True)

    def _queued_elsewhere(self, sender: ClusterNode, job: Job, flags: int,
                          working: bool) -> None:
        """QUEUED / WORKING from another node: requeue here only after another RETRY.
        A copy queued here too leaves the queue on WORKING, or on QUEUED when the
        sender wins `sender_wins`, so that concurrent requeues leave one copy queued."""
        state = job.state
        if state == ACTIVE or state == QUEUED:
            if state == QUEUED and (working or sender_wins(sender.id, self.node.id, job.id)):
                self.node.dequeue(job)
            self.node.postpone_requeue(job)
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
                self.bus.broadcast(m.QUEUED, job.id, 0, node_ids=job.nodes_delivered)
        elif job.state == ACKED:
            send_setack(self.bus, sender.id, job)


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
