"""Properties of the RESP request parser (disq/server/request_parser.py) behind its
connection, in process: the real `Client` protocol with a transport that records what it is given, and a
`dispatch` that records the parsed requests instead of running them."""

from __future__ import annotations

import re
from types import SimpleNamespace

import pytest
from fuzzing import fuzz_settings
from hypothesis import example, given
from hypothesis import strategies as st

from disq.acl import AclTable
from disq.config import Config
from disq.ids import new_node_id
from disq.node import Node
from disq.server.clients import ClientRegistry
from disq.server.connection import Client
from disq.server.hotstate import HotState
from disq.server.request_parser import FEED_PIECE
from disq.server.table import CATEGORIES


class FakeTransport:
    """What the protocol writes, and whether it closed the connection."""

    def __init__(self) -> None:
        self.written: list[bytes] = []
        self.closed = False

    def write(self, data: bytes) -> None:
        assert not self.closed, "a write after close"
        self.written.append(data)

    def close(self) -> None:
        self.closed = True

    def is_closing(self) -> bool:
        return self.closed

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def get_extra_info(self, name: str, default: object = None) -> object:
        return {"peername": ("127.0.0.1", 5555), "sockname": ("127.0.0.1", 7711)}.get(
            name, default)


class RecordingClient(Client):
    """The real parser; each parsed request is recorded and answered +OK."""

    def __init__(self, config: Config) -> None:
        hot = HotState(config)
        server = SimpleNamespace(
            config=config, node=Node(config, new_node_id()), hot=hot,
            log_verbose=lambda message: None, clients=ClientRegistry(config, hot),
            acl=AclTable(CATEGORIES, config.requirepass))
        super().__init__(server)  # type: ignore[arg-type]
        self.requests: list[list[bytes]] = []
        self.fake = FakeTransport()
        self.connection_made(self.fake)  # type: ignore[arg-type]

    def dispatch(self, args: list[bytes]) -> bytes | None:
        self.requests.append(list(args))
        return b"+OK\r\n"

    def feed(self, chunks: list[bytes]) -> None:
        """Deliver the chunks as the event loop would: nothing after a close."""
        for chunk in chunks:
            if self.fake.closed:
                return
            if chunk:
                self.data_received(chunk)


def run(data: bytes, cuts: list[int], config: Config | None = None) -> RecordingClient:
    client = RecordingClient(config or Config())
    client.feed(split(data, cuts))
    return client


def split(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts})
    bounds = [0, *points, len(data)]
    return [data[a:b] for a, b in zip(bounds, bounds[1:], strict=False)]


def multibulk(args: list[bytes]) -> bytes:
    return b"*%d\r\n" % len(args) + b"".join(b"$%d\r\n%s\r\n" % (len(a), a) for a in args)


INLINE_SAFE = st.binary(min_size=1, max_size=10).filter(
    lambda w: not any(c in w for c in b" \t\r\n\x0b\x0c\"'\x00"))
ARGS = st.lists(st.binary(max_size=40), min_size=1, max_size=6)


@st.composite
def request(draw: st.DrawFn) -> tuple[list[bytes], bytes]:
    """A valid request: multibulk, or inline when its words allow it."""
    if draw(st.booleans()):
        words = draw(st.lists(INLINE_SAFE, min_size=1, max_size=5))
        if words[0][0] != ord("*"):
            return words, b" ".join(words) + draw(st.sampled_from([b"\r\n", b"\n"]))
    args = draw(ARGS)
    return args, multibulk(args)


CUTS = st.lists(st.integers(0, 10_000), max_size=8)


@fuzz_settings(300)
@given(st.lists(request(), min_size=1, max_size=8), CUTS)
def test_valid_requests_parse_whatever_the_reads(reqs: list[tuple[list[bytes], bytes]],
                                                 cuts: list[int]) -> None:
    data = b"".join(raw for _, raw in reqs)
    client = run(data, cuts)
    assert client.requests == [args for args, _ in reqs]
    assert b"".join(client.fake.written) == b"+OK\r\n" * len(reqs)
    assert not client.fake.closed


def mutate(data: bytes, edits: list[tuple[int, int, bytes]]) -> bytes:
    out = bytearray(data)
    for kind, pos, piece in edits:
        pos = pos % (len(out) + 1)
        if kind == 0 and out:
            out[min(pos, len(out) - 1)] = piece[0] if piece else 0
        elif kind == 1:
            out[pos:pos] = piece
        else:
            del out[pos:pos + len(piece) + 1]
    return bytes(out)


TOKENS = st.sampled_from([b"\r\n", b"\n", b"*", b"$", b"-1", b"-2", b"0", b"999999999999",
                          b"*-1\r\n", b"$-1\r\n", b":1\r\n", b"-ERR x\r\n",
                          b"\"", b"'", b"\\x4", b"\x00", b"*1048577\r\n", b"$536870913\r\n"])
EDITS = st.lists(st.tuples(st.integers(0, 2), st.integers(0, 10_000),
                           TOKENS | st.binary(min_size=1, max_size=6)), min_size=1, max_size=4)


def check_outcome(client: RecordingClient) -> None:
    """Every reply is +OK, except a protocol error, which is the last thing written
    before the connection closes (as Redis answers it)."""
    written = client.fake.written
    errors = [w for w in written if w.startswith(b"-")]
    if errors:
        assert len(errors) == 1 and written[-1] == errors[0], written
        assert errors[0].startswith(b"-ERR Protocol error: ") and errors[0].endswith(b"\r\n")
        assert b"\r\n" not in errors[0][:-2]
        assert client.fake.closed
    joined = b"".join(w for w in written if not w.startswith(b"-"))
    assert joined == b"+OK\r\n" * len(client.requests)
    assert all(req and all(type(a) is bytes for a in req) for req in client.requests)


@fuzz_settings(300)
@given(st.lists(request(), min_size=1, max_size=5), EDITS, CUTS)
@example([([b""], b"*1\r\n$0\r\n\r\n")], [(1, 1, b"-1")], [1])  # *-11 cut after '*'
def test_mutated_requests_never_raise_and_parse_the_same_in_any_reads(
        reqs: list[tuple[list[bytes], bytes]], edits: list[tuple[int, int, bytes]],
        cuts: list[int]) -> None:
    data = mutate(b"".join(raw for _, raw in reqs), edits)
    whole = run(data, [])
    check_outcome(whole)
    pieces = run(data, cuts)
    check_outcome(pieces)
    if re.search(rb"[+(=]", data):
        return  # hiredis returns a `+str` (`(`, `=`) element as a bulk: known limitation
    # Redis's parser does not depend on how the bytes arrive; neither does disq's.
    assert pieces.requests == whole.requests
    assert pieces.fake.written == whole.fake.written or (
        b"".join(pieces.fake.written) == b"".join(whole.fake.written))
    assert pieces.fake.closed == whole.fake.closed


@fuzz_settings(60)
@given(st.lists(request(), min_size=1, max_size=5), EDITS, st.integers(0, 20_000))
def test_a_read_larger_than_a_feed_piece_parses_as_small_reads(
        reqs: list[tuple[list[bytes], bytes]], edits: list[tuple[int, int, bytes]],
        pad: int) -> None:
    """A read over FEED_PIECE bytes goes to hiredis in pieces (RequestParser._parse):
    requests, errors and replies are those of the same bytes in 1,000-byte reads,
    wherever the pieces cut them (`pad` moves the requests over the cuts)."""
    data = multibulk([b"x" * pad]) + mutate(b"".join(raw for _, raw in reqs) * 30, edits)
    assert len(data) > FEED_PIECE or pad < FEED_PIECE
    whole = run(data, [])
    check_outcome(whole)
    small = run(data, list(range(1000, len(data), 1000)))
    if re.search(rb"[+(=]", data):
        return  # as in the test above
    assert whole.requests == small.requests
    assert b"".join(whole.fake.written) == b"".join(small.fake.written)
    assert whole.fake.closed == small.fake.closed


@fuzz_settings(300)
@given(st.binary(max_size=300), CUTS)
def test_random_bytes_never_raise(data: bytes, cuts: list[int]) -> None:
    check_outcome(run(data, cuts))


@fuzz_settings(100)
@given(st.integers(1_048_577, 2**63), st.sampled_from([b"", b"\r\n$1\r\nx\r\n"]))
def test_a_huge_count_is_refused_before_buffering(count: int, tail: bytes) -> None:
    client = run(b"*%d\r\n" % count + tail, [])
    assert client.fake.written == [b"-ERR Protocol error: invalid multibulk length\r\n"]


@fuzz_settings(100)
@given(st.integers(512 * 1024 * 1024 + 1, 2**62), CUTS)
def test_a_huge_bulk_length_is_refused_before_buffering(length: int, cuts: list[int]) -> None:
    client = run(b"*2\r\n$4\r\nPING\r\n$%d\r\nabc" % length, cuts)
    assert client.fake.written == [b"-ERR Protocol error: invalid bulk length\r\n"]


@fuzz_settings(100)
@given(st.binary(min_size=1, max_size=64).filter(lambda b: b"\n" not in b), CUTS)
def test_an_endless_inline_line_is_refused(piece: bytes, cuts: list[int]) -> None:
    data = b"X" + piece * (64 * 1024 // len(piece) + 2)
    client = run(data, cuts)
    assert client.fake.written == [b"-ERR Protocol error: too big inline request\r\n"]


# -- what the properties found: each case as Redis 7 answers it ---------------------------
@pytest.mark.parametrize("data, cuts, requests, reply", [
    # an inline request right after a multibulk in the same read, starting with a RESP3
    # type byte: was held by hiredis as the start of a reply
    (b"*1\r\n$0\r\n\r\n#\n", [], [[b""], [b"#"]], b"+OK\r\n+OK\r\n"),
    # a huge $<len> whose request started in an earlier read: was buffered
    (b"*2\r\n$4\r\nPING\r\n$536870913\r\nabc", [1], [],
     b"-ERR Protocol error: invalid bulk length\r\n"),
    # a quote opens anywhere in a word, as in sdssplitargs
    (b"P\"NG\r\n", [], [], b"-ERR Protocol error: unbalanced quotes in request\r\n"),
    (b"a\"b c\"\r\n", [], [[b"ab c"]], b"+OK\r\n"),
    # \v and \f do not separate words; \x needs two hex digits
    (b"PING\x0bx\r\n", [], [[b"PING\x0bx"]], b"+OK\r\n"),
    (b"\"\\x+f\"\r\n", [], [[b"x+f"]], b"+OK\r\n"),
    # the byte Redis names in its error is shown raw, CR/LF as a space
    (b"*1\r\n\n4\r\n", [], [], b"-ERR Protocol error: expected '$', got ' '\r\n"),
    (b"*1\r\n\\x\r\n", [], [], b"-ERR Protocol error: expected '$', got '\\'\r\n"),
    # a nested array where a bulk is expected: refused at once, not awaited
    (b"*1\r\n*1\r\n$4\r\nNG\r\n", [], [], b"-ERR Protocol error: expected '$', got '*'\r\n"),
    # hiredis refuses at once, Redis once the header's CR arrives: answered then
    (b"*20\r\nxxxx", [], [], b""),
    (b"*20\r\nxxxx\r\n", [7], [], b"-ERR Protocol error: expected '$', got 'x'\r\n"),
])
def test_parser_cases_found_by_fuzzing(data: bytes, cuts: list[int],
                                       requests: list[list[bytes]], reply: bytes) -> None:
    client = run(data, cuts)
    assert client.requests == requests
    assert b"".join(client.fake.written) == reply


def test_a_nil_multibulk_cut_after_its_star_is_skipped() -> None:
    """Found by the property: `*` then `-1\\r\\n...` in the next read was an error,
    while in one read the `*-1` is skipped, as Redis does."""
    client = run(b"*-1\r\n*1\r\n$0\r\n\r\n", [1])
    assert client.requests == [[b""]] and client.fake.written == [b"+OK\r\n"]


def test_a_nil_array_element_is_named_as_redis_names_it() -> None:
    """Found by the property: in one read `*1\\r\\n*-1\\r\\n` said "invalid bulk length"
    (hiredis's nil), cut after `*-1\\r` it said what Redis says."""
    for cuts in ([], [8]):
        client = run(b"*1\r\n*-1\r\n0\r\n", cuts)
        assert client.fake.written == [b"-ERR Protocol error: expected '$', got '*'\r\n"]


def test_an_inline_request_after_a_nil_multibulk() -> None:
    """Found by the property: after a skipped `*-1`, a `,` line went to hiredis (a
    RESP3 double) instead of being an inline request."""
    for cuts in ([], [5], [6]):
        client = run(b"*-1\r\n,\r\n", cuts)
        assert client.requests == [[b","]], cuts


def test_a_multibulk_count_with_a_stray_newline_is_refused_in_any_reads() -> None:
    """`*-11\n\r\n`: Redis's string2ll refuses "-11\n" (invalid multibulk length);
    int() took it as -11 and skipped the header when it came in one read (found by
    the property above)."""
    data = b"\x01\x01\r\n*-11\n\r\n$0\r\n\r\n"
    for cuts in ([], [len(data) + 1], [7]):
        client = run(data, cuts)
        assert client.requests == [[b"\x01\x01"]]
        assert client.fake.written == [
            b"+OK\r\n", b"-ERR Protocol error: invalid multibulk length\r\n"] or (
            b"".join(client.fake.written)
            == b"+OK\r\n-ERR Protocol error: invalid multibulk length\r\n")


@pytest.mark.parametrize("data", [
    b"*-11\r\n$0\r\n\r\n",  # a negative count, then an inline request
    b"*2\r\n$4\r\nPING\r\n$1\r\nx\r\n*-3\r\nPING\r\n",
    b"*-1\r\n*1\r\n$4\r\nPING\r\n",
])
def test_a_read_ending_in_a_multibulk_header_line_changes_nothing(data: bytes) -> None:
    """A read that ends inside a new request's `*<count>` line (`*`, `*-1`): the count
    is checked with the next read as if the bytes had come at once (Redis skips a
    negative one), so the requests are the same for every cut, and for two cuts."""
    whole = run(data, [])
    assert whole.requests
    for cut in range(1, len(data)):
        assert run(data, [cut]).requests == whole.requests, cut
        for second in range(cut + 1, len(data)):
            assert run(data, [cut, second]).requests == whole.requests, (cut, second)


# -- a client that has not authenticated (requirepass; `dispatch` here never lets it in) -----

def guarded() -> Config:
    config = Config()
    config.requirepass = "pw"
    return config


@fuzz_settings(300)
@given(st.lists(request(), min_size=1, max_size=8), CUTS)
def test_an_unauthenticated_client_parses_the_same_requests_within_its_limits(
        reqs: list[tuple[list[bytes], bytes]], cuts: list[int]) -> None:
    data = b"".join(raw for _, raw in reqs)
    client = run(data, cuts, guarded())
    assert client.requests == [args for args, _ in reqs]
    assert not client.fake.closed


@fuzz_settings(200)
@given(st.lists(request(), max_size=5), st.sampled_from([
    (b"*11\r\n", b"unauthenticated multibulk length"),
    (b"*1\r\n$500000000\r\n", b"unauthenticated bulk length"),
    (b"x" * 16385, b"unauthenticated inline length")]), CUTS)
def test_an_unauthenticated_client_over_its_limits_is_closed_after_the_requests_before(
        reqs: list[tuple[list[bytes], bytes]], over: tuple[bytes, bytes],
        cuts: list[int]) -> None:
    request, message = over
    client = run(b"".join(raw for _, raw in reqs) + request, cuts, guarded())
    assert client.requests == [args for args, _ in reqs]
    assert client.fake.written[-1] == b"-ERR Protocol error: " + message + b"\r\n"
    assert client.fake.closed
    assert client.parser.buffered() < 64 * 1024  # (its bytes were not buffered)
