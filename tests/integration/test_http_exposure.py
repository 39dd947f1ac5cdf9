"""The HTTP port against strangers and web pages, on real nodes: connections that hold
it without sending a request (a read deadline, a share of maxclients that leaves RESP
room, maxclients-per-ip), requests a web page makes the operator's browser send
(another site's Origin, a form's content type, a Host name rebound to the node), and
JSON made to cost the node (deep nesting, huge numbers).

Connections are raw sockets or http.client, so that every header is the test's."""

from __future__ import annotations

import http.client
import json
import socket
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from support import DisqProcess, free_port, raw_command, wait_closed, wait_for

# A request whose headers never end: what a slow client (or a slow-loris) sends.
UNFINISHED = b"GET /api/v1/queues HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Wait: "


def http_request(port: int, method: str, path: str, body: bytes | None = None,
                 headers: dict[str, str] | None = None,
                 source: str = "127.0.0.1") -> tuple[int, Any]:
    """(status, the JSON body or the bytes); `headers` as given (Host included)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=20,
                                      source_address=(source, 0))
    try:
        conn.request(method, path, body=body, headers=headers or {})
        answer = conn.getresponse()
        data = answer.read()
        if (answer.getheader("Content-Type") or "").split(";")[0].endswith("json"):
            return answer.status, json.loads(data)
        return answer.status, data
    finally:
        conn.close()


def post_json(port: int, path: str, data: Any, **headers: str) -> tuple[int, Any]:
    return http_request(port, "POST", path, json.dumps(data).encode(),
                        {"Content-Type": "application/json", **headers})


class Node:
    """A node with an HTTP port, and an admin RESP client on its unix socket (no IP:
    never counted per IP)."""

    def __init__(self, process: DisqProcess, http_port: int, admin: redis.Redis) -> None:
        self.process = process
        self.http_port = http_port
        self.admin = admin

    def info(self, section: str) -> dict[str, Any]:
        return self.admin.info(section)

    def http_connections(self) -> int:
        return int(self.info("clients")["http_connections"])


@pytest.fixture
def http_node(start_node: Callable[..., DisqProcess],
              tmp_path: Path) -> Iterator[Callable[..., Node]]:
    """http_node(*flags): a node with an HTTP port and an admin client."""
    admins: list[redis.Redis] = []

    def start(*flags: str) -> Node:
        port = free_port()
        path = tmp_path / f"s{len(admins)}.sock"
        process = start_node("--http-port", str(port), "--unixsocket", str(path), *flags)
        admin = redis.Redis(unix_socket_path=str(path), socket_timeout=10)
        admins.append(admin)
        return Node(process, port, admin)

    yield start
    for admin in admins:
        admin.close()


@pytest.fixture
def sockets() -> Iterator[list[socket.socket]]:
    """Raw connections, closed at the end of the test."""
    opened: list[socket.socket] = []
    yield opened
    for sock in opened:
        sock.close()


def hold(opened: list[socket.socket], node: Node, source: str = "127.0.0.1") -> socket.socket:
    """A connection that sends the start of a request and no more, once the node
    counts it (so that connections are counted in the order they are made)."""
    before = node.http_connections()
    sock = socket.create_connection(("127.0.0.1", node.http_port), timeout=10,
                                    source_address=(source, 0))
    opened.append(sock)
    sock.sendall(UNFINISHED)
    wait_for(lambda: node.http_connections() == before + 1,
             message="the node to count the HTTP connection")
    return sock


def refused(opened: list[socket.socket], port: int, source: str = "127.0.0.1") -> bytes:
    """What the node answers a connection it does not take, until it closes it."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=10,
                                    source_address=(source, 0))
    opened.append(sock)
    answer = b""
    while chunk := sock.recv(65536):
        answer += chunk
    return answer


# -- connections ----------------------------------------------------------------------------------

def test_slow_http_clients_take_only_their_share_and_resp_still_answers(
        http_node: Callable[..., Node], sockets: list[socket.socket]) -> None:
    # (held connections must outlive the test, however slow the machine)
    node = http_node("--maxclients", "8", "--http-read-timeout", "600")  # + the admin
    held = [hold(sockets, node) for _ in range(4)]  # half of maxclients: HTTP's share
    answer = refused(sockets, node.http_port)
    assert answer.startswith(b"HTTP/1.1 503 "), answer
    assert b"maxclients" in answer and b"Connection: close" in answer
    assert node.http_connections() == 4
    # RESP has the other half (the test's connections go only once the node sees them)
    clients: list[redis.Redis] = []

    def one_more() -> bool:
        client = node.process.client()
        try:
            client.ping()
        except redis.ConnectionError:
            client.close()
            return False
        clients.append(client)
        return True

    try:
        for _ in range(3):
            wait_for(one_more, message="a RESP connection to be taken")
        with pytest.raises(redis.ConnectionError, match="max number of clients reached"):
            node.process.client().ping()  # the HTTP connections count in maxclients
    finally:
        for client in clients:
            client.close()
    assert node.info("stats")["rejected_connections"] >= 2
    held[0].close()  # one goes: HTTP has room again
    wait_for(lambda: node.http_connections() == 3, message="the node to see it go")
    assert http_request(node.http_port, "GET", "/api/v1/queues")[0] == 200


def test_a_client_too_slow_with_its_headers_or_body_is_closed(
        http_node: Callable[..., Node], sockets: list[socket.socket]) -> None:
    node = http_node("--http-read-timeout", "1")
    slow = socket.create_connection(("127.0.0.1", node.http_port), timeout=30)
    sockets.append(slow)
    slow.sendall(UNFINISHED)
    wait_closed(slow, 30, "a connection that never finished its headers")
    idle = socket.create_connection(("127.0.0.1", node.http_port), timeout=30)
    sockets.append(idle)  # it sends nothing at all
    wait_closed(idle, 30, "a connection that never sent a request")
    body = socket.create_connection(("127.0.0.1", node.http_port), timeout=30)
    sockets.append(body)
    body.sendall(b"POST /api/v1/queues/q/jobs HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                 b"Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"bo")
    answer = b""
    while chunk := body.recv(65536):
        answer += chunk
    assert answer.startswith(b"HTTP/1.1 408 "), answer
    assert b"http-read-timeout" in answer
    wait_for(lambda: node.http_connections() == 0, message="the slow connections to go")
    # a client that is not slow is served
    for n in range(3):
        assert post_json(node.http_port, "/api/v1/queues/q/jobs", {"body": str(n)})[0] == 201
    assert node.admin.execute_command("QLEN", "q") == 3


def test_http_connections_count_in_maxclients_per_ip(
        http_node: Callable[..., Node], sockets: list[socket.socket]) -> None:
    node = http_node("--maxclients-per-ip", "2", "--http-read-timeout", "600")
    first = hold(sockets, node)
    hold(sockets, node)
    answer = refused(sockets, node.http_port)
    assert answer.startswith(b"HTTP/1.1 503 "), answer
    assert b"maxclients-per-ip" in answer
    # another IP has its own count
    assert http_request(node.http_port, "GET", "/api/v1/queues", source="127.0.0.2")[0] == 200
    # a RESP connection of the same IP is beyond the limit too: -BUSY
    resp = socket.create_connection(("127.0.0.1", node.process.port), timeout=10)
    sockets.append(resp)
    assert raw_command(resp, b"PING\r\n").startswith(b"-BUSY too many connections")
    first.close()
    wait_for(lambda: node.http_connections() == 1, message="the node to see it go")
    assert raw_command(resp, b"PING\r\n") == b"+PONG\r\n"  # the RESP one came within
    resp.close()
    wait_for(lambda: http_request(node.http_port, "GET", "/api/v1/queues")[0] == 200,
             message="the IP to have room for HTTP again")


def test_a_batch_over_http_is_still_rate_limited(http_node: Callable[..., Node]) -> None:
    """An HTTP request's commands are not a connection of their own (maxclients counts
    the HTTP connection), but client-rate-limit holds for them as before."""
    node = http_node("--client-rate-limit", "3")
    status, added = post_json(node.http_port, "/api/v1/queues/q/jobs",
                              [{"body": str(n)} for n in range(10)])
    assert status == 207, added
    taken = [job for job in added["jobs"] if "id" in job]
    refused_jobs = [job["error"]["code"] for job in added["jobs"] if "error" in job]
    assert len(taken) >= 3 and refused_jobs and set(refused_jobs) == {"BUSY"}, added


# -- requests a web page makes the browser send ---------------------------------------------------

def test_cross_site_requests_are_refused(http_node: Callable[..., Node]) -> None:
    started = http_node()
    node, port = started.process, started.http_port
    own = f"http://127.0.0.1:{port}"
    jobs = "/api/v1/queues/q/jobs"
    # a page elsewhere posts a "simple request" (no preflight): text/plain, its Origin
    status, problem = http_request(port, "POST", jobs, b'{"body": "x"}', {
        "Content-Type": "text/plain", "Origin": "http://evil.example"})
    assert (status, problem["code"]) == (403, "CROSSORIGIN"), problem
    assert "http-allowed-origins" in problem["detail"]
    for headers in ({"Origin": "http://evil.example"},
                    {"Origin": "null"},
                    {"Origin": f"https://127.0.0.1:{port}"},  # another scheme
                    {"Referer": "http://evil.example/page.html"},
                    {"Sec-Fetch-Site": "cross-site"}):
        assert post_json(port, jobs, {"body": "x"}, **headers)[0] == 403, headers
    # a job ack without a body, and a GET that takes jobs, from elsewhere
    job_id = node.client().execute_command("ADDJOB", "q", "kept", 0).decode()
    assert http_request(port, "POST", f"/api/v1/jobs/{job_id}/ack", None,
                        {"Origin": "http://evil.example"})[0] == 403
    assert http_request(port, "GET", f"{jobs}?nohang=1", None,
                        {"Sec-Fetch-Site": "cross-site",
                         "Referer": "http://evil.example/"})[0] == 403
    assert node.client().execute_command("QLEN", "q") == 1  # nothing added, taken or acked
    # a body that is not JSON is refused whoever sends it
    for content_type in ("text/plain", "application/x-www-form-urlencoded",
                         "multipart/form-data; boundary=x", None):
        status, problem = http_request(port, "POST", jobs, b'{"body": "x"}',
                                       {"Content-Type": content_type} if content_type
                                       else {})
        assert (status, problem["code"]) == (415, "NOTJSON"), (content_type, problem)
    assert node.client().execute_command("QLEN", "q") == 1
    # the node's own pages (the dashboard), and clients that are not browsers
    assert post_json(port, jobs, {"body": "own"}, Origin=own,
                     **{"Sec-Fetch-Site": "same-origin"})[0] == 201
    assert post_json(port, jobs, {"body": "own"}, Referer=f"{own}/")[0] == 201
    assert post_json(port, jobs, {"body": "curl"})[0] == 201
    assert http_request(port, "POST", jobs, b'{"body": "charset"}', {
        "Content-Type": "application/json; charset=utf-8"})[0] == 201
    assert http_request(port, "GET", "/api/v1/queues", None,
                        {"Origin": "http://evil.example"})[0] == 403
    assert http_request(port, "GET", "/", None, {"Sec-Fetch-Site": "cross-site"})[0] == 200
    assert node.client().execute_command("QLEN", "q") == 5
    # an origin the operator lets in
    node.client().config_set("http-allowed-origins", "http://evil.example https://ops.example/")
    assert post_json(port, jobs, {"body": "allowed"}, Origin="http://evil.example")[0] == 201
    assert http_request(port, "POST", f"/api/v1/jobs/{job_id}/ack", None,
                        {"Origin": "https://ops.example"}) == (200, {"acked": 1})


def test_a_host_name_that_is_not_the_nodes_is_refused(http_node: Callable[..., Node]) -> None:
    started = http_node()
    node, port = started.process, started.http_port
    job_id = node.client().execute_command("ADDJOB", "q", "secret", 0).decode()
    # a name rebound to 127.0.0.1 by its owner's DNS: the browser sends it as Host
    for path in (f"/api/v1/jobs/{job_id}", "/api/v1/queues", "/"):
        status, problem = http_request(port, "GET", path, None,
                                       {"Host": f"attacker.example:{port}"})
        assert (status, problem["code"]) == (421, "MISDIRECTED"), (path, problem)
        assert "http-allowed-hosts" in problem["detail"] and b"secret" not in json.dumps(
            problem).encode()
    for host in (f"127.0.0.1:{port}", "127.0.0.1", f"localhost:{port}", "LOCALHOST",
                 f"[::1]:{port}", socket.gethostname()):
        assert http_request(port, "GET", f"/api/v1/jobs/{job_id}", None,
                            {"Host": host})[0] == 200, host
    node.client().config_set("http-allowed-hosts", f"queue.internal Attacker.Example:{port}")
    status, shown = http_request(port, "GET", f"/api/v1/jobs/{job_id}", None,
                                 {"Host": f"attacker.example:{port}"})
    assert status == 200 and shown["body"] == "secret"
    assert http_request(port, "GET", "/", None, {"Host": "other.example"})[0] == 421
    # an HTTP/1.0 request without Host is not a browser's: it is answered
    sock = socket.create_connection(("127.0.0.1", port), timeout=20)
    try:
        sock.sendall(b"GET /api/v1/queues HTTP/1.0\r\n\r\n")
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    finally:
        sock.close()
    assert answer.startswith(b"HTTP/1.0 200 ") or answer.startswith(b"HTTP/1.1 200 "), answer


# -- JSON made to cost the node -------------------------------------------------------------------

@pytest.mark.parametrize(("raw", "detail"), [
    (b"[" * 200_000 + b"]" * 200_000, "nested deeper than 64"),
    (b'{"body": "x", "a": ' + b"[" * 100 + b"]" * 100 + b"}", "nested deeper than 64"),
    (b'{"body": "x", "ttl_ms": ' + b"9" * 100_000 + b"}", "more than 40 digits"),
    (b'{"body": "x", "ttl_ms": 1' + b"0" * 5000 + b".5}", "more than 40 digits"),
    (b'{"body": "x", "ttl_ms": 1e' + b"9" * 100_000 + b"}", "more than 40 digits"),
    (b'{"body": "\\ud800"}', "surrogate"),  # the job's body could not be encoded
])
def test_json_made_to_cost_the_node_gets_400(http_node: Callable[..., Node], raw: bytes,
                                             detail: str) -> None:
    started = http_node()
    node, port = started.process, started.http_port
    status, problem = http_request(port, "POST", "/api/v1/queues/q/jobs", raw,
                                   {"Content-Type": "application/json"})
    assert (status, problem["status"]) == (400, 400), problem
    assert detail in problem["detail"]
    # what looks deep or long inside a string is only text
    text = '"' + "[" * 1000 + "\\" + "9" * 1000
    status, added = post_json(port, "/api/v1/queues/q/jobs", {"body": text, "ttl_ms": 100_000})
    assert status == 201, added
    assert node.client().execute_command("QLEN", "q") == 1
