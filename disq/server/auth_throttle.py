"""Failed authentications per source address, one table per node: AUTH and HELLO AUTH
(commands/acl.py), the HTTP port and /metrics (http/auth.py) count in it, so that a
source's guesses count the same whatever port and however many connections they
come through (reconnecting every few guesses gains nothing). Bookkeeping only, no
I/O: the time is passed in (seconds, a monotonic clock).

After MAX_FAILURES failures from one source (each within FORGET_S of the one before),
its authentications are refused unchecked for PAUSE_S: at most about ten guesses a
second from one address. A success does not clear the count: else a password the
guesser knows (its own user's) would reset it between guesses. The unix socket is one
source (its clients are local, as loopback's are), named "".

The table is bounded: a source is forgotten FORGET_S after its last failure, and beyond
MAX_SOURCES the one whose last failure is the oldest goes first (many addresses get
more guesses in any case: ten a second each).
"""

from __future__ import annotations

from typing import Final

MAX_FAILURES: Final = 10  # failures from one source before it must wait
PAUSE_S: Final = 1.0  # how long its authentications are refused, unchecked
FORGET_S: Final = 60.0  # a source's failures are forgotten this long after its last one
MAX_SOURCES: Final = 10_000  # sources remembered at once


class _Source:
    __slots__ = ("failures", "last_failure", "paused_until")

    def __init__(self) -> None:
        self.failures = 0
        self.last_failure = 0.0
        self.paused_until = 0.0


class AuthThrottle:
    """Each source's recent failures, oldest last failure first (dict order)."""

    __slots__ = ("_sources", "pauses")

    def __init__(self) -> None:
        self._sources: dict[str, _Source] = {}
        self.pauses = 0  # times a source reached MAX_FAILURES (INFO, /metrics)

    def failing_sources(self, now: float) -> int:
        """Sources with a failure in the last FORGET_S (at most MAX_SOURCES)."""
        self._forget(now)
        return len(self._sources)

    def paused(self, source: str, now: float) -> bool:
        """True while `source` must wait: its authentication is refused, unchecked."""
        entry = self._sources.get(source)
        return entry is not None and entry.paused_until > now

    def failed(self, source: str, now: float) -> None:
        """A failed authentication from `source`."""
        sources = self._sources
        self._forget(now)
        entry = sources.pop(source, None)  # re-inserted last: the newest failure
        if entry is None:
            if len(sources) >= MAX_SOURCES:
                del sources[next(iter(sources))]
            entry = _Source()
        elif now - entry.last_failure > FORGET_S:
            entry.failures = 0
        sources[source] = entry
        entry.last_failure = now
        entry.failures += 1
        if entry.failures >= MAX_FAILURES:
            entry.failures = 0
            entry.paused_until = now + PAUSE_S
            self.pauses += 1

    def _forget(self, now: float) -> None:
        """Drop the sources whose last failure is over FORGET_S old (the first ones:
        each costs one step, once). Their pause ended long before (PAUSE_S < FORGET_S)."""
        sources = self._sources
        while sources:
            source = next(iter(sources))
            if now - sources[source].last_failure <= FORGET_S:
                return
            del sources[source]
