"""How jobs ended (a disq extension): the result an `ACKJOB id RESULT blob` gave, kept on
the job's holders apart from the job, so that the ACK's garbage collection does not
erase it, and the WAITJOB requests waiting for jobs to end.

A result is kept for its queue's RESULT-TTL (QPOLICY; an hour without one; 0 keeps
none), bounded by memory: results count in `used_memory` (`Ends.bytes`), and the
oldest go first when the node's jobs and results are over the 95% mark of maxmemory.
A job run twice (at least once) keeps its first result; the others are counted
(`JobEnd.repeats`).

The store is sans-IO: what a result or an end means for other nodes (the SETACK that
carries a result to the holders, a WAITJOB asking the nodes that hold a job) is
replication/ends.py; the server's WAITJOB waits through `watch`.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Final, Protocol

from .gcfree import untrack

ACKED_END: Final = b"acked"
DEAD_END: Final = b"dead"
DEFAULT_RESULT_TTL_MS: Final = 3_600_000  # a queue without a RESULT-TTL policy
# What a kept result costs beyond its ID's and data's bytes, as used_memory counts it:
# the record (~80 bytes), the two bytes objects' headers (~70), its dict entry (~100 at
# a large dict's fill) and its place in a deque. bench/job_ends.py measures RSS per
# kept result: 747 bytes for 100-byte results, 40-byte IDs, with the acknowledged jobs'
# own leftovers (their timer entries until their time) in it.
END_FOOTPRINT: Final = 260
EXPIRE_BUDGET: Final = 1000  # results dropped per cron run at most


class JobEnd:
    """How one job ended (`how`): ACKED_END (with the RESULT given, `data`, None for a
    plain ACKJOB) or DEAD_END (with its last error); kept until `expires` (Unix ms);
    `queue`: the job's (a user restricted to some queues reads only theirs).
    (`how`, not `state`: a job's state has one writer, lifecycle.py.)"""

    __slots__ = ("job_id", "how", "data", "expires", "ttl", "repeats", "queue")

    def __init__(self, job_id: bytes, how: bytes, data: bytes | None, expires: int,
                 ttl: int, queue: bytes | None = None) -> None:
        self.job_id = job_id
        self.queue = queue
        self.how = how
        self.data = data
        self.expires = expires
        self.ttl = ttl  # ms: the expiry queue it is in
        self.repeats = 0  # results given again (a job run more than once)
        untrack(self)  # holds only bytes and ints (see gcfree.py)

    @property
    def kept_at(self) -> int:
        """When the job ended (Unix ms), as its result's time says: a peer's result
        expires when it does where it was given (`Ends.keep`'s `left_ms`)."""
        return self.expires - self.ttl

    @property
    def size(self) -> int:
        return END_FOOTPRINT + len(self.job_id) + len(self.data or b"")


class EndWatcher(Protocol):
    """Someone waiting for jobs to end (a WAITJOB, here or on another node)."""

    def job_ended(self, job_id: bytes) -> None: ...

    def job_left(self, job_id: bytes) -> None:
        """The job is no longer here and did not end here: federation moved it to
        another node, its TTL ran out, DELJOB, eviction, a copy dropped. Whoever
        waits must look for it elsewhere (its other holders may still have it)."""


class Ends:
    """The results this node keeps, and who waits for which job to end.

    Expiry: the results of one TTL expire in the order they were kept, so each TTL has
    a FIFO queue (a node has few TTLs: one per RESULT-TTL policy), and the cron drops
    from their heads (`expire`); eviction takes the oldest of the heads (`evict`). A
    result dropped or kept again leaves a stale entry behind, skipped when reached.

    Watching: `watch(job_id, watcher)`; when the core sees a job end (`ended`) or leave
    this node without ending (`left`), its watchers are told once the current
    operation is over (`serve_ready`, which `on_ready` has the server run at the end
    of the loop turn), never inside it. A job that ended and then left in one
    operation (an ACK whose job is deleted at once) is told as ended."""

    __slots__ = ("kept", "_expiring", "bytes", "watchers", "_ready", "on_ready",
                 "evicted", "expired", "repeats")

    def __init__(self) -> None:
        self.kept: dict[bytes, JobEnd] = {}
        self._expiring: dict[int, deque[JobEnd]] = {}
        self.bytes = 0  # what used_memory counts for the kept results
        self.watchers: dict[bytes, list[EndWatcher]] = {}
        self._ready: dict[bytes, bool] = {}  # job ID -> ended (else left)
        self.on_ready: Callable[[], None] = _nothing
        self.evicted = self.expired = self.repeats = 0

    def __len__(self) -> int:
        return len(self.kept)

    # -- the results -----------------------------------------------------------------------
    def keep(self, job_id: bytes, state: bytes, data: bytes | None, ttl_ms: int,
             now: int, queue: bytes | None = None, left_ms: int | None = None) -> bool:
        """Keep how `job_id` ended for `ttl_ms` (its queue's RESULT-TTL), or `left_ms`
        if less (a result from another node: what is left of its time there); False
        if it was kept already (the first result stays; this one is counted) or
        `ttl_ms` is 0. The expiry FIFO is the TTL's, never one per `left_ms`: a
        result from a peer may then expire before the one ahead of it, and `expire`
        drops it when it reaches it (`get` never shows it past its time)."""
        end = self.kept.get(job_id)
        if end is not None and end.expires > now:
            if data is not None or state != end.how:
                end.repeats += 1
                self.repeats += 1
            return False
        if ttl_ms <= 0:
            return False
        if end is not None:
            self._drop(end)
        life = ttl_ms if left_ms is None else max(min(ttl_ms, left_ms), 1)
        self._add(JobEnd(job_id, state, data, now + life, ttl_ms, queue))
        return True

    def load(self, end: JobEnd, now: int) -> bool:
        """Keep a result as the AOF recorded it (its own expiry time): False if past
        it, or if the job has a result kept already (the first stays, as in `keep`;
        not counted as a repeat: it was counted when it came)."""
        if end.expires <= now or end.ttl <= 0:
            return False
        kept = self.kept.get(end.job_id)
        if kept is not None:
            if kept.expires > now:
                return False
            self._drop(kept)
        self._add(end)
        return True

    def order_expiry(self) -> None:
        """After loading: each TTL's results in the order they expire. A rewrite
        writes the results kept while it ran before the older ones it lists, and
        `expire` looks only at the heads: a newer head would keep the older ones
        in memory until it expires itself (readers never see them: `get` checks)."""
        for ttl, line in self._expiring.items():  # (a sorted line: one pass)
            self._expiring[ttl] = deque(sorted(line, key=_expires))

    def _add(self, end: JobEnd) -> None:
        self.kept[end.job_id] = end
        self.bytes += end.size
        line = self._expiring.get(end.ttl)
        if line is None:
            self._expiring[end.ttl] = line = deque()
        line.append(end)

    def get(self, job_id: bytes, now: int) -> JobEnd | None:
        end = self.kept.get(job_id)
        return end if end is not None and end.expires > now else None

    def newest(self, now: int, wanted: Callable[[JobEnd], bool], limit: int,
               walk: int) -> tuple[list[JobEnd], bool]:
        """The first `limit` results not past their time that `wanted` takes, the last
        kept first (the order `kept` got them in: a result kept again after its time
        is the newest), walking at most `walk` of them: a listing of a rare queue's
        among many never holds the loop long. `complete`: False if the walk stopped
        short of `limit` with results left unseen."""
        taken: list[JobEnd] = []
        walked = 0
        kept = self.kept
        for job_id in reversed(kept):
            end = kept[job_id]
            if end.expires <= now:
                continue
            if walked == walk:
                return taken, False
            walked += 1
            if wanted(end):
                taken.append(end)
                if len(taken) == limit:
                    break
        return taken, True

    def _drop(self, end: JobEnd) -> None:
        if self.kept.get(end.job_id) is end:
            del self.kept[end.job_id]
            self.bytes -= end.size

    def expire(self, now: int, budget: int = EXPIRE_BUDGET) -> int:
        """Drop the results past their time (at most `budget` entries looked at)."""
        dropped = 0
        for ttl in list(self._expiring):
            line = self._expiring[ttl]
            while line and budget > 0 and (line[0].expires <= now
                                          or self.kept.get(line[0].job_id) is not line[0]):
                end = line.popleft()
                budget -= 1
                if self.kept.get(end.job_id) is end:
                    self._drop(end)
                    dropped += 1
            if not line:
                del self._expiring[ttl]
        self.expired += dropped
        return dropped

    def evict(self, target_bytes: int) -> int:
        """Drop the oldest results until they take at most `target_bytes`."""
        evicted = 0
        while self.bytes > target_bytes and self._expiring:
            oldest: deque[JobEnd] | None = None
            oldest_time = 0
            for ttl, line in list(self._expiring.items()):
                while line and self.kept.get(line[0].job_id) is not line[0]:
                    line.popleft()  # stale
                if not line:
                    del self._expiring[ttl]
                    continue
                kept_at = line[0].expires - ttl
                if oldest is None or kept_at < oldest_time:
                    oldest, oldest_time = line, kept_at
            if oldest is None:
                break
            self._drop(oldest.popleft())
            evicted += 1
        self.evicted += evicted
        return evicted

    def clear(self) -> None:
        self.kept.clear()
        self._expiring.clear()
        self.bytes = 0

    # -- who waits ---------------------------------------------------------------------------
    def watch(self, job_id: bytes, watcher: EndWatcher) -> None:
        watchers = self.watchers.get(job_id)
        if watchers is None:
            self.watchers[job_id] = [watcher]
        elif watcher not in watchers:
            watchers.append(watcher)

    def unwatch(self, job_id: bytes, watcher: EndWatcher) -> None:
        watchers = self.watchers.get(job_id)
        if watchers is not None:
            if watcher in watchers:
                watchers.remove(watcher)
            if not watchers:
                del self.watchers[job_id]

    def ended(self, job_id: bytes) -> None:
        """The job was acked or became a dead letter here: its watchers are told after
        the current operation (the core calls this only when `watchers` is not empty)."""
        if job_id in self.watchers:
            if not self._ready:
                self.on_ready()
            self._ready[job_id] = True

    def left(self, job_id: bytes) -> None:
        """The job left this node without ending here (see `EndWatcher.job_left`):
        its watchers are told after the current operation, unless it ended in it."""
        if job_id in self.watchers and job_id not in self._ready:
            if not self._ready:
                self.on_ready()
            self._ready[job_id] = False

    def serve_ready(self) -> None:
        while self._ready:
            ready, self._ready = self._ready, {}
            for job_id, ended in ready.items():
                watchers = self.watchers.pop(job_id, None)
                for watcher in watchers or ():
                    if ended:
                        watcher.job_ended(job_id)
                    else:
                        watcher.job_left(job_id)


def _nothing() -> None:
    pass


def _expires(end: JobEnd) -> int:
    return end.expires
