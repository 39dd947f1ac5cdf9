"""What a client without the password can do to a node that asks for one: guess it
(failed authentications are throttled per source address, across connections and
across the RESP and HTTP ports), and make the node hold its bytes (a client that has
not authenticated may send Redis's unauthenticated limits: 10 arguments of 16 KB)."""

from __future__ import annotations

import math
import socket
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from support import DisqProcess, free_port, raw_command, wait_closed, wait_for
from test_acl import client_as, info
from test_http import Http

PASSWORD = b"s3cret"
WRONG = b"-ERR invalid password\r\n"
THROTTLED = b"-ERR too many failed authentications from this address: wait a second\r\n"
PAUSE_S = 1.0  # (disq/server/auth_throttle.py) how long a source is refused, unchecked
MAX_FAILURES = 10  # failures from one source before it is


@pytest.fixture
def guarded(start_node: Callable[..., DisqProcess]) -> DisqProcess:
    return start_node("--requirepass", PASSWORD.decode(),
                      client_kwargs={"password": PASSWORD.decode()})


def auth_on_new_connection(node: DisqProcess, password: bytes) -> bytes:
    with node.connect() as sock:
        return raw_command(sock, b"AUTH " + password + b"\r\n")


# -- failed authentications, per source address -----------------------------------------------

def test_reconnecting_brute_force_is_throttled_across_connections(guarded: DisqProcess
                                                                   ) -> None:
    admin = client_as(guarded)  # authenticated before the guesses (same address)
    admin.execute_command("PING")
    # 50 guesses over 10 connections: 5 on each, under the old per-connection limit
    checked = refused = 0
    start = time.monotonic()
    for _ in range(10):
        with guarded.connect() as sock:
            for _ in range(5):
                answer = raw_command(sock, b"AUTH guess\r\n")
                assert answer in (WRONG, THROTTLED), answer
                checked += answer == WRONG
                refused += answer == THROTTLED
    elapsed = time.monotonic() - start
    # 10 checked, then a pause; a new 10 only after each pause (however slow the host)
    assert refused > 0
    assert checked <= MAX_FAILURES * (1 + math.ceil(elapsed / PAUSE_S)), (checked, elapsed)
    stats = info(admin)
    assert int(stats["acl_access_denied_auth"]) == checked
    assert int(stats["acl_access_denied_auth_throttled"]) == refused
    assert int(stats["acl_auth_pauses"]) >= 1
    assert int(stats["acl_auth_failing_sources"]) == 1

    def right_password_refused() -> bool:
        # guesses until the address is paused, then the right password
        for _ in range(MAX_FAILURES + 1):
            if auth_on_new_connection(guarded, b"guess") == THROTTLED:
                return auth_on_new_connection(guarded, PASSWORD) == THROTTLED
        return False

    wait_for(right_password_refused, timeout=30, message="the right password refused")
    # once the pause has passed, the right password lets the client in
    wait_for(lambda: auth_on_new_connection(guarded, PASSWORD) == b"+OK\r\n",
             timeout=10, message="the pause to end")
    admin.close()


def test_the_resp_and_http_ports_share_an_address_failures(
        start_node: Callable[..., DisqProcess]) -> None:
    port = free_port()
    node = start_node("--requirepass", PASSWORD.decode(), "--http-port", str(port),
                      client_kwargs={"password": PASSWORD.decode()})
    admin = client_as(node)
    admin.execute_command("PING")

    def http_guesses_pause_resp() -> bool:
        wrong = Http(port, auth="Bearer nope")
        for _ in range(MAX_FAILURES):
            if wrong.get("/api/v1/queues")[0] == 429:
                break
        return auth_on_new_connection(node, PASSWORD) == THROTTLED

    wait_for(http_guesses_pause_resp, timeout=30, message="RESP paused by HTTP guesses")
    wait_for(lambda: Http(port, auth="Bearer " + PASSWORD.decode()).get(
        "/api/v1/queues")[0] == 200, timeout=10, message="the pause to end")
    # the counters, in /metrics too
    status, text = Http(port, auth="Bearer " + PASSWORD.decode()).get("/metrics")
    assert status == 200
    assert b"disq_acl_auth_pauses_total " in text
    assert b'disq_acl_access_denied_total{reason="auth_throttled"} ' in text
    assert b"disq_acl_auth_failing_sources 1.0" in text
    stats = info(admin)
    assert int(stats["acl_auth_pauses"]) >= 1
    assert int(stats["acl_access_denied_auth_throttled"]) >= 1
    admin.close()


def test_the_unix_socket_is_one_source(start_node: Callable[..., DisqProcess],
                                       tmp_path: Path) -> None:
    path = str(tmp_path / "disq.sock")
    node = start_node("--requirepass", PASSWORD.decode(), "--unixsocket", path,
                      client_kwargs={"password": PASSWORD.decode()})

    def local_auth(password: bytes) -> bytes:
        with socket.socket(socket.AF_UNIX) as sock:
            sock.connect(path)
            return raw_command(sock, b"AUTH " + password + b"\r\n")

    def guesses_pause_the_socket() -> bool:
        for _ in range(MAX_FAILURES):
            if local_auth(b"guess") == THROTTLED:
                break
        return local_auth(PASSWORD) == THROTTLED

    wait_for(guesses_pause_the_socket, timeout=30, message="the unix socket paused")
    # its guesses are not 127.0.0.1's
    assert auth_on_new_connection(node, PASSWORD) == b"+OK\r\n"


# -- what a client may send before it authenticates ------------------------------------------

def _closed_with(node: DisqProcess, payload: bytes) -> bytes:
    with node.connect() as sock:
        answer = raw_command(sock, payload, expect_close=True)
        wait_closed(sock, 10, "the unauthenticated client")
    return answer


def test_an_unauthenticated_huge_bulk_is_refused_from_its_header(guarded: DisqProcess) -> None:
    # under proto-max-bulk-len (512 MB): only the unauthenticated limit refuses it
    assert _closed_with(guarded, b"*1\r\n$500000000\r\n") == (
        b"-ERR Protocol error: unauthenticated bulk length\r\n")
    assert _closed_with(guarded, b"*2\r\n$4\r\nAUTH\r\n$16385\r\n") == (
        b"-ERR Protocol error: unauthenticated bulk length\r\n")
    # the requests before it are answered first
    assert _closed_with(guarded, b"PING\r\n*1\r\n$20000\r\n") == (
        b"-NOAUTH Authentication required.\r\n"
        b"-ERR Protocol error: unauthenticated bulk length\r\n")


def test_unauthenticated_bytes_do_not_grow_the_node(guarded: DisqProcess) -> None:
    """Three connections announce a 500 MB argument and send 32 MB of it each: the node
    closes them at the header, rather than buffering what they send."""
    body = b"x" * (1024 * 1024)
    before = guarded.rss()
    socks = [guarded.connect() for _ in range(3)]
    sent = 0
    try:
        for sock in socks:
            sock.settimeout(10)
            try:
                sock.sendall(b"*1\r\n$500000000\r\n")
                for _ in range(32):
                    sock.sendall(body)
                    sent += len(body)
            except (TimeoutError, BrokenPipeError, ConnectionResetError):
                pass
        grown = guarded.rss() - before
    finally:
        for sock in socks:
            sock.close()
    assert grown < 32 * 1024 * 1024, (grown, sent)
    assert guarded.alive()


def test_unauthenticated_too_many_arguments_are_refused(guarded: DisqProcess) -> None:
    assert _closed_with(guarded, b"*11\r\n") == (
        b"-ERR Protocol error: unauthenticated multibulk length\r\n")
    assert _closed_with(guarded, b"*1000000\r\n") == (
        b"-ERR Protocol error: unauthenticated multibulk length\r\n")
    # an inline request: at most 16 KB on its line
    assert _closed_with(guarded, b"AUTH " + b"x" * 20000) == (
        b"-ERR Protocol error: unauthenticated inline length\r\n")
    # within the limits: answered, the connection stays
    with guarded.connect() as sock:
        ten = b"*10\r\n" + b"$4\r\nPING\r\n" * 10
        assert raw_command(sock, ten) == b"-NOAUTH Authentication required.\r\n"
        big = b"x" * 16384
        assert raw_command(sock, b"*2\r\n$4\r\nPING\r\n$16384\r\n" + big + b"\r\n") == (
            b"-NOAUTH Authentication required.\r\n")
        assert raw_command(sock, b"PING " + b"y" * 16000 + b"\r\n") == (
            b"-NOAUTH Authentication required.\r\n")
        assert raw_command(sock, b"AUTH " + PASSWORD + b"\r\n") == b"+OK\r\n"


def test_once_authenticated_big_arguments_are_accepted(guarded: DisqProcess) -> None:
    big = b"z" * 300_000
    header = b"*2\r\n$4\r\nPING\r\n$300000\r\n"
    ping_big = header + big + b"\r\n"
    expected = b"$300000\r\n" + big + b"\r\n"
    with guarded.connect() as sock:
        assert raw_command(sock, b"AUTH " + PASSWORD + b"\r\n") == b"+OK\r\n"
        assert _read_exactly(sock, ping_big, len(expected)) == expected
    # an AUTH pipelined with the big request lifts the limits for it, as in Redis
    with guarded.connect() as sock:
        auth = b"*2\r\n$4\r\nAUTH\r\n$6\r\n" + PASSWORD + b"\r\n"
        assert _read_exactly(sock, auth + ping_big, 5 + len(expected)) == b"+OK\r\n" + expected
    # a wrong password pipelined with it: the big request closes the connection (its
    # header only is sent: the node closes a connection with unread bytes with a reset)
    assert _closed_with(guarded, b"AUTH nope\r\n" + header) == (
        WRONG + b"-ERR Protocol error: unauthenticated bulk length\r\n")


def _read_exactly(sock: socket.socket, payload: bytes, size: int) -> bytes:
    sock.settimeout(10)
    sock.sendall(payload)
    data = b""
    while len(data) < size:
        chunk = sock.recv(65536)
        if not chunk:
            break
        data += chunk
    return data


def test_the_usual_handshakes_still_work(guarded: DisqProcess) -> None:
    with guarded.connect() as sock:
        hello = raw_command(sock, b"HELLO 3 AUTH default " + PASSWORD + b" SETNAME worker\r\n")
        assert hello.startswith(b"%7\r\n"), hello
        assert raw_command(sock, b"CLIENT GETNAME\r\n") == b"$6\r\nworker\r\n"
    with guarded.connect() as sock:
        args = [b"HELLO", b"3", b"AUTH", b"default", PASSWORD, b"SETNAME", b"w2"]
        request = b"*7\r\n" + b"".join(b"$%d\r\n%s\r\n" % (len(a), a) for a in args)
        assert raw_command(sock, request).startswith(b"%7\r\n")
    client = client_as(guarded)  # redis-py: HELLO / AUTH on connect
    assert client.execute_command("PING") == b"PONG"
    client.close()
