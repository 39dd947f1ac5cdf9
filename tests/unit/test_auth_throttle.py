"""Failed authentications per source (disq/server/auth_throttle.py), on a fake clock:
the pause after MAX_FAILURES, what a success does not do, and the bounded table."""

from __future__ import annotations

from disq.server.auth_throttle import (
    FORGET_S,
    MAX_FAILURES,
    MAX_SOURCES,
    PAUSE_S,
    AuthThrottle,
)


def fail(throttle: AuthThrottle, source: str, now: float, times: int) -> None:
    for _ in range(times):
        assert not throttle.paused(source, now)
        throttle.failed(source, now)


def test_a_source_is_paused_after_max_failures_then_let_in_again() -> None:
    throttle = AuthThrottle()
    fail(throttle, "10.0.0.1", 100.0, MAX_FAILURES - 1)
    assert not throttle.paused("10.0.0.1", 100.0)
    throttle.failed("10.0.0.1", 100.0)
    assert throttle.pauses == 1
    assert throttle.paused("10.0.0.1", 100.0)
    assert throttle.paused("10.0.0.1", 100.0 + PAUSE_S - 0.01)
    assert not throttle.paused("10.0.0.2", 100.0)  # another source is not
    assert not throttle.paused("10.0.0.1", 100.0 + PAUSE_S)
    # after the pause: MAX_FAILURES more, then a pause again
    fail(throttle, "10.0.0.1", 101.5, MAX_FAILURES)
    assert throttle.paused("10.0.0.1", 101.5)
    assert throttle.pauses == 2


def test_failures_count_whatever_the_connection_and_a_success_does_not_clear_them() -> None:
    # the throttle knows sources only: failures on any connection of an address add up,
    # and nothing (a right password in between) takes them back
    throttle = AuthThrottle()
    fail(throttle, "", 0.0, MAX_FAILURES)  # "": the unix socket, one source
    assert throttle.paused("", 0.5)


def test_failures_are_forgotten_long_after_the_last_one() -> None:
    throttle = AuthThrottle()
    fail(throttle, "a", 0.0, MAX_FAILURES - 1)
    fail(throttle, "a", FORGET_S, 1)  # within FORGET_S of the last: counted
    assert throttle.paused("a", FORGET_S)
    fail(throttle, "b", 0.0, MAX_FAILURES - 1)
    throttle.failed("b", FORGET_S + 0.5)  # too late: a new count begins
    assert not throttle.paused("b", FORGET_S + 0.5)
    throttle.failed("c", 3 * FORGET_S)  # each failure drops the sources forgotten
    assert throttle.failing_sources(3 * FORGET_S) == 1
    assert throttle.failing_sources(5 * FORGET_S) == 0  # and so does counting them


def test_the_table_is_bounded_under_many_sources() -> None:
    throttle = AuthThrottle()
    for i in range(MAX_SOURCES):
        throttle.failed(f"10.{i // 65536}.{i // 256 % 256}.{i % 256}", 0.0)
    fail(throttle, "guesser", 0.0, MAX_FAILURES - 1)
    assert throttle.failing_sources(1.0) == MAX_SOURCES
    for i in range(3 * MAX_SOURCES):  # a flood of new addresses
        throttle.failed(f"flood{i}", 1.0)
        assert throttle.failing_sources(1.0) <= MAX_SOURCES
    # the oldest went first; a source failing again stays among the newest
    throttle = AuthThrottle()
    for i in range(MAX_SOURCES):
        now = i / MAX_SOURCES
        throttle.failed(f"s{i}", now)
        if i % 1000 == 0:
            throttle.failed("guesser", now)  # 10 failures in all, among 10,000 sources
    assert throttle.failing_sources(1.0) == MAX_SOURCES
    assert throttle.paused("guesser", 1.0)
    throttle.failed("new", 1.0)
    assert throttle.failing_sources(1.0) == MAX_SOURCES
    assert throttle.paused("guesser", 1.0)
