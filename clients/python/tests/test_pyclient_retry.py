"""disq_client.retry without a server or a sleep: the back-off policy with an injected
clock and random source, the errors worth retrying, and the policies the worker and
the Spark writer build from it."""

from __future__ import annotations

import pytest
from disq_client import worker
from disq_client.errors import (
    AuthenticationError,
    DisqConnectionError,
    DisqTimeoutError,
    ProtocolError,
    from_reply,
)
from disq_client.retry import (
    Attempts,
    RetryPolicy,
    error_code,
    is_transient,
    moves_on,
)


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_delays_grow_exponentially_up_to_the_cap() -> None:
    policy = RetryPolicy(base_delay=0.05, max_delay=1.0, jitter=0.0)
    assert [policy.delay(n) for n in range(1, 8)] == [0.05, 0.1, 0.2, 0.4, 0.8, 1.0, 1.0]
    assert policy.delay(100_000) == 1.0  # a loop that failed for days: no overflow
    assert RetryPolicy(base_delay=0.1, max_delay=0.5, multiplier=5.0,
                       jitter=0.0).delay(2) == 0.5


def test_jitter_spreads_each_delay_by_the_fraction() -> None:
    policy = RetryPolicy(base_delay=1.0, max_delay=10.0, jitter=0.5)
    assert policy.delay(1, lambda: 0.0) == 0.5
    assert policy.delay(1, lambda: 0.5) == 1.0
    assert policy.delay(2, lambda: 0.75) == 2.5
    assert policy.delay(9, lambda: 0.999) == pytest.approx(14.99)  # the cap, jittered


def test_max_attempts_counts_the_first_try() -> None:
    policy = RetryPolicy(max_attempts=3)
    assert [policy.allows(n) for n in (1, 2, 3, 4)] == [True, True, False, False]
    assert RetryPolicy(max_attempts=None).allows(10**9)
    assert not RetryPolicy(max_attempts=1).allows(1)  # no retry at all


def test_attempts_pause_then_give_up() -> None:
    clock = FakeClock()
    attempts = RetryPolicy(max_attempts=4, base_delay=0.1, jitter=0.5).attempts(
        clock, rand=lambda: 0.25)
    assert [attempts.failed(), attempts.failed(), attempts.failed()] == [
        pytest.approx(0.075), pytest.approx(0.15), pytest.approx(0.3)]
    assert attempts.failed() is None and attempts.failures == 4


def test_a_deadline_bounds_the_tries_whatever_their_number() -> None:
    clock = FakeClock()
    attempts = Attempts(RetryPolicy(max_attempts=None, base_delay=1.0, max_delay=1.0,
                                    jitter=0.0, deadline=5.0), clock)
    assert attempts.failed() == 1.0
    clock.now += 3.5
    assert attempts.failed() == 1.0  # the retry starts at 4.5 s, within the deadline
    clock.now += 0.6
    assert attempts.failed() is None  # it would start at 5.1 s: give up now, not sleep
    clock.now += 10
    assert attempts.failed() is None


def test_success_starts_the_count_again() -> None:
    clock = FakeClock()
    attempts = RetryPolicy(max_attempts=2, base_delay=0.2, jitter=0.0,
                           deadline=10.0).attempts(clock)
    assert attempts.failed() == 0.2
    clock.now += 9.0
    attempts.succeeded()
    assert attempts.failures == 0 and attempts.started == clock.now
    assert attempts.failed() == 0.2  # a fresh count and a fresh deadline


def test_a_policy_refuses_nonsense() -> None:
    for bad in ({"max_attempts": 0}, {"base_delay": -1.0}, {"multiplier": 0.5},
                {"jitter": 1.5}):
        with pytest.raises(ValueError):
            RetryPolicy(**bad)  # type: ignore[arg-type]


def test_which_errors_are_worth_another_try() -> None:
    assert is_transient(DisqConnectionError("closed"))
    assert is_transient(DisqTimeoutError("no reply"))
    for reply in ("NOREPL Timeout", "LOADING", "LEAVING This node is leaving",
                  "PAUSED Queue paused", "MAXLEN Queue is full", "OOM no memory",
                  "TRYAGAIN"):
        assert is_transient(from_reply(reply)), reply
    for reply in ("ERR syntax error", "BADID Invalid Job ID", "NOJOB", "TOOLATE",
                  "NOAUTH Authentication required"):
        assert not is_transient(from_reply(reply)), reply
    assert not is_transient(ProtocolError("not RESP"))
    assert not is_transient(AuthenticationError("WRONGPASS", "WRONGPASS"))
    assert moves_on(from_reply("LEAVING This node is leaving"))
    assert moves_on(from_reply("LOADING"))
    assert not moves_on(from_reply("NOREPL Timeout"))
    assert error_code("NOREPL Timeout reached") == "NOREPL" and error_code("OOM") == "OOM"


def test_the_workers_policies() -> None:
    """Fetching backs off to 2 s and never gives up; ACK/NACK get 3 tries, 0.1 s then
    0.5 s apart (what the worker did before the policy was shared)."""
    fetch = worker.FETCH_RETRY
    assert fetch.allows(10**6)
    assert [fetch.delay(n, lambda: 0.5) for n in (1, 2, 6, 50)] == [0.05, 0.1, 1.6, 2.0]
    settle = worker.SETTLE_RETRY
    assert [settle.allows(n) for n in (1, 2, 3)] == [True, True, False]
    assert [settle.delay(1), settle.delay(2)] == [0.1, 0.5]
