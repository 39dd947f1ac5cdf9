"""Asking every node about a DEDUP key (dedup_checks.py's "Asking every node"): the
DEDUP_QUERYs this node has out, the DEDUP_REPLYs it gathers, each query's deadline,
the keys to ask again later, and the one timer for all of them. A part of `Dedup`
(dedup_checks.py), which owns it (`Dedup.queries`) and decides what a query's outcome
means: `Dedup.found` (a peer named the key's job), `Dedup.add_unless_held` (every peer
said it does not know the key), `Dedup.finish` (a peer did not answer in time, or
another node was adding the key for too long).

Links: the peers asked are those this node can send to now, and those it has yet to
reach (`BusPort.reaching_peers`): not dialled since it started (restarted by kill -9,
it has forgotten its keys, while nodes.conf lists peers that may know them, and its
first dials leave on the bus's first tick), or whose link dropped after it carried
messages and is being dialled again (the peer was reachable, it may know keys this node
never asked it about). Each gets the query once its link is up (looked at every
RECHECK_MS), within the same DEDUP_TIMEOUT_MS. A peer whose dial failed (connection
refused: a killed node, which knows no key once restarted), whose link was given up as
stuck or closed before it carried messages, or that is PFAIL/FAIL, is not waited for.
A cluster whose links are all up pays nothing for this.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any, Final

from ..cluster import messages as m
from ..cluster.membership import ClusterNode
from ..errors import fixed
from ..node import now_ms
from .wire import MAX_TTL_MS

if TYPE_CHECKING:
    from .dedup_checks import Dedup

DEDUP_TIMEOUT_MS: Final = 2000  # every asked peer answers within this, or ADDJOB fails
RECHECK_MS: Final = 20  # a node adding the key itself answered "busy": ask again after this
MAX_WAIT_MS: Final = 15_000  # ... for at most this long in all, then ADDJOB fails (-NOREPL)
BUSY: Final = -1  # DEDUP_REPLY's "ms left" when the sender is adding that key itself
CHECK_SLACK_MS: Final = 10  # the timer fires this long after the oldest deadline

_TIMEOUT: Final = fixed(
    "TIMEOUT", "NOREPL", "Timeout reached before every reachable node answered the DEDUP check")
_TOO_LONG: Final = fixed(
    "TOO_LONG", "NOREPL",
    "Timeout reached while another node was adding a job with this DEDUP key")


class KeyQuery:
    """A key being checked with the peers: who has yet to answer, whether one of them
    is adding the key itself (`busy`) or asked while this node must give way
    (`yielded`): then the check runs again later rather than adding. `unlinked`:
    those of `peers` not asked yet, whose link is expected (`BusPort.reaching_peers`)."""

    __slots__ = ("peers", "unlinked", "deadline", "ttl", "started", "busy", "yielded")

    def __init__(self, ttl: int, now: int) -> None:
        self.peers: set[str] = set()
        self.unlinked: set[str] = set()
        self.deadline = 0
        self.ttl = ttl  # the job's TTL (s): how long the asked nodes keep a reservation
        self.started = now
        self.busy = False
        self.yielded = False


class DedupQueries:
    """The keys this node asks its peers about (`ask`), until each one's outcome."""

    def __init__(self, dedup: Dedup, loop: asyncio.AbstractEventLoop | None) -> None:
        self.dedup = dedup
        self.bus = dedup.bus
        self._loop = loop
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = 0
        self._queries: dict[bytes, KeyQuery] = {}  # ordered by deadline
        self._rechecks: dict[bytes, tuple[int, KeyQuery]] = {}  # key -> (when, query)
        # The queries waiting for a peer's link (KeyQuery.unlinked), looked at every
        # RECHECK_MS from _poll_at on (0: none).
        self._unlinked: dict[bytes, KeyQuery] = {}
        self._poll_at = 0
        self.bus.on(m.DEDUP_REPLY, self._on_reply)

    def query(self, key: bytes) -> KeyQuery | None:
        """The query of `key` under way, or waiting to ask again; None: none."""
        query = self._queries.get(key)
        if query is None:
            entry = self._rechecks.get(key)
            query = entry[1] if entry is not None else None
        return query

    def ask(self, key: bytes, query: KeyQuery) -> None:
        """DEDUP_QUERY to every peer that can be reached (again, after a "busy"), and
        to those this node has yet to reach, once their link is up ("Links")."""
        bus = self.bus
        reachable = bus.reachable_peers()
        peers = {n.id for n in reachable if bus.can_send(n.id)}
        # (A peer without a link: asked only then, so a healthy cluster pays nothing.)
        unlinked = set(bus.reaching_peers()) if len(peers) < len(reachable) else set()
        peers.update(bus.leaving_peers())  # they take no copy, but may know the key
        if not peers and not unlinked:
            self.dedup.add_unless_held(key, query)
            return
        if peers:
            bus.send_batched(peers, m.DEDUP_QUERY, [[key, query.ttl]])
        query.peers = peers | unlinked
        query.unlinked = unlinked
        query.busy = query.yielded = False
        now = now_ms()
        query.deadline = now + DEDUP_TIMEOUT_MS
        self._queries[key] = query
        if unlinked:
            self._unlinked[key] = query
            if not self._poll_at:
                self._poll_at = now + RECHECK_MS
        else:
            self._unlinked.pop(key, None)
        self._arm()

    def ask_later(self, key: bytes, query: KeyQuery, now: int) -> None:
        """Ask about `key` again RECHECK_MS from `now`."""
        self._rechecks[key] = (now + RECHECK_MS, query)
        self._arm()

    def _on_reply(self, sender: ClusterNode, fields: list[Any]) -> None:
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
                self.dedup.found(key, job_id, now_ms() + left)
                continue
            query.peers.discard(sender.id)
            if left == BUSY:
                query.busy = True
            if not query.peers:
                self._answered(key, query)

    def _answered(self, key: bytes, query: KeyQuery) -> None:
        """Every peer of `query` said it does not know `key` (or is busy with it)."""
        del self._queries[key]
        if query.busy or query.yielded:
            self.ask_later(key, query, now_ms())
        else:
            self.dedup.add_unless_held(key, query)

    def _poll(self, now: int) -> None:
        """The queries waiting for a peer's link: ask the peers whose link is up now,
        stop waiting for those this node failed to reach (or that are failing)."""
        bus = self.bus
        reaching: set[str] | None = None
        for key, query in list(self._unlinked.items()):
            if self._queries.get(key) is not query:  # answered, or timed out
                del self._unlinked[key]
                continue
            for node_id in list(query.unlinked):
                if bus.can_send(node_id):
                    bus.send_batched((node_id,), m.DEDUP_QUERY, [[key, query.ttl]])
                    query.unlinked.discard(node_id)
                    continue
                if reaching is None:
                    reaching = set(bus.reaching_peers())
                if node_id not in reaching:
                    query.unlinked.discard(node_id)
                    query.peers.discard(node_id)
            if not query.unlinked:
                del self._unlinked[key]
                if not query.peers:
                    self._answered(key, query)
        self._poll_at = now + RECHECK_MS if self._unlinked else 0

    # -- timeouts -----------------------------------------------------------------------
    def check(self, now: int | None = None) -> None:
        """Fail the queries some peer did not answer in time; ask again the keys
        another node was busy with. (The timer's work; unit tests, without a loop,
        call it.)"""
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
            self.dedup.finish(key, _TIMEOUT())
        if self._unlinked and self._poll_at <= now:
            self._poll(now)
        due = [key for key, (when, _) in self._rechecks.items() if when <= now]
        for key in due:
            query = self._rechecks.pop(key)[1]
            if now - query.started > MAX_WAIT_MS:
                self.dedup.finish(key, _TOO_LONG())
            else:
                self.ask(key, query)

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
        if self._unlinked:
            at = self._poll_at if at is None else min(at, self._poll_at)
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
