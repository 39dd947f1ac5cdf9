"""Client limits' bookkeeping (disq/server/limits.py), without a server: the token
bucket of client-rate-limit on a fake clock, and maxclients-per-ip's accounting of
each IP's connections in accept order."""

from __future__ import annotations

import pytest

from disq.server.limits import ConnectionsPerIp, TokenBucket


def takes(bucket: TokenBucket, now: float, n: int) -> list[bool]:
    return [bucket.take(now) for _ in range(n)]


# -- TokenBucket -------------------------------------------------------------------------------

def test_a_new_bucket_allows_a_burst_of_rate_then_refuses() -> None:
    bucket = TokenBucket(5, now=100.0)
    assert takes(bucket, 100.0, 7) == [True] * 5 + [False] * 2


def test_the_bucket_refills_rate_tokens_a_second() -> None:
    bucket = TokenBucket(10, now=0.0)
    assert takes(bucket, 0.0, 10) == [True] * 10
    assert not bucket.take(0.05)  # half a token
    assert bucket.take(0.1)  # one
    assert not bucket.take(0.1)
    assert takes(bucket, 0.4, 4) == [True, True, True, False]  # 0.3 s: 3 tokens


def test_the_bucket_never_holds_more_than_its_burst() -> None:
    bucket = TokenBucket(3, now=0.0)
    assert takes(bucket, 0.0, 3) == [True] * 3
    assert takes(bucket, 1000.0, 4) == [True] * 3 + [False]


def test_a_refusal_takes_nothing() -> None:
    bucket = TokenBucket(2, now=0.0)
    assert takes(bucket, 0.0, 2) == [True, True]
    assert takes(bucket, 0.25, 50) == [False] * 50  # half a token, refused 50 times
    assert bucket.take(0.5)  # the refusals did not use up the refill


def test_a_clock_going_back_adds_nothing() -> None:
    bucket = TokenBucket(1, now=10.0)
    assert bucket.take(10.0)
    assert not bucket.take(9.0)
    assert not bucket.take(10.5)
    assert bucket.take(11.0)


def test_a_lower_rate_caps_the_tokens_a_higher_one_refills_faster() -> None:
    bucket = TokenBucket(10, now=0.0)
    bucket.set_rate(2, now=0.0)
    assert takes(bucket, 0.0, 3) == [True, True, False]
    bucket.set_rate(100, now=0.0)
    assert takes(bucket, 0.05, 6) == [True] * 5 + [False]  # 100/s: 5 in 50 ms


def test_set_rate_keeps_what_was_earned_at_the_old_rate() -> None:
    bucket = TokenBucket(4, now=0.0)
    assert takes(bucket, 0.0, 4) == [True] * 4
    bucket.set_rate(1000, now=0.5)  # 2 tokens earned at 4/s, none more at 1000/s yet
    assert takes(bucket, 0.5, 3) == [True, True, False]


# -- ConnectionsPerIp --------------------------------------------------------------------------

def test_without_a_limit_every_connection_is_within() -> None:
    per_ip: ConnectionsPerIp[str] = ConnectionsPerIp()
    assert all(per_ip.add("10.0.0.1", f"c{n}") for n in range(100))
    assert per_ip.count("10.0.0.1") == 100
    assert per_ip.remove("10.0.0.1", "c0") == []


def test_connections_beyond_the_limit_are_over_it_per_ip() -> None:
    per_ip: ConnectionsPerIp[str] = ConnectionsPerIp(2)
    assert [per_ip.add("a", c) for c in ("a1", "a2", "a3", "a4")] == [True, True, False, False]
    assert per_ip.add("b", "b1") and per_ip.add("b", "b2")  # another IP: its own count
    assert not per_ip.add("b", "b3")


def test_a_closed_connection_lets_the_oldest_over_the_limit_in() -> None:
    per_ip: ConnectionsPerIp[str] = ConnectionsPerIp(2)
    for c in ("c1", "c2", "c3", "c4"):
        per_ip.add("ip", c)
    assert per_ip.remove("ip", "c2") == ["c3"]  # accept order
    assert per_ip.remove("ip", "c4") == []  # it was over the limit: nothing changes
    assert per_ip.remove("ip", "c1") == []  # c3 is now 2nd of 2: nobody was waiting
    assert per_ip.add("ip", "c5") is True
    assert per_ip.add("ip", "c6") is False
    assert per_ip.remove("ip", "c3") == ["c6"]


def test_removing_an_unknown_connection_is_ignored() -> None:
    per_ip: ConnectionsPerIp[str] = ConnectionsPerIp(1)
    assert per_ip.remove("ip", "never added") == []
    per_ip.add("ip", "c1")
    assert per_ip.remove("ip", "other") == []
    assert per_ip.remove("ip", "c1") == []
    assert per_ip.count("ip") == 0


@pytest.mark.parametrize(("old", "new", "within", "over"), [
    (2, 4, ["c3", "c4"], []),           # raised: the oldest over it come in
    (2, 0, ["c3", "c4", "c5"], []),     # off: all of them
    (4, 2, [], ["c3", "c4"]),           # lowered: the newest go over it
    (0, 3, [], ["c4", "c5"]),           # on
    (0, 0, [], []),
    (3, 3, [], []),
])
def test_a_new_limit_answers_who_changed(old: int, new: int, within: list[str],
                                         over: list[str]) -> None:
    per_ip: ConnectionsPerIp[str] = ConnectionsPerIp(old)
    for n in range(1, 6):
        per_ip.add("ip", f"c{n}")
    assert per_ip.set_limit(new) == (within, over)
    assert per_ip.limit == new
    assert per_ip.add("ip", "c6") is (new == 0)
    # the first one over the new limit comes in when the oldest goes
    assert per_ip.remove("ip", "c1") == ([f"c{new + 1}"] if new else [])


def test_a_new_limit_applies_to_every_ip() -> None:
    per_ip: ConnectionsPerIp[str] = ConnectionsPerIp()
    for ip in ("a", "b"):
        for n in range(3):
            per_ip.add(ip, f"{ip}{n}")
    assert per_ip.set_limit(1) == ([], ["a1", "a2", "b1", "b2"])
    assert per_ip.set_limit(2) == (["a1", "b1"], [])
