"""The metrics port (`metrics-port`) against strangers and web pages, on real nodes:
connections that hold it without sending a request (a read deadline, a cap of its own
whose oldest idle connection gives way to a new one, a place in maxclients that leaves
RESP room), and requests a web page makes the operator's browser send (a Host name
rebound to the node, another site's Origin).

Connections are raw sockets or http.client, so that every header is the test's; the
node's file descriptors and threads are read from /proc."""

from __future__ import annotations

import http.client
import os
import socket
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis
from support import DisqProcess, free_port, wait_closed, wait_for

# A request whose headers never end: what a slow client (or a slow-loris) sends.
UNFINISHED = b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Wait: "
METRICS_MAX_CONNECTIONS = 16  # disq/server/http/metricsport.py's
HELD = 3 * METRICS_MAX_CONNECTIONS


class Node:
    """A node with a metrics port, and an admin RESP client on its unix socket."""

    def __init__(self, process: DisqProcess, metrics_port: int, admin: redis.Redis) -> None:
        self.process = process
        self.metrics_port = metrics_port
        self.admin = admin

    def http_connections(self) -> int:
        return int(self.admin.info("clients")["http_connections"])

    def open_files(self) -> int:
        return len(os.listdir(f"/proc/{self.process.pid}/fd"))

    def threads(self) -> int:
        return len(os.listdir(f"/proc/{self.process.pid}/task"))


@pytest.fixture
def metrics_node(start_node: Callable[..., DisqProcess],
                 tmp_path: Path) -> Iterator[Callable[..., Node]]:
    admins: list[redis.Redis] = []

    def start(*flags: str) -> Node:
        port = free_port()
        path = tmp_path / f"s{len(admins)}.sock"
        process = start_node("--metrics-port", str(port), "--unixsocket", str(path), *flags)
        admin = redis.Redis(unix_socket_path=str(path), socket_timeout=10)
        admins.append(admin)
        node = Node(process, port, admin)
        wait_for(lambda: scraped(node) is not None, message="the metrics port")
        return node

    yield start
    for admin in admins:
        admin.close()


@pytest.fixture
def sockets() -> Iterator[list[socket.socket]]:
    opened: list[socket.socket] = []
    yield opened
    for sock in opened:
        sock.close()


def get(port: int, path: str = "/metrics",
        headers: dict[str, str] | None = None) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=20)
    try:
        conn.request("GET", path, headers=headers or {})
        answer = conn.getresponse()
        return answer.status, answer.read()
    finally:
        conn.close()


def scraped(node: Node) -> bytes | None:
    """The metrics, or None if the port does not answer them."""
    try:
        status, body = get(node.metrics_port)
    except OSError:
        return None
    return body if status == 200 else None


def slow(opened: list[socket.socket], node: Node) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", node.metrics_port), timeout=10)
    opened.append(sock)
    sock.sendall(UNFINISHED)
    return sock


def is_closed(sock: socket.socket) -> bool:
    """Whether the node closed the connection (it never answers these)."""
    sock.setblocking(False)
    try:
        return sock.recv(65536) == b""
    except BlockingIOError:
        return False
    except OSError:
        return True
    finally:
        sock.setblocking(True)


# -- connections ----------------------------------------------------------------------------------

def test_slow_connections_to_the_metrics_port_hold_neither_files_nor_threads(
        metrics_node: Callable[..., Node], sockets: list[socket.socket]) -> None:
    # (held connections must outlive the test, however slow the machine)
    node = metrics_node("--http-read-timeout", "600")
    files, threads = node.open_files(), node.threads()
    held = [slow(sockets, node) for _ in range(HELD)]
    # a real scrape still gets in (the oldest idle connection gives way), RESP answers
    body = wait_for(lambda: scraped(node), message="a scrape among slow connections")
    assert b"disq_jobs_added_total" in body
    assert node.process.client().ping()
    # the node holds no more than its cap of them: the oldest were closed
    wait_for(lambda: node.open_files() <= files + METRICS_MAX_CONNECTIONS,
             message="the node to hold at most its cap of metrics connections")
    assert node.http_connections() <= METRICS_MAX_CONNECTIONS
    assert node.threads() <= threads + 1  # (the scrapes' formatting thread)
    wait_for(lambda: all(is_closed(sock) for sock in held[:HELD - METRICS_MAX_CONNECTIONS]),
             message="the oldest slow connections to be closed")


def test_metrics_connections_count_in_maxclients_and_leave_resp_its_half(
        metrics_node: Callable[..., Node], sockets: list[socket.socket]) -> None:
    node = metrics_node("--maxclients", "8", "--http-read-timeout", "600")  # + the admin
    for held in range(1, 5):  # half of maxclients: HTTP's share, which the metrics port is in
        slow(sockets, node)
        wait_for(lambda: node.http_connections() == held,  # noqa: B023 (awaited at once)
                 message="the node to count the metrics connection")
    refused = socket.create_connection(("127.0.0.1", node.metrics_port), timeout=10)
    sockets.append(refused)
    answer = b""
    while chunk := refused.recv(65536):
        answer += chunk
    assert answer.startswith(b"HTTP/1.1 503 "), answer
    assert b"maxclients" in answer
    clients = []
    try:  # RESP has the other half
        for _ in range(3):
            client = node.process.client()
            clients.append(client)
            assert client.ping()
    finally:
        for client in clients:
            client.close()


def test_metrics_connections_are_not_counted_per_ip(
        metrics_node: Callable[..., Node], sockets: list[socket.socket]) -> None:
    """A scraper on a host whose workers hold the IP's connections is let in, and the
    connections it holds never make a worker's commands -BUSY."""
    node = metrics_node("--maxclients-per-ip", "1", "--http-read-timeout", "600")
    worker = node.process.client()
    try:
        assert worker.ping()  # the IP's one connection
        assert b"disq_jobs_added_total" in (scraped(node) or b"")
        slow(sockets, node)
        wait_for(lambda: node.http_connections() == 1, message="the node to count it")
        assert worker.ping()
    finally:
        worker.close()


def test_a_metrics_connection_without_a_request_is_closed(
        metrics_node: Callable[..., Node], sockets: list[socket.socket]) -> None:
    node = metrics_node("--http-read-timeout", "1")
    unfinished = slow(sockets, node)
    wait_closed(unfinished, 30, "a connection that never finished its headers")
    idle = socket.create_connection(("127.0.0.1", node.metrics_port), timeout=30)
    sockets.append(idle)  # it sends nothing at all
    wait_closed(idle, 30, "a connection that never sent a request")
    wait_for(lambda: node.http_connections() == 0, message="the slow connections to go")
    assert b"disq_jobs_added_total" in (scraped(node) or b"")


# -- requests a web page makes the browser send ---------------------------------------------------

def test_the_metrics_port_answers_only_its_own_names_and_pages(
        metrics_node: Callable[..., Node]) -> None:
    node = metrics_node()
    port = node.metrics_port
    # DNS rebinding: a page at attacker.example, its name now pointing at 127.0.0.1
    status, body = get(port, headers={"Host": f"attacker.example:{port}"})
    assert status == 421 and b"http-allowed-hosts" in body, body
    assert b"disq_" not in body
    for host in (f"127.0.0.1:{port}", "localhost", f"[::1]:{port}", socket.gethostname()):
        assert get(port, headers={"Host": host})[0] == 200, host
    node.admin.config_set("http-allowed-hosts", "attacker.example")
    assert get(port, headers={"Host": f"attacker.example:{port}"})[0] == 200
    # another site's page, and the operator's browser
    for headers in ({"Origin": "http://evil.example"},
                    {"Referer": "http://evil.example/page.html"},
                    {"Sec-Fetch-Site": "cross-site"}):
        status, body = get(port, headers=headers)
        assert status == 403 and b"http-allowed-origins" in body, (headers, body)
    assert get(port, headers={"Origin": f"http://127.0.0.1:{port}"})[0] == 200
    node.admin.config_set("http-allowed-origins", "https://grafana.example")
    assert get(port, headers={"Origin": "https://grafana.example",
                              "Sec-Fetch-Site": "cross-site"})[0] == 200
