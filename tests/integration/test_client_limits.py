"""Client request limits, disq extensions, on real nodes: maxclients-per-ip
(a connection beyond the limit stays open, its commands get -BUSY until an earlier one
of its IP goes) and client-rate-limit (a token bucket per connection), CONFIG SET on
open connections, the INFO and /metrics counters, bad values.

The limited connections are raw sockets from 127.0.0.1 (a node binds 127.0.0.1 and
sees 127.0.0.2 as another IP); the admin connection is the unix socket, which has no
IP and is never counted per IP."""

from __future__ import annotations

import re
import socket
import ssl
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from jobutil import Error, RawClient, Status
from support import DisqProcess, free_port, wait_closed, wait_for
from tlsutil import Certs, make_certs, needs_openssl

PONG = Status(b"PONG")


def busy_per_ip(ip: str, limit: int) -> Error:
    return Error(b"BUSY too many connections from %s (maxclients-per-ip is %d)"
                 % (ip.encode(), limit))


def busy_rate(rate: int) -> Error:
    return Error(b"BUSY client-rate-limit reached (%d commands per second)" % rate)


class Conn(RawClient):
    """A raw connection from `source` (any 127.x.y.z reaches a node on 127.0.0.1), or
    over TLS with `tls`."""

    def __init__(self, port: int, source: str = "127.0.0.1",
                 tls: ssl.SSLContext | None = None) -> None:
        sock = socket.create_connection(("127.0.0.1", port), timeout=10,
                                        source_address=(source, 0))
        self.sock = tls.wrap_socket(sock, server_hostname="127.0.0.1") if tls else sock
        self.buf = b""

    def pipeline(self, *commands: tuple[Any, ...]) -> list[Any]:
        """Every command in one write, then their replies."""
        self.send_raw(b"".join(self.encode(*args) for args in commands))
        return [self.read() for _ in commands]


@pytest.fixture
def limited_node(start_node: Callable[..., DisqProcess],
                 tmp_path: Path) -> Callable[..., tuple[DisqProcess, redis.Redis]]:
    """limited_node(*flags): a node with a unix socket, and an admin client on it."""
    admins: list[redis.Redis] = []

    def start(*flags: str) -> tuple[DisqProcess, redis.Redis]:
        path = tmp_path / f"s{len(admins)}.sock"
        node = start_node("--unixsocket", str(path), *flags)
        admin = redis.Redis(unix_socket_path=str(path), protocol=2, socket_timeout=10)
        admin.response_callbacks.clear()
        admins.append(admin)
        return node, admin

    yield start  # type: ignore[misc]
    for admin in admins:
        admin.close()


@pytest.fixture
def conns() -> Iterator[list[Conn]]:
    """Connections closed at the end of the test."""
    opened: list[Conn] = []
    yield opened
    for conn in opened:
        conn.close()


def connect(opened: list[Conn], node: DisqProcess, source: str = "127.0.0.1") -> Conn:
    """A new connection, registered by the node before this returns (its first PING is
    answered, PONG or -BUSY): connections are counted in accept order."""
    conn = Conn(node.port, source)
    opened.append(conn)
    conn.call("PING")
    return conn


def once_allowed(conn: Conn, *args: Any) -> Any:
    """The reply to `args`, sent until it is not refused (-BUSY)."""
    def attempt() -> tuple[Any] | None:
        reply = conn.call(*args)
        return None if isinstance(reply, Error) and reply.startswith(b"BUSY ") else (reply,)
    return wait_for(attempt, message=f"{args[0]} to be allowed")[0]


def stats(admin: redis.Redis) -> dict[str, int]:
    text = admin.execute_command("INFO", "stats").decode()
    return {key: int(value) for key, value in re.findall(r"^(rejected_\w+):(\d+)\r$",
                                                         text, re.M)}


def config_get(admin: redis.Redis, name: str) -> bytes:
    return admin.execute_command("CONFIG", "GET", name)[1]


# -- maxclients-per-ip ---------------------------------------------------------------------------

def test_a_connection_beyond_the_limit_stays_but_gets_busy(limited_node, conns) -> None:
    node, admin = limited_node("--maxclients-per-ip", "2")
    first, second = connect(conns, node), connect(conns, node)
    assert first.call("PING") == PONG and second.call("PING") == PONG
    extra = connect(conns, node)
    assert extra.call("PING") == busy_per_ip("127.0.0.1", 2)
    # not run: no job was added
    assert extra.call("ADDJOB", "limited", "body", 0) == busy_per_ip("127.0.0.1", 2)
    assert admin.execute_command("QLEN", "limited") == 0
    # still connected, and counted as a client
    assert extra.call("PING") == busy_per_ip("127.0.0.1", 2)
    assert int(admin.execute_command("INFO", "clients").split(b"connected_clients:")[1]
               .split(b"\r\n")[0]) == 4  # + the admin
    # another IP has its own count; the unix socket has none
    other = [connect(conns, node, "127.0.0.2") for _ in range(2)]
    assert [c.call("PING") for c in other] == [PONG, PONG]
    for _ in range(3):
        unix = redis.Redis(unix_socket_path=admin.connection_pool.connection_kwargs["path"],
                           protocol=2)
        assert unix.ping()
        unix.close()
    assert first.call("PING") == PONG  # the ones within the limit go on
    # the first one goes: the extra one comes within the limit
    first.close()
    wait_for(lambda: extra.call("PING") == PONG, message="the extra connection to work")
    assert extra.call("ADDJOB", "limited", "body", 0).startswith(b"D-")
    assert admin.execute_command("QLEN", "limited") == 1


def test_quit_is_never_refused(limited_node, conns) -> None:
    node, _ = limited_node("--maxclients-per-ip", "1")
    connect(conns, node)
    extra = connect(conns, node)
    assert extra.call("PING") == busy_per_ip("127.0.0.1", 1)
    assert extra.call("QUIT") == Status(b"OK")
    wait_closed(extra.sock, 5, "the connection that sent QUIT")


def test_the_oldest_over_the_limit_come_back_first(limited_node, conns) -> None:
    node, _ = limited_node("--maxclients-per-ip", "1")
    first, second, third = (connect(conns, node) for _ in range(3))
    first.close()
    wait_for(lambda: second.call("PING") == PONG, message="the second connection to work")
    assert third.call("PING") == busy_per_ip("127.0.0.1", 1)
    third.close()  # an over-limit one going changes nothing for the others
    fourth = connect(conns, node)
    assert second.call("PING") == PONG
    assert fourth.call("PING") == busy_per_ip("127.0.0.1", 1)


def test_config_set_maxclients_per_ip_applies_to_open_connections(limited_node,
                                                                   conns) -> None:
    node, admin = limited_node()
    assert config_get(admin, "maxclients-per-ip") == b"0"
    c1, c2, c3 = (connect(conns, node) for _ in range(3))
    assert [c.call("PING") for c in (c1, c2, c3)] == [PONG] * 3
    assert admin.execute_command("CONFIG", "SET", "maxclients-per-ip", "1") == b"OK"
    assert config_get(admin, "maxclients-per-ip") == b"1"
    # lowered: the newest go over it
    assert [c.call("PING") for c in (c1, c2, c3)] == [PONG] + [busy_per_ip("127.0.0.1", 1)] * 2
    # raised: the oldest over it come back first
    admin.execute_command("CONFIG", "SET", "maxclients-per-ip", "2")
    assert [c.call("PING") for c in (c1, c2, c3)] == [PONG, PONG, busy_per_ip("127.0.0.1", 2)]
    admin.execute_command("CONFIG", "SET", "maxclients-per-ip", "0")  # off
    assert [c.call("PING") for c in (c1, c2, c3)] == [PONG] * 3
    assert connect(conns, node).call("PING") == PONG


@needs_openssl
def test_tls_connections_count_with_the_plain_ones(limited_node, conns,
                                                   tmp_path: Path) -> None:
    certs: Certs = make_certs(tmp_path / "certs")
    tls_port = free_port()
    node, _ = limited_node(*certs.server_args(), "--tls-port", str(tls_port),
                           "--maxclients-per-ip", "1")
    context = ssl.create_default_context(cafile=str(certs.ca))
    context.load_cert_chain(str(certs.client_cert), str(certs.client_key))
    plain = connect(conns, node)
    tls = Conn(tls_port, tls=context)
    conns.append(tls)
    assert tls.call("PING") == busy_per_ip("127.0.0.1", 1)
    plain.close()
    wait_for(lambda: tls.call("PING") == PONG, message="the TLS connection to work")


# -- client-rate-limit ---------------------------------------------------------------------------

def test_a_pipelined_burst_beyond_the_rate_gets_busy_in_order(limited_node, conns) -> None:
    node, _ = limited_node("--client-rate-limit", "3")
    conn = Conn(node.port)  # a new connection's bucket is full
    conns.append(conn)
    replies = conn.pipeline(*[("ADDJOB", "rated", f"job{n}", 0) for n in range(3)],
                            *[("PING", str(n)) for n in range(7)])
    # the first three take the burst; one more may have refilled meanwhile, at most
    assert all(r.startswith(b"D-") for r in replies[:3]), replies
    ran = 3 + sum(1 for r in replies[3:] if not isinstance(r, Error))
    assert ran <= 4
    assert replies[ran:] == [busy_rate(3)] * (10 - ran), replies  # in order, none run
    # the connection stays; once tokens come back its commands run again
    assert once_allowed(conn, "QLEN", "rated") == 3


def test_config_set_client_rate_limit_applies_to_open_connections(limited_node,
                                                                   conns) -> None:
    node, admin = limited_node()
    conn = connect(conns, node)
    assert conn.pipeline(*[("PING",)] * 50) == [PONG] * 50  # off by default
    admin.execute_command("CONFIG", "SET", "client-rate-limit", "2")
    assert config_get(admin, "client-rate-limit") == b"2"
    replies = conn.pipeline(*[("PING",)] * 10)
    assert replies[:2] == [PONG] * 2 and replies[-7:] == [busy_rate(2)] * 7, replies
    admin.execute_command("CONFIG", "SET", "client-rate-limit", "1000")
    wait_for(lambda: conn.pipeline(*[("PING",)] * 100) == [PONG] * 100, timeout=10,
             interval=0.2, message="the bucket of the higher rate to fill")
    admin.execute_command("CONFIG", "SET", "client-rate-limit", "0")
    assert conn.pipeline(*[("PING",)] * 5000) == [PONG] * 5000


def test_unix_socket_connections_have_a_rate_limit_too(limited_node) -> None:
    _, admin = limited_node("--client-rate-limit", "2")
    pipe = admin.pipeline(transaction=False)
    for _ in range(10):
        pipe.execute_command("PING")
    replies = pipe.execute(raise_on_error=False)
    assert isinstance(replies[-1], redis.ResponseError)
    assert "client-rate-limit reached (2 commands per second)" in str(replies[-1])


# -- counters ----------------------------------------------------------------------------------

def scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as resp:
        return resp.read().decode()


def test_refused_commands_are_counted_in_info_and_metrics(limited_node, conns) -> None:
    metrics_port = free_port()
    node, admin = limited_node("--maxclients-per-ip", "1", "--metrics-port",
                               str(metrics_port))
    assert stats(admin) == {"rejected_connections": 0, "rejected_commands_per_ip": 0,
                            "rejected_commands_rate": 0}
    connect(conns, node)
    extra = connect(conns, node)  # its first PING: refused
    assert extra.pipeline(*[("PING",)] * 3) == [busy_per_ip("127.0.0.1", 1)] * 3
    admin.execute_command("CONFIG", "SET", "client-rate-limit", "3")
    other = connect(conns, node, "127.0.0.2")  # its PING: a token
    replies = other.pipeline(*[("PING",)] * 6)
    refused_rate = replies.count(busy_rate(3))
    assert refused_rate >= 3
    counted = stats(admin)
    assert counted["rejected_commands_per_ip"] == 4
    assert counted["rejected_commands_rate"] == refused_rate
    text = scrape(metrics_port)
    assert 'disq_rejected_commands_total{limit="per_ip"} 4.0' in text
    assert f'disq_rejected_commands_total{{limit="rate"}} {refused_rate}.0' in text
    admin.execute_command("CONFIG", "SET", "client-rate-limit", "0")
    admin.execute_command("CONFIG", "RESETSTAT")  # clears them, as rejected_connections
    assert stats(admin) == {"rejected_connections": 0, "rejected_commands_per_ip": 0,
                            "rejected_commands_rate": 0}


# -- bad values ----------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["maxclients-per-ip", "client-rate-limit"])
def test_bad_values_are_refused_and_change_nothing(limited_node, name: str) -> None:
    _, admin = limited_node()
    admin.execute_command("CONFIG", "SET", name, "50")
    for bad in ("-1", "abc", "", "1.5"):
        with pytest.raises(redis.ResponseError) as exc:
            admin.execute_command("CONFIG", "SET", name, bad)
        assert str(exc.value) == f"Invalid argument '{bad}' for CONFIG SET '{name}'"
    assert config_get(admin, name) == b"50"


@pytest.mark.parametrize(("value", "message"), [("-1", "argument out of range: '-1'"),
                                                 ("ten", "argument must be an integer")])
@pytest.mark.parametrize("name", ["maxclients-per-ip", "client-rate-limit"])
def test_a_bad_value_stops_the_start(start_node, name: str, value: str, message: str) -> None:
    with pytest.raises(RuntimeError) as exc:
        start_node(f"--{name}", value)
    assert f"--{name} {value}: {message}" in str(exc.value)
