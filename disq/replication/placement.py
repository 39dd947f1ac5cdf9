"""The ENQUEUEs of the jobs this node placed on other nodes without keeping a copy
(Disque's external replication: short of memory, leaving, QUEUE-RANDOMLY), sent
until the holder says it got them.

Disque sends that ENQUEUE once and forgets the job: if the message is lost, no node
queues the job before its copies' RETRY (5 minutes by default). disq loses it more
often than a C node would: a bus link whose PONG is late (a peer busy taking a
flood of copies) is dropped with what it still had to send, and the ENQUEUE may be
due while the link is down (its GOTJOB came on the other one). So the holder
answers ENQUEUED (a disq extension; a node that does not know it ignores it), and an
ENQUEUE not answered is sent again, to the same holder (another one could queue the
job a second time), after ENQUEUE_RESEND_MS and then twice as long each time, until
the holders would requeue the job by themselves (DELAY + RETRY; with RETRY 0, never:
until it expires). A holder applies the
ENQUEUE of a copy once (`PLACED`): the ones sent again only get their answer.
"""

from __future__ import annotations

import heapq
from typing import Any, Final

from ..cluster import messages as m
from ..cluster.membership import ClusterNode
from ..cluster.port import BusPort
from ..job import Job

ENQUEUE_RESEND_MS: Final = 1000  # an ENQUEUE not answered by then is sent again


class _Placing:
    """A job placed on `target`, which has not answered its ENQUEUE yet."""

    __slots__ = ("job_id", "target", "delay", "wait", "until")

    def __init__(self, job_id: bytes, target: str, delay: int, until: int) -> None:
        self.job_id = job_id
        self.target = target
        self.delay = delay  # s, as ENQUEUE carries it
        self.wait = ENQUEUE_RESEND_MS  # before the next resend
        self.until = until  # ms: no resend after this (the holders requeue it by then)


class Placements:
    """`place` sends a job's ENQUEUE; `tick` (the owner's timer) sends again the ones
    not answered; `pending` says whether the owner's timer must keep running."""

    def __init__(self, bus: BusPort) -> None:
        self.bus = bus
        self._placing: dict[bytes, _Placing] = {}
        self._due: list[tuple[int, int, _Placing]] = []  # (resend at, seq, entry) heap
        self._seq = 0
        bus.on(m.ENQUEUED, self._on_enqueued)

    @property
    def pending(self) -> bool:
        return bool(self._placing)

    def place(self, job: Job, confirmed: set[str], now: int) -> None:
        """Have one of the nodes that `confirmed` a copy of `job` queue it (after its
        DELAY): one whose link is up if there is one (its GOTJOB may have come on its
        own link while mine to it is down)."""
        target = next(iter(confirmed))
        if len(confirmed) > 1 and not self.bus.can_send(target):
            target = next((i for i in confirmed if self.bus.can_send(i)), target)
        # An at-most-once job (RETRY 0) is never requeued: only its expiry ends it.
        until = now + (job.delay + job.retry) * 1000 if job.retry else job.etime
        entry = _Placing(job.id, target, job.delay, min(until, job.etime))
        self._placing[job.id] = entry
        self._send(entry, now)

    def tick(self, now: int) -> None:
        due = self._due
        placing = self._placing
        while due and due[0][0] <= now:
            entry = heapq.heappop(due)[2]
            if placing.get(entry.job_id) is not entry:
                continue  # answered
            if now >= entry.until or entry.target not in self.bus.known_id_map():
                del placing[entry.job_id]  # the holders requeue it by themselves
                continue
            entry.wait *= 2
            self._send(entry, now)

    def _send(self, entry: _Placing, now: int) -> None:
        # A send that fails (no link now) is tried again as one that is lost.
        self.bus.send(entry.target, m.ENQUEUE, entry.job_id, entry.delay)
        self._seq += 1
        heapq.heappush(self._due, (now + entry.wait, self._seq, entry))

    def _on_enqueued(self, sender: ClusterNode, fields: list[Any]) -> None:
        """The holder got the ENQUEUEs of these jobs."""
        placing = self._placing
        for job_id in fields:
            entry = placing.get(job_id) if type(job_id) is bytes else None
            if entry is not None and entry.target == sender.id:
                del placing[job_id]
        if not placing:
            self._due.clear()
