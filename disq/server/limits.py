"""Client request limits (disq extensions, off by default): the bookkeeping only, no
I/O, so that it can be tested with a fake clock and plain objects. The connection
(connection.py) refuses the commands; the client registry (clients.py) keeps the
per-IP accounting up to date as clients come and go and as CONFIG SET changes a limit.

- `client-rate-limit N`: commands per second per connection, a `TokenBucket` (refill
  N per second, burst N).
- `maxclients-per-ip N`: `ConnectionsPerIp` keeps each client IP's connections in
  accept order; the first N of an IP are within the limit, the later ones over it.
"""

from __future__ import annotations

import sys
from collections.abc import Hashable
from typing import Generic, Protocol, TypeVar

T = TypeVar("T", bound=Hashable)
_NO_LIMIT = sys.maxsize


class IpLimited(Hashable, Protocol):
    """A connection counted per IP: a RESP client, or an HTTP port's connection."""

    def set_over_ip_limit(self, over: bool) -> None: ...


class TokenBucket:
    """`rate` tokens a second, at most `rate` held (the burst); a command takes one.
    Time is passed in (seconds, a monotonic clock), so the caller picks the clock."""

    __slots__ = ("rate", "tokens", "stamp")

    def __init__(self, rate: float, now: float) -> None:
        self.rate = rate
        self.tokens = float(rate)  # a new connection may burst at once
        self.stamp = now

    def _refill(self, now: float) -> None:
        if now > self.stamp:
            tokens = self.tokens + (now - self.stamp) * self.rate
            self.tokens = tokens if tokens < self.rate else float(self.rate)
            self.stamp = now

    def take(self, now: float) -> bool:
        """One token, if there is one (True); else False, and nothing is taken."""
        self._refill(now)
        if self.tokens >= 1.0:
            self.tokens -= 1.0
            return True
        return False

    def set_rate(self, rate: float, now: float) -> None:
        """CONFIG SET: what was earned so far at the old rate is kept, up to the new
        burst; from now on the bucket refills at the new rate."""
        self._refill(now)
        self.rate = rate
        if self.tokens > rate:
            self.tokens = float(rate)


class ConnectionsPerIp(Generic[T]):
    """Each client IP's connections in accept order, and which are over the limit:
    with `limit` N > 0, an IP's first N connections are within it and the later ones
    over it (0: no limit). When one within the limit goes, or the limit is raised, the
    oldest ones over it come within it, in accept order; when it is lowered, the newest
    ones go over it. The methods answer the connections whose state changed."""

    def __init__(self, limit: int = 0) -> None:
        self.limit = limit
        self._by_ip: dict[str, list[T]] = {}

    def count(self, ip: str) -> int:
        return len(self._by_ip.get(ip, ()))

    def add(self, ip: str, conn: T) -> bool:
        """A new connection from `ip`: True if it is within the limit."""
        conns = self._by_ip.setdefault(ip, [])
        conns.append(conn)
        return not self.limit or len(conns) <= self.limit

    def remove(self, ip: str, conn: T) -> list[T]:
        """`conn` closed: the connection of its IP that came within the limit, if any
        (a list of at most one). A connection never added is ignored."""
        conns = self._by_ip.get(ip, [])
        try:
            index = conns.index(conn)
        except ValueError:
            return []
        del conns[index]
        if not conns:
            del self._by_ip[ip]
            return []
        limit = self.limit
        if limit and index < limit <= len(conns):
            return [conns[limit - 1]]  # the oldest over the limit took its place
        return []

    def set_limit(self, limit: int) -> tuple[list[T], list[T]]:
        """A new limit: (the connections that came within it, those now over it)."""
        old, self.limit = self.limit, limit
        old_end, new_end = old or _NO_LIMIT, limit or _NO_LIMIT  # first one over it
        within: list[T] = []
        over: list[T] = []
        for conns in self._by_ip.values():
            if new_end > old_end:
                within.extend(conns[old_end:new_end])
            elif new_end < old_end:
                over.extend(conns[new_end:old_end])
        return within, over
