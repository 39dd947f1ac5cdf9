"""The copies other nodes send here (REPLJOB, as Disque's): kept active, not queued,
their DEDUP keys recorded (or the copy refused: DEDUP_CONFLICT, dedup_checks.py), and
confirmed with one GOTJOB per message, once they are as safe as the AOF policy
promises. The sending side, and the ADDJOBs that wait for these GOTJOBs, are
copies.py's.
"""

from __future__ import annotations

import logging
from functools import partial
from typing import Any

from ..cluster import messages as m
from ..cluster.membership import ClusterNode
from ..cluster.port import BusPort
from ..job import ACKED, PROVISIONAL
from ..node import Node, now_ms
from ..queue import PAUSED_IN
from .acks import learn_holders, send_setack
from .clock import to_local_ms
from .dedup_checks import REFUSED, SETTLE_SLACK_MS, Dedup
from .wire import COPY_FIELDS, MAX_TTL_MS, decode_copy, decode_holders, without_ext

log = logging.getLogger("disq")


class IncomingCopies:
    """REPLJOB received. It keeps nothing of its own but how a peer's times read here;
    `dedup` says what a copy's DEDUP key allows (`Dedup.copy_key`)."""

    def __init__(self, node: Node, bus: BusPort, dedup: Dedup) -> None:
        self.node = node
        self.bus = bus
        self.dedup = dedup
        self._to_local = partial(to_local_ms, bus)  # a peer's due times, here
        bus.on(m.REPLJOB, self._on_repljob)

    def _on_repljob(self, sender: ClusterNode, fields: list[Any]) -> None:
        """Keep copies (active, not queued) and confirm them with one GOTJOB, unless
        leaving or the queue is paused in input. A copy held already only learns the
        new nodes. `fields`: noreply, the holders of every job of the message, jobs."""
        node = self.node
        if (len(fields) < 3 or type(fields[0]) is not bool or node.leaving
                or node.memory_level > 0):  # no new copies: leaving or short of memory
            return
        holders = decode_holders(fields[1], self.bus.known_id_map(), sender.id, node.id)
        if holders is None:
            log.warning("Received corrupted job holders from node %s", sender.id)
            return
        noreply: bool = fields[0]
        now = now_ms()
        queues = node.queues
        confirmed: list[bytes] = []
        refused: list[bytes] = []  # copies whose DEDUP key another job may have
        dedup_table = node.dedup
        purges = node.policies.purges
        purged = bool(purges.before)
        names: dict[bytes, bytes] = {}  # one queue name object per message...
        etime = 0  # ...and one expiry int for a burst (32 bytes a job each)
        for data in fields[2:]:
            job = decode_copy(data, now, sender.id, self._to_local)
            if job is None:
                log.warning("Received a corrupted job from node %s", sender.id)
                continue
            ext = job.ext
            if ext is not None:
                data = without_ext(data)  # what follows the job's fields: DEDUP's
                if ext.batch is not None and not node.batches.accepts(ext.batch, job.id, now):
                    continue  # a new member of a batch closed here (batches.py): no GOTJOB
            if purged and purges.refuses(job.queue, job.ctime):
                continue  # QDEL / QPURGE deleted it: a copy come late, no GOTJOB
            job.nodes_delivered = holders
            job.queue = names.setdefault(job.queue, job.queue)  # type: ignore[arg-type]
            if job.etime == etime:
                job.etime = etime
            else:
                etime = job.etime
            key = (self.dedup.copy_key(data, job, now, sender.id) if len(data) > COPY_FIELDS
                   else None)
            if key is REFUSED:
                refused.append(job.id)
                continue
            if key is not None and len(data) > COPY_FIELDS + 2 and node.recording:
                job.flags |= PROVISIONAL  # its ADDJOB may still fail (provisional.py)
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
                learn_holders(node, mine, holders)
                if mine.state == ACKED:  # tell the sender instead: it must not come back
                    send_setack(self.bus, sender.id, mine)
                    continue
            if not noreply:
                confirmed.append(job.id)
        if refused:
            self.bus.send_batched((sender.id,), m.DEDUP_CONFLICT, refused)
        if not confirmed:
            return
        if not node.recording:
            self.bus.send_batched((sender.id,), m.GOTJOB, confirmed)
        else:  # confirmed once the copies are as safe as the AOF policy promises
            # (Disque writes, and with appendfsync always fsyncs, its AOF before the
            # GOTJOB leaves: both happen before its event loop writes to sockets)
            sender_id = sender.id
            node.persistence.on_durable(
                lambda: self.bus.send_batched((sender_id,), m.GOTJOB, confirmed))
