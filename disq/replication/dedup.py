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

One key added at the same time on two nodes: a node answers "busy" (ms left = -1)
for a key it is adding, and for a key it is checking itself when it goes first by
`wins` (an order of the two node IDs drawn from the key); a node that gets "busy", or
that answered a node going first, checks again RECHECK_MS later instead of adding,
until it finds the other node's job (or that node failed and it may add), for at most
MAX_WAIT_MS.

An ADDJOB that fails after its copies were sent (replication timeout, job expired)
sends DEDUP_FORGET so that the holders drop the key with the job.
"""

from __future__ import annotations

import asyncio
import hashlib
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
RECHECK_MS = 20  # a node adding the key itself answered "busy": ask again after this
MAX_WAIT_MS = 15_000  # ... for at most this long in all, then ADDJOB fails (-NOREPL)
BUSY = -1  # DEDUP_REPLY's "ms left" when the sender is adding that key itself
CHECK_SLACK_MS = 10  # the timer fires this long after the oldest deadline

Answer = Callable[[bytes], None]
MakeJob = Callable[[], Job]

_TIMEOUT = DisqError(
    "NOREPL", "Timeout reached before every reachable node answered the DEDUP check").reply()
_TOO_LONG = DisqError(
    "NOREPL", "Timeout reached while another node was adding a job with this DEDUP key"
).reply()


class _Query:
    """A key being checked with the peers: who has yet to answer, whether one of them
    is adding the key itself (`busy`) or asked while this node must give way
    (`yielded`): then the check runs again later rather than adding."""

    __slots__ = ("peers", "deadline", "make_job", "started", "busy", "yielded")

    def __init__(self, make_job: MakeJob, now: int) -> None:
        self.peers: set[str] = set()
        self.deadline = 0
        self.make_job = make_job
        self.started = now
        self.busy = False
        self.yielded = False


def wins(my_id: str, other_id: str, key: bytes) -> bool:
    """Of two nodes checking one key at once, the one that goes first: an order drawn
    from the key, the same on every node, different from key to key."""
    mine = hashlib.blake2b(key + my_id.encode(), digest_size=8).digest()
    return mine > hashlib.blake2b(key + other_id.encode(), digest_size=8).digest()


class Dedup:
    """The cluster side of DEDUP, owned by `Replication` (`replication.dedup`)."""

    def __init__(self, replication: Replication,
                 loop: asyncio.AbstractEventLoop | None = None) -> None:
        self.replication = replication
        self.node = replication.node
        self.bus = replication.bus
        self._loop = loop
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = 0
        self.pending: dict[bytes, list[Answer]] = {}  # key -> ADDJOBs waiting on it
        self._queries: dict[bytes, _Query] = {}  # ordered by deadline
        self._rechecks: dict[bytes, tuple[int, _Query]] = {}  # key -> (when, query)
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
        self._ask(key, _Query(make_job, now_ms()))

    def _ask(self, key: bytes, query: _Query) -> None:
        """DEDUP_QUERY to every peer that can be reached (again, after a "busy")."""
        peers = {n.id for n in self.bus.reachable_peers() if self.bus.can_send(n.id)}
        if not peers:
            self._add(key, query.make_job)
            return
        self.bus.send_batched(peers, m.DEDUP_QUERY, [key])
        query.peers = peers
        query.busy = query.yielded = False
        query.deadline = now_ms() + DEDUP_TIMEOUT_MS
        self._queries[key] = query
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
        """Answer each key: its job and the time it has left, "busy" if this node is
        adding it or checking it and goes first, else unknown (nil)."""
        table = self.node.dedup
        now = now_ms()
        for key in fields:
            if type(key) is not bytes:
                continue
            job_id = table.get(key, now)
            left = table.expiry(key) - now if job_id is not None else 0
            if job_id is None and key in self.pending:
                query = self._queries.get(key)
                if query is None:
                    entry = self._rechecks.get(key)
                    query = entry[1] if entry is not None else None
                if query is None or wins(self.replication.my_id, sender.id, key):
                    left = BUSY  # adding it now, or checking it and going first
                else:
                    query.yielded = True  # the sender goes first: check again after
            self.bus.send_batched((sender.id,), m.DEDUP_REPLY, [[key, job_id, left]])

    def _on_reply(self, sender: ClusterNode, fields: list) -> None:
        queries = self._queries
        for item in fields:
            if type(item) is not list or len(item) != 3:
                continue
            key, job_id, left = item
            query = queries.get(key) if type(key) is bytes else None
            if query is None or sender.id not in query.peers or type(left) is not int:
                continue
            if type(job_id) is bytes and 0 < left <= MAX_TTL_MS:
                del queries[key]
                self.node.dedup.record(key, job_id, now_ms() + left)
                self.node.dedup.hits += len(self.pending.get(key, ()))
                self._finish(key, b"+" + job_id + b"\r\n")
                continue
            query.peers.discard(sender.id)
            if left == BUSY:
                query.busy = True
            if not query.peers:
                del queries[key]
                if query.busy or query.yielded:
                    self._rechecks[key] = (now_ms() + RECHECK_MS, query)
                    self._arm()
                else:
                    self._add(key, query.make_job)

    def _on_forget(self, sender: ClusterNode, fields: list) -> None:
        if len(fields) >= 2 and type(fields[0]) is bytes and type(fields[1]) is bytes:
            self.node.dedup.forget(fields[0], fields[1])

    # -- timeouts -----------------------------------------------------------------------
    def check(self, now: int | None = None) -> None:
        """Fail the queries some peer did not answer in time; ask again the keys
        another node was busy with."""
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
        due = [key for key, (when, _) in self._rechecks.items() if when <= now]
        for key in due:
            query = self._rechecks.pop(key)[1]
            if now - query.started > MAX_WAIT_MS:
                self._finish(key, _TOO_LONG)
            else:
                self._ask(key, query)

    def _arm(self) -> None:
        """One timer for everything: the oldest query's deadline or the next recheck."""
        if not (self._queries or self._rechecks):
            return
        loop = self._loop
        if loop is None:
            try:
                loop = self._loop = asyncio.get_running_loop()
            except RuntimeError:
                return  # no loop (unit tests): the test calls check()
        at = min((when for when, _ in self._rechecks.values()), default=None)
        if self._queries:
            first = next(iter(self._queries.values())).deadline
            at = first if at is None else min(at, first)
        assert at is not None
        if self._timer is not None:
            if self._timer_at <= at:
                return
            self._timer.cancel()  # a recheck comes before the deadline it waits for
        self._timer_at = at
        delay = max(at - now_ms(), 0) + CHECK_SLACK_MS
        self._timer = loop.call_later(delay / 1000, self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        self.check()
        self._arm()

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
