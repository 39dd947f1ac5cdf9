"""QDEL and QPURGE (disq extensions): a queue's jobs deleted on every node. Sans-IO.

A purge is a time: every job of the queue created before it (its ID's creation time,
on the clock of the node that added it) goes, wherever it is held; a copy of one that
arrives later (a REPLJOB or federation's YOURJOBS from a node that was cut off, a node
that restarts with its AOF) is refused or dropped on arrival. Jobs added after the
purge stay. QDEL also deletes the queue itself (its pause state here; its policy and
subscriptions through their own tables), QPURGE keeps it.

Every node holds every purge, as CRON's schedules (replication/purges.py): a queue's
newest purge wins (ms, then the node that made it: the newer covers the older), and is
kept KEEP_MS, after which a copy older than it is no longer refused (one held by a node
cut off that long: its TTL ends it or it is delivered).
"""

from __future__ import annotations

from typing import Any, Final

from .errors import DisqError

KEEP_MS: Final = 24 * 3600 * 1000
QUEUE_MAX_LEN: Final = 1024  # a peer's purge naming a longer queue is refused
MAX_PURGES: Final = 100_000  # kept on every node (a new one past it sweeps, then fails)


class Purge:
    """Every job of `queue` created before `at` is deleted; `whole`: the queue itself
    too (QDEL). `at` is in a job's ctime units (Unix ms * 1e6 + a counter): the node
    that purges stamps it past every job it created, so that its own jobs are
    exactly those before or after it, even within a millisecond."""

    __slots__ = ("queue", "at", "origin", "whole")

    def __init__(self, queue: bytes, at: int, origin: str, whole: bool) -> None:
        self.queue = queue
        self.at = at
        self.origin = origin  # the node that made it (ties of `at`)
        self.whole = whole

    # What nodes.conf's records expect of an entry (server/records.py): a purge is
    # never deleted, only replaced by a newer one or forgotten after KEEP_MS.
    @property
    def version(self) -> int:
        return self.at

    @property
    def deleted(self) -> bool:
        return False

    def newer_than(self, other: Purge) -> bool:
        return (self.at, self.origin) > (other.at, other.origin)

    def to_wire(self) -> list[Any]:
        return [self.queue, self.at, self.origin, self.whole]

    @classmethod
    def from_wire(cls, data: object) -> Purge | None:
        """`to_wire`'s purge, or None if anything is off (a peer's message)."""
        if type(data) is not list or len(data) != 4:
            return None
        queue, at, origin, whole = data
        if (type(queue) is not bytes or not 0 < len(queue) <= QUEUE_MAX_LEN
                or type(at) is not int or not 0 < at < 1 << 63
                or type(origin) is not str or not 0 < len(origin) <= 64
                or type(whole) is not bool):
            return None
        return cls(queue, at, origin, whole)


class PurgeTable:
    """Every purge this node knows, by queue; `before[queue]`: the time before which a
    job of the queue is refused (one dict lookup per copy arriving)."""

    __slots__ = ("entries", "before")

    def __init__(self) -> None:
        self.entries: dict[bytes, Purge] = {}
        self.before: dict[bytes, int] = {}

    def __len__(self) -> int:
        return len(self.entries)

    def make(self, queue: bytes, origin: str, stamp: int, whole: bool) -> Purge:
        """A new purge made here at ctime `stamp` (`Admission.stamp`; later than the
        queue's last purge, whatever the clocks said), merged."""
        mine = self.entries.get(queue)
        at = stamp if mine is None or stamp > mine.at else mine.at + 1
        if mine is None and len(self.entries) >= MAX_PURGES:
            self.sweep(stamp // 1_000_000)
            if len(self.entries) >= MAX_PURGES:
                raise DisqError("ERR", f"too many queues purged in a day (at most "
                                       f"{MAX_PURGES})")
        purge = Purge(queue, at, origin, whole)
        self.merge(purge)
        return purge

    def merge(self, purge: Purge) -> bool:
        """Take `purge` if newer than this node's for its queue. True if it changed
        (the jobs it names are to be deleted)."""
        mine = self.entries.get(purge.queue)
        if mine is not None and not purge.newer_than(mine):
            return False
        if mine is None and len(self.entries) >= MAX_PURGES:
            return False
        self.entries[purge.queue] = purge
        self.before[purge.queue] = purge.at
        return True

    def refuses(self, queue: bytes | None, ctime: int) -> bool:
        """Whether a job of `queue` created at `ctime` was purged."""
        at = self.before.get(queue) if queue is not None else None
        return at is not None and ctime < at

    def sweep(self, now: int) -> None:
        """Forget the purges older than KEEP_MS."""
        for queue in [q for q, p in self.entries.items()
                      if p.at // 1_000_000 + KEEP_MS < now]:
            del self.entries[queue]
            del self.before[queue]
