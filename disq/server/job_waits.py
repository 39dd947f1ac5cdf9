"""WAITJOB (a disq extension): one request waiting until every job it names (ANY: one)
has ended, or its timeout.

A job this node knows is watched here (results.py's `Ends.watch`: the core tells when
it is acked or becomes a dead letter, after the operation that did it). A job it does
not know is asked about on every reachable node (replication/ends.py), whose holders
answer what they know and tell when it ends. A job no node knows, once every asked
node answered, is `unknown`, an end as far as WAITJOB goes: it answers at once rather
than wait for a job that will not come (an ID mistyped, a job gone with its TTL). On
a side of a partition without the job's holders that is what it answers; never a
result the job did not have.

A job may leave the node watched without ending there: federation moves it to a node
whose consumers wait, its TTL runs out, DELJOB, eviction. The wait follows it
(`job_left`): it asks every reachable node again, as for a job it never knew, and the
job's other holders (or the node it moved to) answer and watch it; if none does, it
is `unknown` (expiry and DELJOB are no end WAITJOB reports: neither acked nor dead).
Until the new answers come its state is `unknown`, never the stale one. Likewise a
job heard of elsewhere that no reachable node names in a whole round of answers (its
holders killed, cut off): `answered`.

The answer: one entry per ID as given, [id, state, result or error or nil]; a job not
ended by the timeout shows its state then (queued, active, or unknown if no node
answered for it), an active one with the progress data its consumer last reported
(WORKING ... DATA): now for a job held here, as of the holders' last answer for one
held elsewhere (they answer when asked, and again every LEASE_MS / 2).
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Final

from ..clock import now_ms
from ..results import ACKED_END, DEAD_END
from .later import Later

if TYPE_CHECKING:
    from ..acl import User
    from ..end_requests import WaitJob
    from ..node import Node
    from ..replication.ends import Entry
    from ..replication.replicator import Replication

UNKNOWN: Final = b"unknown"
# How far a state is from an end: an answer never goes back (a copy that has not heard
# of the ACK yet says active).
_RANK: Final = {UNKNOWN: 0, b"queued": 1, b"active": 1, ACKED_END: 2, DEAD_END: 2}

# One entry of the answer: job ID, state, result (acked) or last error (dead) or
# progress data (active) or None.
JobStatus = tuple[bytes, bytes, "bytes | None"]


class JobWait:
    """One WAITJOB, from `start` until it is answered (`later`) or cancelled (its
    client went away)."""

    __slots__ = ("node", "replication", "user", "ids", "any", "states", "asked_ids",
                 "asks", "unanswered", "to_ask", "timer", "later", "loop", "over", "peek",
                 "progress")

    def __init__(self, node: Node, replication: Replication | None, user: User,
                 request: WaitJob, loop: asyncio.AbstractEventLoop | None,
                 peek: bool = False) -> None:
        self.node = node
        self.replication = replication
        self.user = user
        self.ids = request.ids
        self.any = request.any
        self.states: dict[bytes, tuple[bytes, bytes | None]] = {}
        self.asked_ids: set[bytes] = set()  # not known here (or gone): asked elsewhere
        self.asks: list[int] = []  # its asks' IDs (JobEnds'), to forget at the end
        self.unanswered: set[int] = set()  # the asks some node has not answered yet
        self.to_ask: list[bytes] = []  # jobs that left where they were watched
        self.timer: asyncio.TimerHandle | None = None
        self.later: Later[list[JobStatus]] = Later()
        self.loop = loop
        self.over = False  # answered or cancelled
        self.peek = peek  # answer what is known once every node asked answered
        # the progress another node reported for an active job asked there (WORKING
        # ... PROGRESS); a job held here is read at the end (`progress_of`)
        self.progress: dict[bytes, int] = {}

    def start(self, timeout_ms: int) -> Later[list[JobStatus]]:
        node = self.node
        now = now_ms()
        for job_id in dict.fromkeys(self.ids):
            state, data = self._local(job_id, now)
            self.states[job_id] = state, data
            if state == UNKNOWN:
                self.asked_ids.add(job_id)
            elif _RANK[state] < 2:
                node.ends.watch(job_id, self)
        if self.asked_ids:
            self._ask(list(self.asked_ids))
        if not self._check() and timeout_ms > 0 and self.loop is not None:
            self.timer = self.loop.call_later(timeout_ms / 1000, self.finish)
        return self.later

    @property
    def asked(self) -> bool:
        """Every node asked answered (or the asks timed out), and no job waits to be
        asked about again."""
        return not self.unanswered and not self.to_ask

    def _ask(self, ids: list[bytes]) -> None:
        """Ask the reachable nodes about `ids` (in a cluster: a single node has none to
        ask, its unknown jobs are unknown at once)."""
        replication = self.replication
        if replication is not None and replication.size() > 1:
            ask_id = replication.ends.ask(self, ids)
            self.asks.append(ask_id)
            self.unanswered.add(ask_id)

    def _local(self, job_id: bytes, now: int) -> tuple[bytes, bytes | None]:
        """The job's state here; unknown for a job of a queue the user may not use."""
        node = self.node
        user = self.user
        if not user.all_queues:
            queue = node.job_queue(job_id, now)
            if queue is None or not user.may_use(queue):
                return UNKNOWN, None
        return node.job_end(job_id, now)

    # -- what it hears ----------------------------------------------------------------------
    def job_ended(self, job_id: bytes) -> None:
        """The core: a job watched here ended."""
        if not self.over:
            self.states[job_id] = self._local(job_id, now_ms())
            self._check()

    def heard(self, entry: Entry) -> None:
        """Another node's answer about a job asked there."""
        job_id, state, data, queue = entry
        if self.over or job_id not in self.asked_ids:
            return
        if not self.user.all_queues and (queue is None or not self.user.may_use(queue)):
            return
        rank, known = _RANK[state], _RANK[self.states[job_id][0]]
        if rank > known or rank == known == 1:  # (a later answer: fresher progress)
            self.states[job_id] = state, data
            if rank > known:
                self._check()

    def job_left(self, job_id: bytes) -> None:
        """The core, or a node asked (ENDS_GONE): a job watched there left without
        ending there. Its end if this node kept one, else asked about everywhere
        again; `unknown` until then."""
        if self.over or _RANK[self.states[job_id][0]] == 2:
            return
        state, data = self._local(job_id, now_ms())
        self.states[job_id] = state, data
        self.progress.pop(job_id, None)
        if _RANK[state] == 2:
            self._check()
        elif self.node.lookup(job_id) is not None:  # here (again: federation moved it)
            self.asked_ids.discard(job_id)
            self.node.ends.watch(job_id, self)
        else:
            self.asked_ids.add(job_id)
            replication = self.replication
            if replication is None or replication.size() <= 1:
                self._check()  # nobody else to ask: unknown
                return
            if not self.to_ask and self.loop is not None:
                self.loop.call_soon(self._ask_again)  # (with the others that leave now)
            self.to_ask.append(job_id)
            if self.loop is None:
                self._ask_again()

    def left(self, job_id: bytes) -> None:
        """ENDS_GONE (replication/ends.py): a job asked about left a node watching it."""
        if job_id in self.asked_ids:
            self.job_left(job_id)

    def _ask_again(self) -> None:
        ids, self.to_ask = self.to_ask, []
        if not self.over:
            self._ask(ids)
            self._check()

    def heard_progress(self, job_id: bytes, progress: int) -> None:
        """Another node's progress of an active job asked there."""
        if not self.over and job_id in self.asked_ids:
            self.progress[job_id] = progress

    def progress_of(self, job_id: bytes) -> int | None:
        """The last progress reported for an active job (None: none known)."""
        if job_id in self.asked_ids:
            return self.progress.get(job_id)
        return self.node.job_progress(job_id)

    def answered(self, ask_id: int, unmentioned: list[bytes]) -> None:
        """Every node asked answered `ask_id` (or its time ran out); `unmentioned`:
        the jobs no reachable node answered for, when every one answered. One heard
        of before (queued, active) is unknown now: its holders are gone (killed and
        back empty, cut off), and it is waited for no more."""
        if self.over:
            return
        for job_id in unmentioned:
            if job_id in self.asked_ids and _RANK[self.states[job_id][0]] == 1:
                self.states[job_id] = UNKNOWN, None
                self.progress.pop(job_id, None)
        self.unanswered.discard(ask_id)
        self._check()

    # -- the end ----------------------------------------------------------------------------
    def _check(self) -> bool:
        """Answer if every job ended (ANY: one did), an unknown one counting as ended
        once every node asked answered. True if answered."""
        final = ended = 0
        for state, _ in self.states.values():
            if _RANK[state] == 2:
                ended += 1
                final += 1
            elif state == UNKNOWN and self.asked:
                final += 1
        if final < len(self.states) and not (self.any and ended) and not (
                self.peek and self.asked):
            return False
        self.finish()
        return True

    def finish(self) -> None:
        """Answer with the states now (at the timeout: whatever they are)."""
        if self.over:
            return
        self._stop()
        states = self.states
        now = now_ms()
        for job_id, (state, _) in states.items():  # a job here: its progress now
            if _RANK[state] == 1 and job_id not in self.asked_ids:
                states[job_id] = self._local(job_id, now)
        self.later.resolve([(job_id, *states[job_id]) for job_id in self.ids])

    def cancel(self, _arg: object = None) -> None:
        """The client went away: stop watching, answer nobody."""
        if not self.over:
            self._stop()

    def _stop(self) -> None:
        self.over = True
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        ends = self.node.ends
        for job_id in self.states:
            if job_id not in self.asked_ids:
                ends.unwatch(job_id, self)
        if self.replication is not None:
            for ask_id in self.asks:
                self.replication.ends.forget(ask_id)
