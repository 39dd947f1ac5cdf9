"""The RESP request parser alone (disq/server/request_parser.py): bytes in, requests or
Redis's protocol error out, with no connection and no server. (test_fuzz_resp.py
checks it behind the real connection, with random inputs.)"""

from __future__ import annotations

import pytest

from disq.server.request_parser import (
    FEED_PIECE,
    INLINE_MAX,
    RequestLimits,
    RequestParser,
)
from disq.server.resp import UNAUTH_MAX_ARGS, UNAUTH_MAX_BULK, UNAUTH_MAX_INLINE

MAX_BULK = 512 * 1024 * 1024  # the directives' defaults
MAX_ARGS = 1024 * 1024
QUERY_BUFFER = 1024 * 1024 * 1024


def limits(max_bulk: int = MAX_BULK, max_args: int = MAX_ARGS,
           query_buffer: int = QUERY_BUFFER) -> RequestLimits:
    return RequestLimits(max_bulk, max_args, query_buffer)


def multibulk(*args: bytes) -> bytes:
    return b"*%d\r\n" % len(args) + b"".join(b"$%d\r\n%s\r\n" % (len(a), a) for a in args)


def parse(data: bytes, cuts: list[int] | None = None,
          parser: RequestParser | None = None) -> tuple[list[list[bytes]], str | None]:
    """The requests and the error of `data` fed in reads ending at `cuts`."""
    parser = parser or RequestParser(limits())
    requests: list[list[bytes]] = []
    begin = 0
    for end in [*(cuts or []), len(data)]:
        requests += parser.feed(data[begin:end])
        begin = end
    return requests, parser.error


def every_split(data: bytes, parser_args: dict[str, object] | None = None,
                ) -> list[tuple[list[list[bytes]], str | None]]:
    """The outcome whole, in two reads cut at every byte, and byte by byte."""
    def fresh() -> RequestParser:
        return RequestParser(**(parser_args or {"limits": limits()}))  # type: ignore[arg-type]
    outcomes = [parse(data, [], fresh())]
    outcomes += [parse(data, [cut], fresh()) for cut in range(1, len(data))]
    outcomes.append(parse(data, list(range(1, len(data))), fresh()))
    return outcomes


PIPELINE = (multibulk(b"ADDJOB", b"q", b"body", b"0") + b"PING\r\n"
            + multibulk(b"GETJOB", b"FROM", b"q") + b"  ACKJOB  D-1  D-2 \n"
            + multibulk(b"") + b"*-1\r\n" + b"*0\r\n" + b"\r\n"
            + multibulk(b"x" * 300))
PIPELINE_REQUESTS = [[b"ADDJOB", b"q", b"body", b"0"], [b"PING"], [b"GETJOB", b"FROM", b"q"],
                     [b"ACKJOB", b"D-1", b"D-2"], [b""], [b"x" * 300]]


def test_pipelined_requests_in_one_read_and_in_every_split() -> None:
    """Multibulk and inline requests mixed; `*-1`, `*0` and an empty line are none."""
    assert every_split(PIPELINE) == [(PIPELINE_REQUESTS, None)] * (len(PIPELINE) + 1)


def test_a_read_larger_than_a_feed_piece_gives_the_same_requests() -> None:
    data = multibulk(b"y" * (FEED_PIECE - 5)) + PIPELINE * 200
    requests = [[b"y" * (FEED_PIECE - 5)], *PIPELINE_REQUESTS * 200]
    assert parse(data) == (requests, None)
    assert parse(data, list(range(1000, len(data), 1000))) == (requests, None)


def test_a_request_begun_in_one_read_is_returned_by_the_read_that_ends_it() -> None:
    parser = RequestParser(limits())
    assert parser.feed(b"*2\r\n$4\r\nPING\r\n$3\r\nab") == []
    assert parser.buffered() > 0
    assert parser.feed(b"c\r\nPI") == [[b"PING", b"abc"]]
    assert parser.feed(b"NG\r\n") == [[b"PING"]]
    assert parser.buffered() == 0 and parser.error is None


@pytest.mark.parametrize("line, args", [
    (b'SET "a b" \'c d\'\r\n', [b"SET", b"a b", b"c d"]),
    (b'ECHO "\\x41\\n\\t\\"" \'it\\\'s\'\n', [b"ECHO", b"A\n\t\"", b"it's"]),
    (b'a"b c"\r\n', [b"ab c"]),  # a quote opens anywhere in a word, as in sdssplitargs
    (b'"" \'\'\r\n', [b"", b""]),
    (b"PING\x0bx\r\n", [b"PING\x0bx"]),  # \v and \f do not separate words
])
def test_inline_requests_with_quotes(line: bytes, args: list[bytes]) -> None:
    assert every_split(line) == [([args], None)] * (len(line) + 1)


# -- protocol errors: Redis's words, after the requests before the bad one -----------------
@pytest.mark.parametrize("bad, error", [
    (b"*abc\r\n", "invalid multibulk length"),
    (b"*-11\n\r\n", "invalid multibulk length"),  # Redis's string2ll refuses "-11\n"
    (b"*1048577\r\n", "invalid multibulk length"),  # over proto-max-multibulk-len
    (b"*1\r\n$-1\r\n", "invalid bulk length"),
    (b"*1\r\n$abc\r\n", "invalid bulk length"),
    (b"*1\r\n$536870913\r\n", "invalid bulk length"),  # over proto-max-bulk-len
    (b"*1\r\n:5\r\n", "expected '$', got ':'"),
    (b"*1\r\n+OK\r\n", "expected '$', got '+'"),
    (b"*1\r\n*1\r\n$4\r\nPING\r\n", "expected '$', got '*'"),
    (b"*1\r\n\n4\r\n", "expected '$', got ' '"),  # CR and LF shown as a space
    (b"*20\r\nxxxx\r\n", "expected '$', got 'x'"),
    (b'SET "a\r\n', "unbalanced quotes in request"),
    (b'SET "a"b\r\n', "unbalanced quotes in request"),
    (b"X" * (INLINE_MAX + 1), "too big inline request"),
])
def test_each_protocol_error_comes_after_the_requests_before_it(bad: bytes,
                                                                error: str) -> None:
    data = PIPELINE + bad
    assert every_split(data) == [(PIPELINE_REQUESTS, error)] * (len(data) + 1)


def test_a_header_hiredis_refuses_is_answered_once_its_cr_arrives_as_in_redis() -> None:
    parser = RequestParser(limits())
    assert parser.feed(b"*20\r\nxxxx") == [] and parser.error is None
    assert parser.feed(b"\r\n") == [] and parser.error == "expected '$', got 'x'"


def test_a_refused_header_that_never_ends_is_refused_at_the_inline_size() -> None:
    parser = RequestParser(limits())
    data = b"*20\r\n" + b"x" * (INLINE_MAX - 5)
    for at in range(0, len(data), 4096):
        assert parser.feed(data[at:at + 4096]) == [] and parser.error is None
    parser.feed(b"x")
    assert parser.error == "too big bulk count string"


def test_after_an_error_nothing_more_is_parsed() -> None:
    parser = RequestParser(limits())
    assert parser.feed(b"PING\r\n*1\r\n:5\r\nPING\r\n") == [[b"PING"]]
    assert parser.error == "expected '$', got ':'"
    assert parser.feed(b"PING\r\n") == []


# -- limits ------------------------------------------------------------------------------
def test_proto_max_bulk_len() -> None:
    at_limit = multibulk(b"SET", b"k" * 10)
    assert every_split(at_limit, {"limits": limits(max_bulk=10)}) == [
        ([[b"SET", b"k" * 10]], None)] * (len(at_limit) + 1)
    over = multibulk(b"SET", b"k" * 11)
    assert every_split(over, {"limits": limits(max_bulk=10)}) == [
        ([], "invalid bulk length")] * (len(over) + 1)


@pytest.mark.parametrize("count", [3, 12, 1500])  # one digit (hiredis's), and header checks
def test_proto_max_multibulk_len(count: int) -> None:
    over = multibulk(*[b"a"] * count)
    assert parse(over, [], RequestParser(limits(max_args=count - 1))) == (
        [], "invalid multibulk length")
    assert parse(over, [], RequestParser(limits(max_args=count))) == ([[b"a"] * count], None)


def test_client_query_buffer_limit() -> None:
    parser = RequestParser(limits(query_buffer=1000))
    assert parser.feed(b"*1\r\n$2000\r\n" + b"z" * 900) == []
    assert parser.error is None
    assert parser.feed(b"z" * 200) == []
    assert parser.error == "client reached the max query buffer length"


def test_the_limits_are_read_as_they_are_now() -> None:
    """One RequestLimits for every parser: CONFIG SET changes it under them."""
    shared = limits()
    parser = RequestParser(shared)
    assert parser.feed(multibulk(b"k" * 20)) == [[b"k" * 20]]
    shared.proto_max_bulk_len = 10
    assert parser.feed(multibulk(b"k" * 20)) == []
    assert parser.error == "invalid bulk length"


@pytest.mark.parametrize("data, error", [
    (b"*1\r\n$536870913\r\n", "invalid bulk length"),
    (b"*2\r\n$4\r\nPING\r\n$9999999999999\r\n", "invalid bulk length"),
    (b"*99999999999\r\n", "invalid multibulk length"),
])
def test_huge_announced_lengths_are_refused_at_their_header(data: bytes, error: str) -> None:
    """At the header's end, whatever the reads, not once the bytes announced came."""
    assert every_split(data) == [([], error)] * (len(data) + 1)
    parser = RequestParser(limits())
    assert parser.feed(data[:-1]) == [] and parser.error is None
    parser.feed(data[-1:])
    assert parser.error == error and parser.buffered() <= len(data)


def test_discard_lets_go_of_what_is_buffered() -> None:
    parser = RequestParser(limits())
    parser.feed(b"*1\r\n$100000\r\n" + b"b" * 50_000)
    assert parser.buffered() >= 50_000
    parser.discard()
    assert parser.buffered() == 0


# -- a client that has not authenticated (a password required) -----------------------------
def unauthenticated() -> dict[str, object]:
    return {"limits": limits(), "unauthenticated": True}


def test_unauthenticated_requests_within_the_limits_pass() -> None:
    data = (PIPELINE + multibulk(*[b"x"] * UNAUTH_MAX_ARGS)
            + multibulk(b"AUTH", b"y" * UNAUTH_MAX_BULK)
            + b"z" * (UNAUTH_MAX_INLINE - 1) + b"\n")
    requests = [*PIPELINE_REQUESTS, [b"x"] * UNAUTH_MAX_ARGS, [b"AUTH", b"y" * UNAUTH_MAX_BULK],
                [b"z" * (UNAUTH_MAX_INLINE - 1)]]
    assert parse(data, [], RequestParser(limits(), True)) == (requests, None)
    cuts = list(range(1, len(data), 997))
    assert parse(data, cuts, RequestParser(limits(), True)) == (requests, None)


@pytest.mark.parametrize("over, error", [
    (b"*11\r\n", "unauthenticated multibulk length"),
    (b"*1\r\n$500000000\r\n", "unauthenticated bulk length"),
    (b"*2\r\n$4\r\nAUTH\r\n$16385\r\n", "unauthenticated bulk length"),
    (b"x" * (UNAUTH_MAX_INLINE + 1), "unauthenticated inline length"),
    (b"*1\r\n$600000000\r\n", "invalid bulk length"),  # over proto-max-bulk-len first
])
def test_an_unauthenticated_client_is_stopped_at_the_first_request_over_them(
        over: bytes, error: str) -> None:
    data = PIPELINE + over
    for requests, got in every_split(data, unauthenticated()):
        assert (requests, got) == (PIPELINE_REQUESTS, error)
    parser = RequestParser(limits(), True)
    parser.feed(data)
    assert parser.waiting_for_auth and parser.buffered() < 64 * 1024


def test_once_authenticated_the_request_held_and_the_rest_are_parsed() -> None:
    """A pipelined AUTH before the request over the limits lifts them (the connection
    runs the requests before it, then says so)."""
    big = multibulk(b"ADDJOB", b"q", b"b" * (UNAUTH_MAX_BULK + 1), b"0")
    parser = RequestParser(limits(), True)
    assert parser.feed(b"AUTH pw\r\n" + big[:100]) == [[b"AUTH", b"pw"]]
    assert parser.error == "unauthenticated bulk length" and parser.waiting_for_auth
    assert parser.authenticated() == []  # its start: the rest comes in the next reads
    assert parser.error is None and not parser.waiting_for_auth and not parser.unauthenticated
    assert parser.feed(big[100:] + b"PING\r\n") == [
        [b"ADDJOB", b"q", b"b" * (UNAUTH_MAX_BULK + 1), b"0"], [b"PING"]]


def test_once_authenticated_a_bad_request_held_is_refused_as_usual() -> None:
    parser = RequestParser(limits(), True)
    assert parser.feed(b"AUTH pw\r\n*11\r\n:5\r\n") == [[b"AUTH", b"pw"]]
    assert parser.error == "unauthenticated multibulk length"
    assert parser.authenticated() == []
    assert parser.error == "expected '$', got ':'"


def test_authenticated_before_any_read_lifts_the_limits() -> None:
    parser = RequestParser(limits(), True)
    parser.authenticated()
    assert parser.feed(b"*11\r\n" + b"$1\r\na\r\n" * 11) == [[b"a"] * 11]
