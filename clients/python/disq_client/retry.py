"""Retrying: one back-off policy and one list of the errors worth retrying, for the
client's failover, the worker's loops and disq_spark's writer.

A `RetryPolicy` says how many tries an operation gets (`max_attempts`, the first one
included; None: no limit), for how long (`deadline`, seconds from the first try), and
how long to pause before each retry: `base_delay`, times `multiplier` for every retry
after the first, at most `max_delay`, then spread by ±`jitter` (a fraction) so that
clients that failed together do not come back together. It holds no state: an
operation counts its failures itself, or with `Attempts` (which also keeps its start
time, and takes the clock and the random source, so tests run it without sleeping).

Errors: a broken or silent connection (`CONNECTION_ERRORS`) is worth another try, on
the next node; so are the refusals a node gives for now (`TRANSIENT_CODES`: -NOREPL,
-LOADING, -LEAVING, -PAUSED, -MAXLEN, -OOM, -TRYAGAIN), and -LEAVING and -LOADING also
say to move to another node (`MOVE_ON_CODES`).
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass

from .errors import DisqConnectionError, DisqTimeoutError, ResponseError

Clock = Callable[[], float]
Random = Callable[[], float]  # uniform in [0, 1), like random.random

# A node closed the connection, could not be reached, or did not answer in time.
CONNECTION_ERRORS = (DisqConnectionError, DisqTimeoutError)
# Refusals that may pass: not enough copies yet, the node loads its AOF or is leaving,
# the queue is paused or full, the node is out of memory.
TRANSIENT_CODES = frozenset({"NOREPL", "LOADING", "LEAVING", "PAUSED", "MAXLEN", "OOM",
                             "TRYAGAIN"})
# Refusals that will not pass on this node: the next try goes to another one.
MOVE_ON_CODES = frozenset({"LEAVING", "LOADING"})

_MAX_EXPONENT = 64  # past it every delay is max_delay anyway; keeps the power finite


def error_code(message: str) -> str:
    """The code of an error reply: its first word ("NOREPL Timeout..." -> "NOREPL")."""
    return message.split(" ", 1)[0]


def is_transient(exc: BaseException) -> bool:
    """Whether an error may pass if the operation is tried again (maybe elsewhere)."""
    if isinstance(exc, ResponseError):
        return exc.code in TRANSIENT_CODES
    return isinstance(exc, CONNECTION_ERRORS)


def moves_on(exc: ResponseError) -> bool:
    """Whether the node refused for a reason that holds on it: try another node."""
    return exc.code in MOVE_ON_CODES


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How often and how fast to try an operation again (see the module's docstring)."""

    max_attempts: int | None = 10
    base_delay: float = 0.05
    max_delay: float = 2.0
    multiplier: float = 2.0
    jitter: float = 0.5
    deadline: float | None = None

    def __post_init__(self) -> None:
        if self.max_attempts is not None and self.max_attempts < 1:
            raise ValueError("max_attempts must be at least 1 (or None for no limit)")
        if self.base_delay < 0 or self.max_delay < 0 or self.multiplier < 1:
            raise ValueError("delays must be >= 0 and the multiplier >= 1")
        if not 0 <= self.jitter <= 1:
            raise ValueError("jitter is a fraction of the delay, between 0 and 1")

    def allows(self, failures: int, elapsed: float = 0.0) -> bool:
        """Whether another try may follow `failures` failed ones, `elapsed` seconds
        after the first try began."""
        if self.max_attempts is not None and failures >= self.max_attempts:
            return False
        return self.deadline is None or elapsed < self.deadline

    def delay(self, retry: int, rand: Random = random.random) -> float:
        """The pause before retry number `retry` (1: the first retry)."""
        base = self.base_delay * self.multiplier ** min(retry - 1, _MAX_EXPONENT)
        pause = min(base, self.max_delay)
        if self.jitter:
            pause *= 1.0 - self.jitter + 2.0 * self.jitter * rand()
        return pause

    def attempts(self, clock: Clock = time.monotonic,
                 rand: Random = random.random) -> Attempts:
        """A counter of one operation's tries under this policy, started now."""
        return Attempts(self, clock, rand)


class Attempts:
    """One operation's tries: call `failed()` after each failed try; it gives the pause
    before the next one, or None when the policy allows no more. `succeeded()` starts
    the count again (a loop that runs for ever, backing off only while it fails)."""

    __slots__ = ("_clock", "_rand", "failures", "policy", "started")

    def __init__(self, policy: RetryPolicy, clock: Clock = time.monotonic,
                 rand: Random = random.random) -> None:
        self.policy = policy
        self._clock = clock
        self._rand = rand
        self.failures = 0
        self.started = clock()

    def failed(self) -> float | None:
        """One more try failed: the pause before the next, None to give up. A pause
        that would end past the deadline gives up now rather than sleep in vain."""
        self.failures += 1
        policy = self.policy
        if not policy.allows(self.failures, self._clock() - self.started):
            return None
        pause = policy.delay(self.failures, self._rand)
        if policy.deadline is not None and \
                self._clock() + pause - self.started >= policy.deadline:
            return None
        return pause

    def succeeded(self) -> None:
        self.failures = 0
        self.started = self._clock()
