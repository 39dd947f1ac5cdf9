"""ADDJOB ... ORDERKEY k [STRICT] (a disq extension, as SQS FIFO's message groups):
the jobs of one key in one queue are delivered one at a time, in their order; the
next only once the one before is acked, a dead letter, deleted or expired (its RETRY
running out delivers the same one again first). Other keys, and jobs without a key,
are not held back. Sans-IO: this node's part; who acts for a key across the cluster is
the cluster's answer (`acts_for`, replication/orderkeys.py).

Every node keeps the copies it holds of each key's live jobs in a *line* (a
SortedJobs per (queue, key), by creation time `ctime`, the queue order). One node
acts for a key, its *owner*: it alone puts the head of the line in the queue
(`admits`, Node.enqueue's gate), and each next head once the one before ended here
(`ended`: an ACK here or a peer's SETACK, a dead letter, a deletion, an expiry).
The other nodes keep their copies out of their queues: their RETRY timers only look
again (and hand a copy to an owner that has none, `hand_off`); a job the owner
queued may still travel to another node's consumers (federation's YOURJOBS) or come
back there by a NACK (`explicit`), as any job. A strict key's jobs are neither queued
nor delivered on a node that does not reach a majority of the nodes (`NO_MAJORITY`).

Jobs without a key pay one None test in `Node.enqueue` and `Node.activate` (they
read `job.ext` there anyway) and nothing else.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Final

from .clock import now_ms
from .job import ACTIVE, BCAST_QUEUED, QUEUED, Job, JobExt
from .queue import SortedJobs

if TYPE_CHECKING:
    from .node import Node

# acts_for's answers: this node puts the key's jobs in the queue; another node does;
# a strict key on a node that does not reach a majority: nobody here does
OWNER: Final = 0
OTHER: Final = 1
NO_MAJORITY: Final = 2
NOT_YET: Final = 3  # this node took the key over just now: the copies it lacks first

LineKey = tuple[bytes, bytes]  # (queue, order key)


def _alone(queue: bytes, key: bytes, strict: bool) -> int:
    return OWNER  # no cluster: this node acts for every key


def _no_hand_off(job: Job) -> None:
    pass


def _majority() -> bool:
    return True


def _no_grace() -> int:
    return 0


def _seen(job: Job) -> int:
    return 0


def line_key(job: Job, ext: JobExt) -> LineKey:
    """The line of a job with an order key: its queue's, or for a dead letter the queue
    it came from."""
    queue = ext.dead_from if ext.dead_from is not None else job.queue
    assert queue is not None and ext.orderkey is not None
    return queue, ext.orderkey


class OrderKeys:
    """The lines of the order keys held here, and the gate of their queueing."""

    __slots__ = ("node", "lines", "in_line", "released", "acts_for", "hand_off",
                 "has_majority", "grace_left", "unseen_wait", "withheld")

    def __init__(self, node: Node) -> None:
        self.node = node
        self.lines: dict[LineKey, SortedJobs] = {}
        # the IDs of the jobs in a line: a job leaves its line once, and a dead letter
        # brought back (DEADLETTER REQUEUE) is outside the order from then on
        self.in_line: set[bytes] = set()
        self.released: set[bytes] = set()  # queued here by this node as the owner
        # (queue, key, strict) -> OWNER, OTHER or NO_MAJORITY: the cluster's (install)
        self.acts_for: Callable[[bytes, bytes, bool], int] = _alone
        # a copy held on a node that does not act for its key, whose owner may have
        # none: the cluster sends it one
        self.hand_off: Callable[[Job], None] = _no_hand_off
        # whether this node reaches a majority of the nodes (STRICT keys)
        self.has_majority: Callable[[], bool] = _majority
        self.grace_left: Callable[[], int] = _no_grace  # ms a takeover still waits
        # ms a copy whose holders this node does not all see waits (0: none)
        self.unseen_wait: Callable[[Job], int] = _seen
        # the strict keys' queued jobs were taken out of their queues since this node
        # last had a majority (`check_majority`): none is queued again until it has one
        self.withheld = False

    # -- the lines ----------------------------------------------------------------------
    def joined(self, job: Job, ext: JobExt) -> None:
        """A job with an order key is held here (a new job, a copy, a loaded one)."""
        if ext.dead_from is not None or job.id in self.in_line:
            return
        key = line_key(job, ext)
        line = self.lines.get(key)
        if line is None:
            self.lines[key] = line = SortedJobs()
        line.add(job)
        self.in_line.add(job.id)

    def ended(self, job: Job, now: int = 0) -> None:
        """`job` ended here (acked, a dead letter, deleted, expired): it leaves its line;
        if it was the head, the next one is released (`_head_changed`)."""
        ext = job.ext
        if ext is None or ext.orderkey is None or job.id not in self.in_line:
            return
        self.in_line.discard(job.id)
        self.released.discard(job.id)
        key = line_key(job, ext)
        line = self.lines.get(key)
        if line is None:
            return
        was_head = line.first() is job
        line.remove(job)
        if not line:
            del self.lines[key]
        elif was_head:
            head = line.first()
            assert head is not None
            self._head_changed(head, key, now or now_ms())

    def head(self, job: Job) -> Job | None:
        """The head of `job`'s line (None: it is in none)."""
        ext = job.ext
        if ext is None or ext.orderkey is None or job.id not in self.in_line:
            return None
        line = self.lines.get(line_key(job, ext))
        return None if line is None else line.first()

    def __len__(self) -> int:
        return len(self.in_line)

    # -- the gate -----------------------------------------------------------------------
    def admits(self, job: Job, ext: JobExt, explicit: bool, now: int) -> bool:
        """Node.enqueue's gate for a job with an order key: True to queue it here as
        usual, False if it is held (its time set here). The owner queues the head of
        the line only; another node queues only what it is sent or its consumer NACKs
        (`explicit`), never on its own timer; a strict key on a side without a
        majority, nothing."""
        if job.id not in self.in_line:
            return True  # outside the order (a dead letter brought back)
        queue, key = line_key(job, ext)
        role = self.acts_for(queue, key, ext.order_strict)
        if role == OWNER:
            if ext.order_strict:
                self.withheld = False  # (a majority: a loss withholds this one too)
            line = self.lines[(queue, key)]
            if line.first() is job:
                if job.id not in self.released:  # its first queueing: no delivery
                    self.released.add(job.id)  # counted, no QUEUED (others hold it)
                    job.flags &= ~BCAST_QUEUED
                return True
            job.qtime = 0  # held: released when it heads the line (_head_changed)
            self.node.update_awake(job)
            return False
        if role == OTHER and explicit:
            return True
        self._wait(job, now)
        if role == OTHER:
            self.hand_off(job)
        elif role == NOT_YET:
            job.qtime = now + self.grace_left()
            self.node.update_awake(job)
        return False

    def copy_arrived(self, job: Job, ext: JobExt, now: int) -> None:
        """A copy came from another node (stored, active): the owner queues it now if
        it heads its line (its creator does not queue it), unless it comes from nodes
        this node does not see (`unseen_wait`: a healed partition this node has yet to
        notice; the copies of its other jobs are on their way too): then after that
        wait, through its timer. Another node hands it to an owner that lacks it at
        once (its creator saw other owners: a topology change), not after its RETRY:
        the owner's grace may be over by then, and a later job of the key released."""
        if job.id not in self.in_line:
            return
        if self.lines[line_key(job, ext)].first() is job:
            wait = self.unseen_wait(job)
            if wait:
                job.qtime = now + wait
                self.node.update_awake(job)
            else:
                self._head_changed(job, line_key(job, ext), now)
        self.hand_off(job)  # (nothing if this node is the owner, or the owner has it)

    def _head_changed(self, head: Job, key: LineKey, now: int) -> None:
        """`head` now heads its line: the owner queues it; another node looks again
        after its RETRY (its owner may have gone meanwhile)."""
        if head.state != ACTIVE:
            return  # queued already, or waiting for its copies (then activated)
        ext = head.ext
        assert ext is not None
        if self.acts_for(key[0], key[1], ext.order_strict) == OWNER:
            head.qtime = now  # (held with none)
            if not self.node.enqueue(head, nack=False, now=now):
                head.qtime = 0
                self.node.update_awake(head)
        elif not head.qtime:
            self._wait(head, now)  # (NOT_YET: the same; RETRY 0: its owner's copy)

    def _wait(self, job: Job, now: int) -> None:
        """Held on this node: look again after its RETRY (never for RETRY 0: the
        owner's copy is the one queued)."""
        job.qtime = now + job.retry * 1000 if job.retry else 0
        self.node.update_awake(job)

    # -- strict keys ------------------------------------------------------------------
    def check_majority(self, now: int) -> int:
        """Whether this node reaches a majority, checked (the cluster's periodic check,
        and every GETJOB while keyed jobs are held): when it lost it, the strict keys'
        queued jobs leave their queues, once per loss (`acts_for` queues none
        meanwhile), so a GETJOB pays a walk of the keyed jobs only the first time.
        How many it withheld."""
        if self.has_majority():
            self.withheld = False
        elif not self.withheld:
            self.withheld = True
            return self.withhold_strict(now)
        return 0

    def withhold_strict(self, now: int) -> int:
        """This node no longer reaches a majority: the strict keys' jobs queued here
        leave their queues (active, looked at again after their RETRY), so that no
        consumer here gets one. How many."""
        held = 0
        for line in self.lines.values():
            for job in line:
                ext = job.ext
                if job.state == QUEUED and ext is not None and ext.order_strict:
                    self.node.dequeue(job)
                    self._wait(job, now)
                    held += 1
        return held

    def strict_queues(self) -> set[bytes]:
        """The queues with strict keys' jobs held here."""
        out = set()
        for (queue, _), line in self.lines.items():
            head = line.first()
            if head is not None and head.ext is not None and head.ext.order_strict:
                out.add(queue)
        return out

    def clear(self) -> None:
        self.lines.clear()
        self.in_line.clear()
        self.released.clear()
