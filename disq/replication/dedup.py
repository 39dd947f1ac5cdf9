"""`ADDJOB ... DEDUP <key>` across the cluster (a disq extension, which Disque clients
never send): if a job was added with that key in the cluster and has not expired,
ADDJOB answers that job's ID and adds nothing.

Where a key is known: every node holding a copy of the job records it in its
`node.dedup` table (the origin once the ADDJOB succeeded, the others as the REPLJOB
carrying the key arrives), so with REPLICATE-1 of those nodes down one still knows.
A node that does not know a key asks every peer it can reach (DEDUP_QUERY, the keys of
one loop turn in one message per peer, answered by one DEDUP_REPLY) and adds the job
only once they all said they do not know it. A peer that does not answer within
DEDUP_TIMEOUT_MS fails the ADDJOB with -NOREPL (nothing was added: the client tries
again, and a dead peer soon has no link and is not asked). Concurrent ADDJOBs with
one key on one node share the first one's outcome.

An ADDJOB that fails after its copies were sent (replication timeout, job expired)
sends DEDUP_FORGET so that the holders drop the key with the job.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from ..cluster import messages as m
from ..cluster.membership import ClusterNode
from ..dedup import MAX_KEY_LEN
from ..errors import DisqError
from ..job import WAIT_REPL, Job
from ..node import now_ms
from .wire import MAX_TTL_MS

if TYPE_CHECKING:
    from .replicator import Replication

log = logging.getLogger("disq")

DEDUP_TIMEOUT_MS = 2000  # every asked peer answers within this, or ADDJOB fails
CHECK_SLACK_MS = 10  # the timer fires this long after the oldest deadline

Answer = Callable[[bytes], None]
MakeJob = Callable[[], Job]

_TIMEOUT = DisqError(
    "NOREPL", "Timeout reached before every reachable node answered the DEDUP check").reply()


class _Query:
    """A key being checked with the peers: who has yet to answer, and what to do next."""

    __slots__ = ("peers", "deadline", "make_job")

    def __init__(self, peers: set[str], deadline: int, make_job: MakeJob) -> None:
        self.peers = peers
        self.deadline = deadline
        self.make_job = make_job


class Dedup:
    """The cluster side of DEDUP, owned by `Replication` (`replication.dedup`)."""

    def __init__(self, replication: Replication,
                 loop: asyncio.AbstractEventLoop | None = None) -> None:
        self.replication = replication
        self.node = replication.node
        self.bus = replication.bus
        self._loop = loop
        self._timer: asyncio.TimerHandle | None = None
        self.pending: dict[bytes, list[Answer]] = {}  # key -> ADDJOBs waiting on it
        self._queries: dict[bytes, _Query] = {}  # ordered by deadline
        for mtype, handler in ((m.DEDUP_QUERY, self._on_query),
                               (m.DEDUP_REPLY, self._on_reply),
                               (m.DEDUP_FORGET, self._on_forget)):
            self.bus.on(mtype, handler)

    # -- ADDJOB's side ------------------------------------------------------------------
    def add(self, key: bytes, make_job: MakeJob, answer: Answer) -> None:
        """ADDJOB with DEDUP `key`, not known here: `answer` gets the existing job's ID,
        the new job's ID once `make_job()` added and replicated it, or an error."""
        waiting = self.pending.get(key)
        if waiting is not None:  # the same key is being added here: same outcome
            waiting.append(answer)
            return
        self.pending[key] = [answer]
        peers = {n.id for n in self.bus.reachable_peers() if self.bus.can_send(n.id)}
        if not peers:
            self._add(key, make_job)
            return
        for node_id in peers:
            self.bus.send_batched(node_id, m.DEDUP_QUERY, key)
        self._queries[key] = _Query(peers, now_ms() + DEDUP_TIMEOUT_MS, make_job)
        self._arm()

    def _add(self, key: bytes, make_job: MakeJob) -> None:
        """Nobody knows the key: add the job, its REPLJOBs carrying the key."""
        replication = self.replication
        replication.dedup_key = key
        try:
            job = make_job()
        except DisqError as exc:
            self._finish(key, exc.reply())
            return
        except Exception as exc:  # a bug must not leave the waiting clients hanging
            log.error("Error adding a DEDUP job: %r", exc, exc_info=exc)
            self._finish(key, b"-ERR internal error while executing 'addjob'\r\n")
            return
        finally:
            replication.dedup_key = None
        if job.state == WAIT_REPL:
            replication.wait(job, lambda reply: self._added(key, job, reply))
        else:
            self._added(key, job, b"+" + job.id + b"\r\n")

    def _added(self, key: bytes, job: Job, reply: bytes) -> None:
        if reply[:1] == b"+":
            self.node.dedup.record(key, job.id, job.etime)
        elif job.nodes_delivered:  # its copies had the key: they forget it
            self.bus.broadcast(m.DEDUP_FORGET, key, job.id, node_ids=job.nodes_delivered)
        self._finish(key, reply)

    def _finish(self, key: bytes, reply: bytes) -> None:
        for answer in self.pending.pop(key, ()):
            answer(reply)

    # -- the REPLJOB side ---------------------------------------------------------------
    def replicated(self, key: object, job: Job) -> None:
        """A copy arrived with its DEDUP key: remember it for the job's life."""
        if type(key) is bytes and 0 < len(key) <= MAX_KEY_LEN:
            self.node.dedup.record(key, job.id, job.etime)

    # -- bus messages -------------------------------------------------------------------
    def _on_query(self, sender: ClusterNode, fields: list) -> None:
        table = self.node.dedup
        now = now_ms()
        for key in fields:
            if type(key) is not bytes:
                continue
            job_id = table.get(key, now)
            left = table.expiry(key) - now if job_id is not None else 0
            self.bus.send_batched(sender.id, m.DEDUP_REPLY, [key, job_id, left])

    def _on_reply(self, sender: ClusterNode, fields: list) -> None:
        queries = self._queries
        for item in fields:
            if type(item) is not list or len(item) != 3:
                continue
            key, job_id, left = item
            query = queries.get(key) if type(key) is bytes else None
            if query is None or sender.id not in query.peers:
                continue
            if type(job_id) is bytes and type(left) is int and 0 < left <= MAX_TTL_MS:
                del queries[key]
                self.node.dedup.record(key, job_id, now_ms() + left)
                self.node.dedup.hits += len(self.pending.get(key, ()))
                self._finish(key, b"+" + job_id + b"\r\n")
                continue
            query.peers.discard(sender.id)
            if not query.peers:
                del queries[key]
                self._add(key, query.make_job)

    def _on_forget(self, sender: ClusterNode, fields: list) -> None:
        if len(fields) >= 2 and type(fields[0]) is bytes and type(fields[1]) is bytes:
            self.node.dedup.forget(fields[0], fields[1])

    # -- timeouts -----------------------------------------------------------------------
    def check(self, now: int | None = None) -> None:
        """Fail the queries some peer did not answer in time."""
        if now is None:
            now = now_ms()
        queries = self._queries
        expired = []
        for key, query in queries.items():
            if query.deadline > now:
                break
            expired.append(key)
        for key in expired:
            del queries[key]
            self._finish(key, _TIMEOUT)

    def _arm(self) -> None:
        """One timer for every query: at the oldest one's deadline."""
        if self._timer is not None or not self._queries:
            return
        loop = self._loop
        if loop is None:
            try:
                loop = self._loop = asyncio.get_running_loop()
            except RuntimeError:
                return  # no loop (unit tests): the test calls check()
        first = next(iter(self._queries.values()))
        delay = max(first.deadline - now_ms(), 0) + CHECK_SLACK_MS
        self._timer = loop.call_later(delay / 1000, self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        self.check()
        self._arm()

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
