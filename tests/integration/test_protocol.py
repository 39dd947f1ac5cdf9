"""The RESP front door of one node, fed by raw sockets: inline and multibulk requests,
split and pipelined input, malformed input, limits, and many or too many clients."""

from __future__ import annotations

import random
import resource
import socket
import string
import sys
import time

import hiredis
import pytest
from support import DisqProcess, raw_command, wait_for


def mb(*args: bytes | str | int) -> bytes:
    """Encode one request as a RESP multibulk."""
    parts = [b"*%d\r\n" % len(args)]
    for arg in args:
        data = arg if isinstance(arg, bytes) else str(arg).encode()
        parts.append(b"$%d\r\n%s\r\n" % (len(data), data))
    return b"".join(parts)


def read_replies(sock: socket.socket, count: int, timeout: float = 10.0) -> list[object]:
    """Read exactly `count` replies (parsed by hiredis; errors come back as
    hiredis.ReplyError instances)."""
    reader = hiredis.Reader()
    replies: list[object] = []
    deadline = time.monotonic() + timeout
    sock.settimeout(timeout)
    while len(replies) < count:
        while len(replies) < count:
            rep = reader.gets()
            if rep is False:
                break
            replies.append(rep)
        if len(replies) >= count:
            break
        if time.monotonic() > deadline:
            raise AssertionError(f"got {len(replies)} of {count} replies: {replies[-3:]}")
        chunk = sock.recv(1 << 16)
        if not chunk:
            raise AssertionError(f"connection closed after {len(replies)} of {count} replies")
        reader.feed(chunk)
    return replies


def read_until_closed(sock: socket.socket, timeout: float = 5.0) -> bytes:
    """Everything the server sends until it closes the connection; fails if it doesn't."""
    sock.settimeout(timeout)
    deadline = time.monotonic() + timeout
    data = b""
    while True:
        try:
            chunk = sock.recv(1 << 16)
        except ConnectionResetError:
            return data
        except TimeoutError:
            raise AssertionError(f"server did not close the connection; got {data!r}") from None
        if not chunk:
            return data
        data += chunk
        if time.monotonic() > deadline:
            raise AssertionError(f"server did not close the connection; got {data!r}")


def assert_healthy(node) -> None:
    """A fresh connection gets answers."""
    with node.connect() as sock:
        assert raw_command(sock, b"PING\r\n") == b"+PONG\r\n"


def connected_clients(client) -> int:
    """connected_clients from INFO, asked through a redis-py client."""
    text = client.execute_command("INFO", "clients")
    if isinstance(text, dict):  # parsed by redis-py
        return int(text["connected_clients"])
    return int(text.decode().split("connected_clients:")[1].split("\r\n")[0])


# -- inline commands ---------------------------------------------------------------------

def test_inline_ping_and_line_endings(node):
    with node.connect() as sock:
        assert raw_command(sock, b"PING\r\n") == b"+PONG\r\n"
        assert raw_command(sock, b"ping\n") == b"+PONG\r\n"  # bare LF, lower case
        # empty lines are ignored, then the command runs
        assert raw_command(sock, b"\r\n\r\n  PING  \r\n") == b"+PONG\r\n"
        assert raw_command(sock, b"PING hello\r\n") == b"$5\r\nhello\r\n"


def test_inline_quoted_arguments(node):
    with node.connect() as sock:
        assert raw_command(sock, b'PING "hello world"\r\n') == b"$11\r\nhello world\r\n"
        assert raw_command(sock, b"PING 'single quoted'\r\n") == b"$13\r\nsingle quoted\r\n"
        # double quotes understand escapes, single quotes are literal
        assert raw_command(sock, b'PING "a\\x41\\n\\t"\r\n') == b"$4\r\naA\n\t\r\n"
        assert raw_command(sock, b"PING 'a\\n'\r\n") == b"$3\r\na\\n\r\n"
        assert raw_command(sock, b'PING ""\r\n') == b"$0\r\n\r\n"
        # an inline ADDJOB with a quoted body keeps the spaces
        sock.sendall(b'ADDJOB q "job body with spaces" 0\r\n')
        (job_id,) = read_replies(sock, 1)
        assert job_id.startswith(b"D-") and len(job_id) == 40
        sock.sendall(b"GETJOB NOHANG FROM q\r\n")
        assert read_replies(sock, 1) == [[[b"q", job_id, b"job body with spaces"]]]


@pytest.mark.parametrize("line", [b'PING "unbalanced\r\n', b"PING 'open\r\n",
                                  b'PING "closed"trailing\r\n'])
def test_inline_unbalanced_quotes_is_protocol_error(node, line):
    with node.connect() as sock:
        sock.sendall(line)
        assert read_until_closed(sock) == (
            b"-ERR Protocol error: unbalanced quotes in request\r\n")
    assert_healthy(node)


def test_inline_request_too_big(node):
    with node.connect() as sock:
        try:
            sock.sendall(b"PING " + b"x" * (200 * 1024))  # no newline: never complete
        except (BrokenPipeError, ConnectionResetError):
            pass
        data = read_until_closed(sock)
        assert data.startswith(b"-ERR Protocol error: too big inline request")
    assert_healthy(node)


# -- multibulk: split and pipelined ---------------------------------------------------------

def test_multibulk_split_byte_by_byte(node):
    body = b"body\r\nwith *3\r\n$4 inside"
    payload = mb("ADDJOB", "bytewise", body, 0) + mb("PING", "x") + b"PING\r\n"
    with node.connect() as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for i in range(len(payload)):
            sock.sendall(payload[i:i + 1])
            time.sleep(0.0005)  # let the server read (most) bytes one by one
        job_id, pong, pong2 = read_replies(sock, 3)
        assert (pong, pong2) == (b"x", b"PONG")
        sock.sendall(mb("GETJOB", "NOHANG", "FROM", "bytewise"))
        assert read_replies(sock, 1) == [[[b"bytewise", job_id, body]]]


def test_large_argument_in_odd_sized_chunks(node):
    body = bytes(range(256)) * 1200  # ~300 KB of binary data
    payload = mb("ADDJOB", "big", body, 0)
    with node.connect() as sock:
        for i in range(0, len(payload), 997):
            sock.sendall(payload[i:i + 997])
        (job_id,) = read_replies(sock, 1)
        sock.sendall(mb("GETJOB", "NOHANG", "FROM", "big"))
        ((entry,),) = read_replies(sock, 1)
        assert entry == [b"big", job_id, body]


def test_pipeline_1000_multibulk_commands_in_one_write(node):
    payload = b"".join(mb("PING", f"msg-{i}") for i in range(1000))
    with node.connect() as sock:
        sock.sendall(payload)
        replies = read_replies(sock, 1000)
        assert replies == [f"msg-{i}".encode() for i in range(1000)]
        # nothing more than the 1000 replies was sent
        assert raw_command(sock, b"PING\r\n") == b"+PONG\r\n"


def test_pipeline_1000_inline_commands_in_one_write(node):
    payload = b"".join(b"ADDJOB pipeq job-%d 0\r\n" % i for i in range(500))
    payload += b"".join(b"QLEN pipeq\r\n" for _ in range(500))
    with node.connect() as sock:
        sock.sendall(payload)
        replies = read_replies(sock, 1000)
        ids = replies[:500]
        assert all(isinstance(x, bytes) and x.startswith(b"D-") for x in ids)
        assert len(set(ids)) == 500
        assert replies[500:] == [500] * 500
        sock.sendall(mb("GETJOB", "COUNT", 1000, "FROM", "pipeq"))
        (jobs,) = read_replies(sock, 1)
        assert [j[2] for j in jobs] == [b"job-%d" % i for i in range(500)]


def test_inline_and_multibulk_mixed_in_one_write(node):
    """Each request picks its own format, as in Redis: an inline request may follow a
    multibulk one in the same packet and the other way round."""
    with node.connect() as sock:
        sock.sendall(mb("PING", "a") + b"PING b\r\n" + mb("PING", "c") + b"PING\r\n")
        assert read_replies(sock, 4) == [b"a", b"b", b"c", b"PONG"]
        sock.sendall(b"*0\r\nPING\r\n")  # an empty multibulk is skipped
        assert read_replies(sock, 1) == [b"PONG"]


def test_negative_multibulk_length_is_ignored(node):
    with node.connect() as sock:
        sock.sendall(b"*-10\r\n")
        sock.sendall(mb("PING", "after"))
        assert read_replies(sock, 1) == [b"after"]
        # also in the middle of a pipeline, and the null multibulk *-1
        sock.sendall(mb("PING", "a") + b"*-10\r\n*-1\r\nPING b\r\n" + mb("PING", "c"))
        assert read_replies(sock, 3) == [b"a", b"b", b"c"]


def test_random_mix_of_formats_and_split_points(node):
    """300 requests, inline and multibulk mixed, cut into random pieces: every reply
    arrives, in order."""
    rng = random.Random(20240601)
    payload, expected = b"", []
    for i in range(300):
        if rng.random() < 0.5:
            word = "".join(rng.choice(string.ascii_letters) for _ in range(rng.randint(1, 12)))
            payload += f"PING {word}{i}\r\n".encode()
            expected.append(f"{word}{i}".encode())
        else:
            arg = bytes(rng.randrange(256) for _ in range(rng.randint(0, 300)))
            payload += mb("PING", arg)
            expected.append(arg)
    with node.connect() as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        pos = 0
        while pos < len(payload):
            step = rng.randint(1, 60)
            sock.sendall(payload[pos:pos + step])
            pos += step
        assert read_replies(sock, 300) == expected


# -- malformed input -----------------------------------------------------------------------

@pytest.mark.parametrize("payload", [
    b"*1\r\n:5\r\n",                       # array element that is not a bulk string
    b"*x\r\n",                             # non-numeric multibulk length
    b"*1\r\n$-5\r\n",                      # negative bulk length
    b"*1\r\n$x\r\n",                       # non-numeric bulk length
    b"*1\r\nfoo\r\n",                      # multibulk not followed by bulk arguments
    b"*3\r\n$6\r\nADDJOB\r\n$1\r\nq\r\n$-10\r\n",
    b"*3000000000\r\n",                    # more arguments than proto-max-multibulk-len
], ids=["int-element", "bad-count", "negative-len", "bad-len", "no-bulk",
        "negative-len-later", "huge-count"])
def test_malformed_resp_is_protocol_error_and_close(node, payload):
    other = node.client()
    try:
        assert other.ping()
        with node.connect() as sock:
            sock.sendall(payload)
            data = read_until_closed(sock)
        assert data.startswith(b"-ERR Protocol error"), data
        assert data.endswith(b"\r\n") and data.count(b"\r\n") == 1
        # the node and its other clients carry on
        assert other.ping()
        assert other.execute_command("ADDJOB", "after-error", "x", 0).startswith(b"D-")
        assert_healthy(node)
        wait_for(lambda: connected_clients(other) == 1, message="bad client dropped")
    finally:
        other.close()
    assert "Traceback" not in node.log()


@pytest.mark.parametrize("payload, message", [
    (b"*3000000000\r\n", b"invalid multibulk length"),
    (b"*x\r\n", b"invalid multibulk length"),
    (b"*3\r\n$3\r\nSET\r\n$1\r\nx\r\nfooz\r\n", b"expected '$', got 'f'"),
    (b"*3\r\n$3\r\nSET\r\n$1\r\nx\r\n$-10\r\n", b"invalid bulk length"),
    (b"*3\r\n$3\r\nSET\r\n$1\r\nx\r\n$blabla\r\n", b"invalid bulk length"),
    (b"*1\r\nfoo\r\n", b"expected '$', got 'f'"),
    (b"*2\r\n$4\r\nPING\r\n:12\r\n", b"expected '$', got ':'"),
    (b"*2\r\n$4\r\nPING\r\n*1\r\n$1\r\na\r\n", b"expected '$', got '*'"),
    (b"*2\r\n$4\r\nPING\r\n-ERR\r\n", b"expected '$', got '-'"),
    (b"*2\r\n$4\r\nPING\r\n$-1\r\n", b"invalid bulk length"),
    (b"*2\r\n$4\r\nPING\r\n+OK\r\n", b"expected '$', got '+'"),
])
def test_protocol_error_messages_as_redis(node, payload, message):
    """The wording of Redis's own protocol tests (tests/unit/protocol.tcl)."""
    with node.connect() as sock:
        sock.sendall(payload)
        assert read_until_closed(sock) == b"-ERR Protocol error: " + message + b"\r\n"


@pytest.mark.parametrize("payload, replies", [
    (b"$5\r\nworld\r\n", [b"-ERR unknown command '$5'", b"-ERR unknown command 'world'"]),
    (mb("PING") + b":5\r\n", [b"+PONG", b"-ERR unknown command ':5'"]),
    (mb("PING") + b"$-1\r\n" + mb("PING"),
     [b"+PONG", b"-ERR unknown command '$-1'", b"+PONG"]),
    (mb("PING") + b"+PING\r\n", [b"+PONG", b"-ERR unknown command '+PING'"]),
    (mb("PING") + b"*-1\r\n" + mb("PING"), [b"+PONG", b"+PONG"]),
], ids=["bare-bulk", "int-after-request", "null-after-request", "status-after-request",
        "null-multibulk-skipped"])
def test_requests_not_starting_with_star_are_inline(node, payload, replies):
    """As in Redis, only '*' starts a multibulk request: anything else at a request
    boundary, even a reply-shaped line, is an inline request."""
    with node.connect() as sock:
        sock.sendall(payload)
        got = read_replies(sock, len(replies))
    shown = [b"-" + str(r).encode() if isinstance(r, hiredis.ReplyError) else b"+" + r
             for r in got]
    assert shown == replies
    assert_healthy(node)


def test_commands_before_a_protocol_error_are_answered(node):
    with node.connect() as sock:
        sock.sendall(mb("PING", "first") + b"*1\r\n$x\r\n")
        data = read_until_closed(sock)
        assert data.startswith(b"$5\r\nfirst\r\n-ERR Protocol error")


def test_unknown_command(node):
    with node.connect() as sock:
        assert raw_command(sock, b"foo bar\r\n") == b"-ERR unknown command 'foo'\r\n"
        assert raw_command(sock, mb("FOO")) == b"-ERR unknown command 'FOO'\r\n"
        # the connection stays usable
        assert raw_command(sock, b"PING\r\n") == b"+PONG\r\n"


def test_wrong_number_of_arguments(node):
    with node.connect() as sock:
        for request, name in [(mb("ADDJOB", "q"), b"addjob"),
                              (b"addJob q body\r\n", b"addjob"),
                              (mb("SHOW"), b"show"),
                              (mb("QPEEK", "q"), b"qpeek"),
                              (mb("TIME", "x"), b"time"),
                              (mb("HELLO", "x", "y", "z", "w", "v"), None),
                              (mb("PING", "a", "b"), b"ping")]:
            rep = raw_command(sock, request)
            if name is None:  # HELLO with args is the Redis handshake: any error will do
                assert rep.startswith(b"-")
                continue
            assert rep == b"-ERR wrong number of arguments for '%s' command\r\n" % name
        assert raw_command(sock, b"PING\r\n") == b"+PONG\r\n"


# -- limits --------------------------------------------------------------------------------

def test_query_buffer_limit(start_node):
    node = start_node("--client-query-buffer-limit", "1mb", "--loglevel", "verbose")
    with node.connect() as ok_sock:
        # just below the limit is fine
        body = b"b" * (900 * 1024)
        ok_sock.sendall(mb("ADDJOB", "limited", body, 0))
        (job_id,) = read_replies(ok_sock, 1)
        assert job_id.startswith(b"D-")
        with node.connect() as sock:
            big = mb("ADDJOB", "limited", b"x" * (3 * 1024 * 1024), 0)
            try:
                sock.sendall(big)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the server closed while we were still writing
            refused_addr = "{}:{}".format(*sock.getsockname()[:2])
            data = read_until_closed(sock)
            # the reply may be lost to a reset, as the client was still writing
            assert data.startswith(b"-ERR Protocol error") or data == b"", data
        wait_for(lambda: f"max query buffer length) from client: {refused_addr}"
                 in node.log(), message="refusal logged")
        # the node still serves, and the refused job was never created
        ok_sock.sendall(mb("QLEN", "limited"))
        assert read_replies(ok_sock, 1) == [1]
    assert_healthy(node)


@pytest.mark.parametrize("args, header", [
    ((), b"*2\r\n$4\r\nPING\r\n$999999999999\r\n"),  # past the default 512mb
    (("--proto-max-bulk-len", "1mb"), b"*3\r\n$6\r\nADDJOB\r\n$1\r\nq\r\n$2000000\r\n"),
], ids=["default-limit", "configured-limit"])
def test_oversized_bulk_header_is_refused_at_once(start_node, args, header):
    """The `$<len>` of an argument longer than proto-max-bulk-len is refused as soon as
    it arrives, without waiting for (or buffering) its body."""
    node = start_node(*args)
    with node.connect() as sock:
        sock.sendall(header)
        assert read_until_closed(sock) == b"-ERR Protocol error: invalid bulk length\r\n"
    assert_healthy(node)
    assert node.client().execute_command("QLEN", "q") == 0


def test_half_a_command_then_disconnect(node):
    r = node.client()
    try:
        r.ping()
        for partial in (b"*3\r\n$6\r\nADDJOB\r\n$1\r\nq\r\n$10\r\nabc",
                        b"*4\r\n$6\r\nADDJOB\r\n",
                        b"ADDJOB q body",
                        b'PING "unterminated'):
            sock = node.connect()
            sock.sendall(partial)
            sock.close()
        wait_for(lambda: connected_clients(r) == 1, message="half-sent clients gone")
        assert r.execute_command("QLEN", "q") == 0
        assert r.info("jobs")["registered_jobs"] == 0
        assert_healthy(node)
    finally:
        r.close()


def test_two_thousand_idle_connections(start_node):
    # this test process needs the descriptors; the node raises its own limit
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = 4096
    if soft < wanted:
        if hard != resource.RLIM_INFINITY and hard < wanted:
            pytest.skip(f"fd hard limit {hard} too low for 2000 connections")
        resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
    socks: list[socket.socket] = []
    try:
        node = start_node("--maxclients", "3000")
        r = node.client(protocol=2)
        for _ in range(2000):
            socks.append(socket.create_connection(("127.0.0.1", node.port), timeout=10))
        wait_for(lambda: connected_clients(r) == 2001, timeout=20,
                 message="2000 idle clients registered")
        start = time.monotonic()
        for _ in range(50):
            assert r.execute_command("TIME")
        assert time.monotonic() - start < 1.0
        # the idle ones are alive too
        for sock in socks[::400]:
            assert raw_command(sock, b"PING\r\n") == b"+PONG\r\n"
        for sock in socks:
            sock.close()
        socks.clear()
        wait_for(lambda: connected_clients(r) == 1, timeout=20, message="clients gone")
        r.close()
    finally:
        for sock in socks:
            sock.close()
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


class _LowFdLimitProcess(DisqProcess):
    """A node whose process starts with RLIMIT_NOFILE soft = hard = `limit`."""

    limit = 128

    def command_line(self) -> list[str]:
        boot = ("import resource, runpy, sys; "
                f"resource.setrlimit(resource.RLIMIT_NOFILE, ({self.limit}, {self.limit})); "
                "sys.argv[0] = 'disq'; runpy.run_module('disq', run_name='__main__')")
        return [sys.executable, "-c", boot, *super().command_line()[3:]]


def test_node_raises_its_fd_limit_for_maxclients(start_node):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 1500:
        pytest.skip(f"fd hard limit {hard} too low")
    socks: list[socket.socket] = []
    resource.setrlimit(resource.RLIMIT_NOFILE, (200, hard))  # inherited by the node...
    try:
        node = start_node("--maxclients", "1000")
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    try:
        r = node.client(protocol=2)
        for _ in range(400):  # ...which raises it itself, as Redis does
            socks.append(socket.create_connection(("127.0.0.1", node.port), timeout=10))
        wait_for(lambda: connected_clients(r) == 401, message="400 clients accepted")
        assert raw_command(socks[-1], b"PING\r\n") == b"+PONG\r\n"
        r.close()
    finally:
        for sock in socks:
            sock.close()
    assert "Increased maximum number of open files" in node.log()


def test_config_set_maxclients_raises_the_fd_limit(start_node):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 1500:
        pytest.skip(f"fd hard limit {hard} too low")
    resource.setrlimit(resource.RLIMIT_NOFILE, (150, hard))
    try:
        node = start_node("--maxclients", "100")  # fits in 150: nothing raised yet
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    socks: list[socket.socket] = []
    r = node.client(protocol=2)
    try:
        assert r.execute_command("CONFIG", "SET", "maxclients", "1000")
        for _ in range(300):
            socks.append(socket.create_connection(("127.0.0.1", node.port), timeout=10))
        wait_for(lambda: connected_clients(r) == 301, message="300 clients accepted")
        assert raw_command(socks[-1], b"PING\r\n") == b"+PONG\r\n"
    finally:
        r.close()
        for sock in socks:
            sock.close()


def test_maxclients_lowered_to_fit_fd_limit(tmp_path):
    node = _LowFdLimitProcess(tmp_path / "lowfd", "--maxclients", "1000")
    node.start()
    socks: list[socket.socket] = []
    try:
        r = node.client(protocol=2)
        r.response_callbacks.clear()
        reduced = int(r.execute_command("CONFIG", "GET", "maxclients")[1])
        assert reduced == 128 - 32
        assert "maxclients has been reduced to 96" in node.log()
        wait_for(lambda: connected_clients(r) == 1)
        for _ in range(reduced - 1):
            socks.append(socket.create_connection(("127.0.0.1", node.port), timeout=10))
        wait_for(lambda: connected_clients(r) == reduced, message="clients up to the limit")
        # the next client is told why, instead of being reset for lack of descriptors
        with node.connect() as extra:
            assert read_until_closed(extra) == b"-ERR max number of clients reached\r\n"
        assert r.execute_command("PING") == b"PONG"
        r.close()
    finally:
        for sock in socks:
            sock.close()
        node.stop()


def test_maxclients_rejects_extra_client(start_node):
    node = start_node("--maxclients", "2")
    first = node.connect()
    try:
        # the start-up probe connection may still be going away: wait until alone
        def alone() -> bool:
            first.sendall(b"INFO clients\r\n")
            (text,) = read_replies(first, 1)
            return b"connected_clients:1\r\n" in text
        wait_for(alone, message="only one client connected")
        second = node.connect()
        assert raw_command(second, b"PING\r\n") == b"+PONG\r\n"
        with node.connect() as third:
            assert read_until_closed(third) == b"-ERR max number of clients reached\r\n"
        first.sendall(b"INFO stats\r\n")
        (stats,) = read_replies(first, 1)
        assert b"rejected_connections:1\r\n" in stats
        # a slot frees up when a client leaves
        second.close()

        def accepted() -> bool:
            with node.connect() as s:
                return raw_command(s, b"PING\r\n") == b"+PONG\r\n"
        wait_for(accepted, message="a new client accepted after one left")
    finally:
        first.close()


def test_quit(node):
    with node.connect() as sock:
        sock.sendall(b"QUIT\r\n")
        assert read_until_closed(sock) == b"+OK\r\n"
    with node.connect() as sock:
        # requests pipelined after QUIT are not executed
        sock.sendall(mb("PING", "before") + mb("QUIT") + mb("ADDJOB", "afterquit", "x", 0))
        assert read_until_closed(sock) == b"$6\r\nbefore\r\n+OK\r\n"
    r = node.client()
    try:
        assert r.execute_command("QLEN", "afterquit") == 0
    finally:
        r.close()
