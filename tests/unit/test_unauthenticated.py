"""Redis's limits for a client that has not authenticated (resp.UnauthenticatedRequests),
without a server: the first request over them found from its header, wherever the
reads split the stream, and every request within them let through."""

from __future__ import annotations

import random

import pytest

from disq.server.resp import (
    UNAUTH_MAX_ARGS,
    UNAUTH_MAX_BULK,
    UNAUTH_MAX_INLINE,
    UnauthenticatedRequests,
)

MAX_BULK = 512 * 1024 * 1024  # proto-max-bulk-len's default
MAX_ARGS = 1024 * 1024  # proto-max-multibulk-len's


def multibulk(*args: bytes) -> bytes:
    return b"*%d\r\n" % len(args) + b"".join(b"$%d\r\n%s\r\n" % (len(a), a) for a in args)


def scan_in_reads(stream: bytes, cuts: list[int], refused_at: int = -1) -> tuple[int, str]:
    """The stream in reads ending at `cuts`: (the offset in the stream of the request
    refused, or -1; the message). A refusal at 0 in a read that began after
    `refused_at` (the request expected) says that the request began in an earlier read:
    that one, if it did."""
    limits = UnauthenticatedRequests()
    begin = 0
    for end in [*cuts, len(stream)]:
        found = limits.scan(stream[begin:end], MAX_BULK, MAX_ARGS)
        if found >= 0:
            if found == 0 and 0 <= refused_at < begin:
                return refused_at, limits.message
            return begin + found, limits.message
        begin = end
    return -1, ""


def every_split(stream: bytes, refused_at: int = -1) -> list[tuple[int, str]]:
    """The answer with the stream whole, in two reads at every point, byte by byte."""
    answers = [scan_in_reads(stream, [], refused_at)]
    answers += [scan_in_reads(stream, [i], refused_at) for i in range(1, len(stream))]
    answers.append(scan_in_reads(stream, list(range(1, len(stream))), refused_at))
    return answers


WITHIN = [
    b"AUTH pw\r\n",
    multibulk(b"AUTH", b"user", b"pw"),
    multibulk(b"HELLO", b"3", b"AUTH", b"user", b"pw", b"SETNAME", b"name"),
    multibulk(*[b"x"] * UNAUTH_MAX_ARGS),
    b"\r\n", b"*0\r\n", b"*-1\r\n", b"*-5\r\n",
    b"$5\r\n", b"+OK\r\n",  # reply-shaped lines are inline requests, as in Redis
]
AT_THE_LIMITS = [
    multibulk(b"PING", b"y" * UNAUTH_MAX_BULK),
    b"PING " + b"z" * (UNAUTH_MAX_INLINE - 7) + b"\r\n",  # (its CR counts)
]


def test_requests_within_the_limits_pass_wherever_the_reads_split() -> None:
    stream = b"".join(WITHIN)
    assert every_split(stream) == [(-1, "")] * (len(stream) + 1)
    for request in AT_THE_LIMITS:
        stream = b"".join(WITHIN) + request + b"".join(WITHIN)
        assert scan_in_reads(stream, []) == (-1, "")
        assert scan_in_reads(stream, list(range(1, len(stream), 97))) == (-1, "")
        assert scan_in_reads(stream, list(range(1, len(stream), 4096))) == (-1, "")


@pytest.mark.parametrize("request_, message", [
    (b"*11\r\n", "unauthenticated multibulk length"),
    (b"*1000000\r\n", "unauthenticated multibulk length"),
    (b"*1\r\n$500000000\r\n", "unauthenticated bulk length"),
    (b"*2\r\n$4\r\nAUTH\r\n$16385\r\n", "unauthenticated bulk length"),
    (b"*1\r\n$600000000\r\n", "invalid bulk length"),  # over proto-max-bulk-len first
    (b"*1\r\n$-1\r\n", "invalid bulk length"),
    (b"*abc\r\n", "invalid multibulk length"),
    (b"*3000000000\r\n", "invalid multibulk length"),
    (b"*1\r\n:5\r\n", "expected '$', got ':'"),
    (b"*1\r\n" + b"$" + b"1" * 40, "unauthenticated bulk length"),  # no end in sight
    (b"*" + b"1" * 40, "unauthenticated multibulk length"),
    (b"x" * (UNAUTH_MAX_INLINE + 1), "unauthenticated inline length"),
])
def test_the_first_request_over_them_is_found_from_its_header(request_: bytes,
                                                              message: str) -> None:
    before = b"".join(WITHIN)
    answers = every_split(before + request_, len(before))
    assert answers == [(len(before), message)] * len(answers)


def test_a_refusal_points_at_the_request_begun_in_an_earlier_read() -> None:
    limits = UnauthenticatedRequests()
    assert limits.scan(b"PING\r\n*2\r\n$4\r\nPI", MAX_BULK, MAX_ARGS) == -1
    assert limits.scan(b"NG\r\n$20000\r\n", MAX_BULK, MAX_ARGS) == 0
    assert limits.message == "unauthenticated bulk length"


def test_random_streams_stay_in_step() -> None:
    """Random requests within the limits, in random reads, then one over them: found
    where it begins, so the follower never lost its place."""
    rng = random.Random(7)
    for _ in range(200):
        requests = []
        for _ in range(rng.randrange(1, 8)):
            if rng.random() < 0.3:
                requests.append(b"PING " + b"a" * rng.randrange(0, 300) + b"\r\n")
            else:
                args = [bytes(rng.randrange(256) for _ in range(rng.choice((0, 1, 5, 900))))
                        for _ in range(rng.randrange(1, UNAUTH_MAX_ARGS + 1))]
                requests.append(multibulk(*args))
        stream = b"".join(requests)
        over = multibulk(b"PING", b"b" * (UNAUTH_MAX_BULK + 1))
        cuts = sorted(rng.sample(range(1, len(stream) + len(over)), 5))
        assert scan_in_reads(stream + over, cuts, len(stream)) == (
            len(stream), "unauthenticated bulk length")
