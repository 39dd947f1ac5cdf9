"""The HTTP API against real nodes: every route, the same results as the
RESP commands behind them, authentication, TLS, bad input (malformed JSON, wrong
types, an oversized body, unknown jobs and routes), a long poll whose client goes
away (nothing lost), the OpenAPI document, /docs and /metrics on the HTTP port."""

from __future__ import annotations

import base64
import json
import socket
import ssl
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any

import pytest
from openapi_spec_validator import validate
from support import NODE_TIMEOUT, DisqProcess, form_cluster, free_port, myid, wait_for
from tlsutil import Certs, make_certs, needs_openssl


class Http:
    """A small JSON client of one node's HTTP port."""

    def __init__(self, port: int, scheme: str = "http", auth: str | None = None,
                 context: ssl.SSLContext | None = None) -> None:
        self.base = f"{scheme}://127.0.0.1:{port}"
        self.auth = auth
        self.context = context

    def request(self, method: str, path: str, body: Any = None, raw: bytes | None = None,
                headers: dict[str, str] | None = None) -> tuple[int, Any]:
        data = raw if raw is not None else (json.dumps(body).encode() if body is not None
                                            else None)
        req = urllib.request.Request(self.base + path, data=data, method=method,
                                     headers=headers or {})
        if data is not None:
            req.add_header("Content-Type", "application/json")
        if self.auth:
            req.add_header("Authorization", self.auth)
        try:
            with urllib.request.urlopen(req, timeout=20, context=self.context) as resp:
                return resp.status, _decode(resp.read(), resp.headers.get_content_type())
        except urllib.error.HTTPError as err:
            return err.code, _decode(err.read(), err.headers.get_content_type())

    def get(self, path: str) -> tuple[int, Any]:
        return self.request("GET", path)

    def post(self, path: str, body: Any = None) -> tuple[int, Any]:
        return self.request("POST", path, body if body is not None else {})


def _decode(data: bytes, content_type: str) -> Any:
    if content_type.endswith("json"):
        return json.loads(data)
    return data


@pytest.fixture
def http_node(start_node: Callable[..., DisqProcess]) -> tuple[DisqProcess, Http]:
    port = free_port()
    node = start_node("--http-port", str(port))
    return node, Http(port)


def resp(node: DisqProcess, *args: Any) -> Any:
    client = node.client()
    try:
        return client.execute_command(*args)
    finally:
        client.close()


# -- jobs -------------------------------------------------------------------------------------

def test_add_take_show_and_acknowledge_a_job(http_node: tuple[DisqProcess, Http]) -> None:
    node, http = http_node
    status, added = http.post("/api/v1/queues/q/jobs", {"body": "hello", "ttl_ms": 100_000,
                                                        "replicate": 1, "retry_ms": 4500})
    assert status == 201 and added["id"].startswith("D-")
    job_id = added["id"]
    assert resp(node, "QLEN", "q") == 1  # the RESP side sees it
    status, shown = http.get(f"/api/v1/jobs/{job_id}")
    assert status == 200 and (shown["id"], shown["queue"], shown["body"]) == (job_id, "q",
                                                                              "hello")
    # durations in ms (RETRY is whole seconds on the wire: 4.5 s rounded up, never early)
    assert (shown["retry_ms"], shown["state"]) == (5000, "queued")
    assert 99_000 <= shown["ttl_ms"] <= 100_000 and "retry" not in shown
    status, taken = http.get("/api/v1/queues/q/jobs?count=10&timeout_ms=1000")
    assert status == 200 and [j["id"] for j in taken["jobs"]] == [job_id]
    assert taken["jobs"][0]["nacks"] == 0
    assert http.post(f"/api/v1/jobs/{job_id}/working") == (200, {"retry_ms": 5000})
    assert http.post(f"/api/v1/jobs/{job_id}/nack", {"delay_ms": 10}) == (200, {"requeued": 1})
    wait_for(lambda: resp(node, "QLEN", "q") == 1, 5, message="back after 10 ms")
    assert http.post(f"/api/v1/jobs/{job_id}/dequeue") == (200, {"dequeued": 1})
    assert http.post(f"/api/v1/jobs/{job_id}/enqueue") == (200, {"queued": 1})
    assert http.post(f"/api/v1/jobs/{job_id}/ack") == (200, {"acked": 1})
    assert resp(node, "SHOW", job_id) is None
    status, problem = http.get(f"/api/v1/jobs/{job_id}")
    assert status == 404 and problem["code"] == "NOJOB"


def test_batches_binary_bodies_and_extended_options(http_node: tuple[DisqProcess, Http]) -> None:
    node, http = http_node
    raw = bytes(range(256))
    status, added = http.post("/api/v1/queues/b/jobs", [
        {"body": "text", "priority": 3, "group": "g1"},
        {"body_base64": base64.b64encode(raw).decode(), "delay_ms": 60_000},
        {"body": "bad", "priority": 999},
    ])
    assert status == 207
    first, second, third = added["jobs"]
    assert "id" in first and "id" in second
    assert third["error"] == {"status": 400, "code": "ERR",
                              "detail": "PRIORITY must be between 0 and 255"}
    assert resp(node, "SHOW", second["id"])[resp(node, "SHOW", second["id"]).index(
        b"body") + 1] == raw
    status, shown = http.get(f"/api/v1/jobs/{second['id']}")
    assert status == 200, shown
    assert shown["body"] is None and base64.b64decode(shown["body_base64"]) == raw
    assert shown["due_ms"] > 0
    assert http.request("PATCH", f"/api/v1/jobs/{first['id']}", {"priority": 7}) == (
        200, {"ok": True})
    slashed = [http.post("/api/v1/queues/s/jobs", {"body": str(i)})[1]["id"]
               for i in range(200)]
    with_slash = next(job for job in slashed if "/" in job)  # base64: '/' and '+' occur
    encoded = with_slash.replace("/", "%2F").replace("+", "%2B")
    for path in (with_slash, encoded):
        assert http.get(f"/api/v1/jobs/{path}")[1]["id"] == with_slash, path
    assert http.get(f"/api/v1/jobs/{first['id']}")[1]["priority"] == 7
    status, peeked = http.get("/api/v1/queues/b/peek?count=5")
    assert [j["id"] for j in peeked["jobs"]] == [first["id"]]  # the other one is not due
    assert http.request("DELETE", f"/api/v1/jobs/{second['id']}") == (200, {"deleted": 1})
    assert http.request("DELETE", f"/api/v1/jobs/{second['id']}")[0] == 404
    ok_batch = http.post("/api/v1/queues/b/jobs", [{"body": "x"}, {"body": "y"}])
    assert ok_batch[0] == 201 and len(ok_batch[1]["jobs"]) == 2


def test_http_and_resp_give_the_same_results(http_node: tuple[DisqProcess, Http]) -> None:
    """The same request, over both front ends: the same reply or the same error."""
    node, http = http_node
    cases = [  # (JSON job, ADDJOB options)
        ({"body": "x", "ttl_ms": 0}, ["TTL", 0]),
        ({"body": "x", "retry_ms": 0}, ["RETRY", 0]),
        ({"body": "x", "delay_ms": 10_000, "ttl_ms": 4001}, ["DELAY-MS", 10_000, "TTL", 5]),
        ({"body": "x", "delay_ms": 1, "at": 5}, ["DELAY-MS", 1, "AT", 5]),
        ({"body": "x", "max_deliveries": 0}, ["MAXDELIVERIES", 0]),
        ({"body": "x", "replicate": 3}, ["REPLICATE", 3]),
        ({"body": "x", "group": "g" * 257}, ["GROUP", "g" * 257]),
        ({"body": "x", "unique": ""}, ["UNIQUE", ""]),
        ({"body": "x", "dedup": "d", "unique": "u"}, ["DEDUP", "d", "UNIQUE", "u"]),
    ]
    for job, options in cases:
        status, answer = http.post("/api/v1/queues/same/jobs", job)
        try:
            over_resp = resp(node, "ADDJOB", "same", "x", 0, *options)
        except Exception as exc:  # redis-py: "message" (ERR) or "CODE message"
            text = str(exc)
            assert status >= 400, (job, answer, text)
            assert text in (answer["detail"], f"{answer['code']} {answer['detail']}"), (
                job, answer, text)
        else:
            assert status == 201 and over_resp.startswith(b"D-"), (job, answer)
    job_id = http.post("/api/v1/queues/same/jobs", {"body": "same"})[1]["id"]
    over_resp = resp(node, "SHOW", job_id)
    shown = http.get(f"/api/v1/jobs/{job_id}")[1]
    for name, value in zip(over_resp[::2], over_resp[1::2], strict=True):
        key = name.decode().replace("-", "_")
        if key in ("ttl", "next_requeue_within", "next_awake_within"):
            continue  # they move with time
        expected = value.decode() if isinstance(value, bytes) else (
            [v.decode() for v in value] if isinstance(value, list) else value)
        if key in ("delay", "retry"):  # seconds over RESP (Disque's), ms over HTTP
            key, expected = f"{key}_ms", value * 1000
        assert shown[key] == expected, key


def test_a_unique_key_names_one_live_job(http_node: tuple[DisqProcess, Http]) -> None:
    """"unique" (ADDJOB ... UNIQUE): the job added with the key while it lives."""
    node, http = http_node
    status, added = http.post("/api/v1/queues/u/jobs", {"body": "a", "unique": "k"})
    assert status == 201
    first = added["id"]
    status, again = http.post("/api/v1/queues/u/jobs", [{"body": "b", "unique": "k"},
                                                       {"body": "c", "unique": "other"}])
    assert status == 201 and again["jobs"][0] == {"id": first}, again
    assert again["jobs"][1]["id"] != first
    assert resp(node, "QLEN", "u") == 2
    assert resp(node, "ACKJOB", first) == 1
    assert http.post("/api/v1/queues/u/jobs", {"body": "d", "unique": "k"})[1]["id"] != first


# -- queues -----------------------------------------------------------------------------------

def test_queues_pause_policy_and_dead_letters(http_node: tuple[DisqProcess, Http]) -> None:
    node, http = http_node
    for _ in range(3):
        http.post("/api/v1/queues/work/jobs", {"body": "j", "max_deliveries": 1})
    status, listed = http.get("/api/v1/queues")
    assert status == 200
    (work,) = [q for q in listed["queues"] if q["name"] == "work"]
    assert (work["len"], work["length_cluster"], work["pause"]) == (3, 3, "none")
    status, updated = http.request("PUT", "/api/v1/queues/work", {
        "pause": "out", "policy": {"rate": 10, "backoff": [100, 1000]}})
    assert status == 200 and updated["pause"] == "out"
    assert updated["policy"]["rate"] == "10" and updated["policy"]["backoff"] == [100, 1000]
    assert resp(node, "PAUSE", "work", "state") == b"out"
    assert resp(node, "GETJOB", "NOHANG", "FROM", "work") is None
    assert http.request("PUT", "/api/v1/queues/work", {"pause": "none", "policy": None})[0] == 200
    assert resp(node, "QPOLICY", "work", "GET") is None
    for job in resp(node, "GETJOB", "COUNT", 3, "FROM", "work"):
        resp(node, "NACK", job[1])
    assert resp(node, "QLEN", "dead:work") == 3
    assert http.post("/api/v1/queues/dead:work/requeue-dead", {"count": 2}) == (
        200, {"requeued": 2})
    assert resp(node, "QLEN", "work") == 2
    status, problem = http.post("/api/v1/queues/work/requeue-dead")
    assert status == 400 and "not a dead-letter queue" in problem["detail"]
    assert http.get("/api/v1/queues/nosuch")[0] == 404


def test_queue_policy_defaults_and_group_limits(http_node: tuple[DisqProcess, Http]) -> None:
    """The policy route sets and shows the ADDJOB defaults and group limits; a job POSTed
    without the option takes the queue's, with it keeps its own; bad values change
    nothing."""
    node, http = http_node
    assert resp(node, "GETJOB", "NOHANG", "FROM", "hq") is None  # (the queue, empty)
    status, updated = http.request("PUT", "/api/v1/queues/hq", {"policy": {
        "retry_ms": 7000, "ttl_ms": 599_001, "maxlen": 1, "group_concurrency": 2,
        "group_rate": 2.5}})
    assert status == 200, updated
    assert {k: updated["policy"][k] for k in (
        "retry_ms", "ttl_ms", "replicate", "maxlen", "group_concurrency", "group_rate")} == {
        "retry_ms": 7000, "ttl_ms": 600_000, "replicate": None, "maxlen": 1,
        "group_concurrency": 2, "group_rate": "2.5"}
    status, added = http.post("/api/v1/queues/hq/jobs", {"body": "a"})
    assert status == 201, added
    job = resp(node, "SHOW", added["id"])
    assert job[job.index(b"retry") + 1] == 7
    status, refused = http.post("/api/v1/queues/hq/jobs", {"body": "b"})  # MAXLEN 1
    assert status >= 400 and refused["code"] == "MAXLEN", refused
    status, problem = http.request("PUT", "/api/v1/queues/hq", {"policy": {"ttl_ms": 0}})
    assert status == 400 and "TTL must be between 1" in problem["detail"]
    status, problem = http.request("PUT", "/api/v1/queues/hq", {"policy": {"ttl": 5}})
    assert (status, problem["detail"]) == (
        400, "'ttl' (seconds) is gone: give 'ttl_ms' (milliseconds)")
    assert http.get("/api/v1/queues/hq")[1]["policy"]["ttl_ms"] == 600_000


def test_cluster_and_cron(start_node: Callable[..., DisqProcess]) -> None:
    port = free_port()
    node = start_node("--http-port", str(port))
    http = Http(port)
    resp(node, "CRON", "ADD", "nightly", "reports", "0 2 * * *", "r")
    status, cluster = http.get("/api/v1/cluster")
    assert status == 200 and cluster["myself"] == resp(node, "CLUSTER", "MYID").decode()
    assert [n["id"] for n in cluster["nodes"]] == [cluster["myself"]]
    assert cluster["info"]["tcp_port"] == node.port
    status, cron = http.get("/api/v1/cron")
    assert status == 200 and cron["schedules"][0]["name"] == "nightly"
    # users and permissions (tests/integration/test_acl.py): the users
    status, users = http.get("/api/v1/users")
    assert status == 200 and users["users"][0]["name"] == "default", users
    assert http.request("DELETE", "/api/v1/users/alice")[0] == 404
    _, document = http.get("/openapi.json")
    assert "403" in document["paths"]["/api/v1/users"]["get"]["responses"]


def test_jobs_are_listed_a_page_at_a_time(http_node: tuple[DisqProcess, Http]) -> None:
    """GET /jobs: JSCAN's pages, a cursor to the next; the same jobs RESP lists."""
    node, http = http_node
    ids = {resp(node, "ADDJOB", "scan", f"job {i}", 0).decode() for i in range(25)}
    resp(node, "ADDJOB", "other", "not listed", 0)
    taken = resp(node, "GETJOB", "COUNT", 5, "FROM", "scan")
    seen: list[str] = []
    cursor, pages = 0, 0
    while True:
        # count is a hint, as JSCAN's: a page ends after the bucket that reached it, and
        # buckets hold however many jobs their hashes gave them (no bound to check)
        status, page = http.get(f"/api/v1/jobs?queue=scan&count=2&cursor={cursor}")
        assert status == 200, page
        assert all(job["queue"] == "scan" and job["body"].startswith("job ")
                   for job in page["jobs"])
        seen += [job["id"] for job in page["jobs"]]
        cursor, pages = page["cursor"], pages + 1
        if cursor == 0:
            break
    assert pages >= 2 and sorted(seen) == sorted(ids)
    status, active = http.get("/api/v1/jobs?queue=scan&state=active&count=1000")
    assert status == 200 and {j["id"] for j in active["jobs"]} == {
        j[1].decode() for j in taken}
    assert all(job["state"] == "active" for job in active["jobs"])
    status, problem = http.get("/api/v1/jobs?state=sleeping")
    assert status == 400 and problem["detail"] == "Invalid job state name"
    assert http.get("/api/v1/jobs?count=5000")[0] == 400


def test_cluster_stats_show_every_node_and_a_killed_one_failing(
        start_node: Callable[..., DisqProcess]) -> None:
    """GET /cluster/stats on any node: every node's stats, asked over the bus, and
    each node's state; a node killed turns fail, its stats null."""
    ports = [free_port() for _ in range(3)]
    nodes = form_cluster([start_node("--cluster-node-timeout", str(NODE_TIMEOUT),
                                     "--http-port", str(port)) for port in ports])
    ids = [myid(n) for n in nodes]
    resp(nodes[1], "ADDJOB", "stats-q", "a", 0, "REPLICATE", 1)
    for _ in range(2):
        resp(nodes[2], "ADDJOB", "stats-q", "b", 0, "REPLICATE", 1)
    resp(nodes[2], "PAUSE", "stats-q", "in")
    resp(nodes[0], "ADDJOB", "dead:stats-q", "c", 0, "REPLICATE", 1)
    resp(nodes[2], "GETJOB", "FROM", "stats-q")

    def stats(port: int, query: str = "") -> dict[str, Any]:
        status, got = Http(port).get("/api/v1/cluster/stats" + query)
        assert status == 200, got
        return got

    for node, port in zip(nodes, ports, strict=True):
        got = stats(port)
        assert got["myself"] == myid(node) and sorted(got["reporting"]) == sorted(ids)
        by_id = {entry["id"]: entry for entry in got["nodes"]}
        assert sorted(by_id) == sorted(ids) and got["nodes"][0]["id"] == myid(node)
        for other in nodes:
            entry = by_id[myid(other)]
            assert entry["state"] == "ok" and entry["address"] == f"127.0.0.1:{other.port}"
            info = other.client().info()
            assert entry["stats"]["registered_jobs"] == info["registered_jobs"]
            assert entry["stats"]["used_memory"] > 0 and entry["stats"]["used_memory_rss"] > 0
        queues = {q["name"]: q for q in by_id[ids[2]]["stats"]["queues"]}
        assert queues["stats-q"] == {"name": "stats-q", "len": 1, "jobs_in": 2,
                                     "jobs_out": 1, "blocked": 0, "pause": "in",
                                     "dead_letter_queue": False}
        merged = {q["name"]: q for q in got["queues"]}
        assert merged["stats-q"] == {"name": "stats-q", "len": 2, "jobs_in": 3,
                                     "jobs_out": 1, "blocked": 0, "pause": "mixed",
                                     "dead_letter_queue": False, "nodes": 2}
        assert merged["dead:stats-q"]["dead_letter_queue"] is True
        assert [q["name"] for q in got["queues"]][0] == "stats-q"  # biggest first
    lean = stats(ports[0], "?node_queues=false")
    assert all("queues" not in entry["stats"] for entry in lean["nodes"])
    assert len(lean["queues"]) == 2
    one = stats(ports[0], "?queue=dead:stats-q")
    assert [[q["name"] for q in entry["stats"]["queues"]] for entry in one["nodes"]] == [
        ["dead:stats-q"], [], []]
    nodes[2].kill()

    def failing() -> dict[str, Any] | None:
        got = stats(ports[0])
        entry = next(e for e in got["nodes"] if e["id"] == ids[2])
        return got if entry["state"] == "fail" else None

    got = wait_for(failing, 10, 0.2, message="the killed node to be shown failing")
    entry = next(e for e in got["nodes"] if e["id"] == ids[2])
    assert entry["stats"] is None and "fail" in entry["flags"]
    assert sorted(got["reporting"]) == sorted(ids[:2])
    assert {q["name"]: q["len"] for q in got["queues"]} == {"stats-q": 1, "dead:stats-q": 1}


# -- long polls -------------------------------------------------------------------------------

def test_a_long_poll_is_served_and_one_whose_client_leaves_loses_nothing(
        http_node: tuple[DisqProcess, Http]) -> None:
    node, http = http_node
    host, port = http.base.rsplit("/", 1)[1].split(":")
    # a client that asks, then goes away while it waits
    sock = socket.create_connection((host, int(port)))
    sock.sendall(b"GET /api/v1/queues/lp/jobs?timeout_ms=20000 HTTP/1.1\r\n"
                 b"Host: 127.0.0.1\r\n\r\n")  # (another name is refused: DNS rebinding)
    wait_for(lambda: node.client().info("clients")["blocked_clients"] == 1, 5,
             message="the long poll to block")
    sock.close()
    wait_for(lambda: node.client().info("clients")["blocked_clients"] == 0, 5,
             message="the waiting consumer to leave with its client")
    job_id = resp(node, "ADDJOB", "lp", "kept", 0)
    assert resp(node, "QLEN", "lp") == 1  # nobody took it for the client that left
    # a long poll that waits, then gets the job added meanwhile
    import threading
    result: list[Any] = []
    poll = threading.Thread(target=lambda: result.append(
        http.get("/api/v1/queues/lp2/jobs?timeout_ms=10000")))
    poll.start()
    wait_for(lambda: node.client().info("clients")["blocked_clients"] == 1, 5,
             message="the second long poll to block")
    other = resp(node, "ADDJOB", "lp2", "for you", 0)
    poll.join(10)
    assert result and result[0][0] == 200
    assert [j["id"] for j in result[0][1]["jobs"]] == [other.decode()]
    started = time.monotonic()
    assert http.get("/api/v1/queues/empty/jobs?timeout_ms=300") == (200, {"jobs": []})
    assert time.monotonic() - started >= 0.3
    assert http.get("/api/v1/queues/empty/jobs?nohang=true") == (200, {"jobs": []})
    assert job_id


def test_an_add_whose_client_leaves_while_it_waits_for_its_copies_is_deleted(
        start_node: Callable[..., DisqProcess]) -> None:
    """As with a RESP client (Disque's unblockClientWaitingJobRepl): the job of an
    ADDJOB waiting for its copies is deleted when its HTTP client goes away."""
    port = free_port()
    node, peer = form_cluster([start_node("--http-port", str(port)), start_node()])
    resp(peer, "PAUSE", "w", "in")  # the peer takes no copy: the add waits for ever
    sock = socket.create_connection(("127.0.0.1", port))
    body = b'{"body": "x", "replicate": 2, "timeout_ms": 0}'
    sock.sendall(b"POST /api/v1/queues/w/jobs HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                 b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
                 % (len(body), body))
    wait_for(lambda: node.client().info("jobs")["registered_jobs"] == 1, 5,
             message="the job to wait for its copies")
    sock.close()
    wait_for(lambda: node.client().info("jobs")["registered_jobs"] == 0, 5,
             message="the job to be deleted with its client")
    resp(peer, "PAUSE", "w", "none")
    status, added = Http(port).post("/api/v1/queues/w/jobs", {"body": "y", "replicate": 2})
    assert status == 201 and resp(node, "SHOW", added["id"]) is not None, added


# -- bad input --------------------------------------------------------------------------------

@pytest.mark.parametrize(("method", "path", "raw", "status", "detail"), [
    ("POST", "/api/v1/queues/q/jobs", b"{not json", 400, "the request body is not JSON"),
    ("POST", "/api/v1/queues/q/jobs", b'"text"', 400,
     "the request body must be a job object or a non-empty list of them"),
    ("POST", "/api/v1/queues/q/jobs", b"[]", 400,
     "the request body must be a job object or a non-empty list of them"),
    ("POST", "/api/v1/queues/q/jobs", b'{"body": "x", "ttl_ms": "long"}', 400,
     "'ttl_ms' must be an integer >= 0 (milliseconds)"),
    ("POST", "/api/v1/queues/q/jobs", b'{"body": "x", "retry_ms": -1}', 400,
     "'retry_ms' must be an integer >= 0 (milliseconds)"),
    ("POST", "/api/v1/queues/q/jobs", b'{"body": "x", "retry": 30}', 400,
     "'retry' (seconds) is gone: give 'retry_ms' (milliseconds)"),
    ("POST", "/api/v1/queues/q/jobs", b'{"body": "x", "delay": 5}', 400,
     "'delay' (seconds) is gone: give 'delay_ms' (milliseconds)"),
    ("POST", "/api/v1/queues/q/jobs", b'{"body": "x", "async": 1}', 400,
     "'async' must be true or false"),
    ("POST", "/api/v1/queues/q/jobs", b'{"body": "x", "colour": "red"}', 400,
     "unknown field 'colour'"),
    ("POST", "/api/v1/queues/q/jobs", b'{"ttl": 5}', 400,
     "a job needs one of 'body' (a string) or 'body_base64'"),
    ("POST", "/api/v1/queues/q/jobs", b'{"body_base64": "***"}', 400,
     "'body_base64' is not base64"),
    ("GET", "/api/v1/queues/q/jobs?count=0", None, 400, "'count' must be at least 1"),
    ("GET", "/api/v1/queues/q/jobs?timeout_ms=soon", None, 400,
     "'timeout_ms' must be an integer"),
    ("GET", "/api/v1/jobs/not-an-id", None, 400, "Invalid Job ID format."),
    ("POST", "/api/v1/jobs/D-00000000-AAAAAAAAAAAAAAAAAAAAAAAA-05a1/working", b"{}", 404,
     "Job not known in the context of this node."),  # WORKING's -NOJOB, as over RESP
    ("POST", "/api/v1/jobs/D-00000000-AAAAAAAAAAAAAAAAAAAAAAAA-05a1/frob", b"{}", 400,
     "Invalid Job ID format."),
    ("PATCH", "/api/v1/jobs/D-00000000-AAAAAAAAAAAAAAAAAAAAAAAA-05a1", b'{"priority": "hi"}',
     400, "'priority' must be an integer"),
    ("PUT", "/api/v1/queues/q", b'{"pause": "sideways"}', 400,
     "'pause' must be one of in, out, all, none"),
    ("PUT", "/api/v1/queues/q", b'{"policy": {"rate": 0}}', 400,
     "RATE must be a number of jobs per second, > 0 and <= 1000000000"),
    ("GET", "/api/v1/nowhere", None, 404, "no route /api/v1/nowhere"),
    ("DELETE", "/api/v1/queues", None, 405, "DELETE is not allowed here; try GET, HEAD"),
])
def test_bad_requests_get_problems_and_change_nothing(
        http_node: tuple[DisqProcess, Http], method: str, path: str, raw: bytes | None,
        status: int, detail: str) -> None:
    node, http = http_node
    got, problem = http.request(method, path, raw=raw)
    assert (got, problem["detail"], problem["status"]) == (status, detail, status)
    assert problem["type"].startswith("urn:disq:error:") and problem["code"]
    assert resp(node, "QLEN", "q") == 0 and resp(node, "PING") is True


def test_an_oversized_body_is_refused(start_node: Callable[..., DisqProcess]) -> None:
    port = free_port()
    node = start_node("--http-port", str(port), "--http-max-body", "1024")
    status, problem = Http(port).post("/api/v1/queues/q/jobs", {"body": "x" * 2000})
    assert status == 413 and "http-max-body" in problem["detail"]
    assert resp(node, "QLEN", "q") == 0


# -- auth, TLS, docs, metrics -----------------------------------------------------------------

def test_requirepass_protects_the_api(start_node: Callable[..., DisqProcess]) -> None:
    port = free_port()
    start_node("--http-port", str(port), "--requirepass", "s3cret",
               client_kwargs={"password": "s3cret"})
    assert Http(port).get("/api/v1/queues")[0] == 401
    assert Http(port, auth="Bearer wrong").get("/api/v1/queues")[0] == 401
    assert Http(port, auth="Bearer s3cret").get("/api/v1/queues")[0] == 200
    basic = base64.b64encode(b"anyone:s3cret").decode()
    assert Http(port, auth=f"Basic {basic}").post(
        "/api/v1/queues/q/jobs", {"body": "x"})[0] == 201
    assert Http(port).get("/metrics")[0] == 401
    for public in ("/", "/docs", "/openapi.json"):  # the page and the docs ask for nothing
        assert Http(port).get(public)[0] == 200, public


@needs_openssl
def test_the_http_port_speaks_tls_with_the_node_certificate(
        start_node: Callable[..., DisqProcess], tmp_path_factory: pytest.TempPathFactory) -> None:
    certs: Certs = make_certs(tmp_path_factory.mktemp("certs"))
    port = free_port()
    start_node(*certs.server_args(), "--tls-port", str(free_port()), "--http-port", str(port),
               "--tls-auth-clients", "optional")
    context = ssl.create_default_context(cafile=str(certs.ca))
    https = Http(port, scheme="https", context=context)
    assert https.post("/api/v1/queues/q/jobs", {"body": "over tls"})[0] == 201
    with pytest.raises((urllib.error.URLError, ConnectionError)):
        Http(port).get("/api/v1/queues")  # plain HTTP is not spoken there


def test_openapi_docs_and_metrics(http_node: tuple[DisqProcess, Http]) -> None:
    _, http = http_node
    status, document = http.get("/openapi.json")
    assert status == 200 and document["openapi"].startswith("3.")
    validate(document)  # valid for the version it declares (raises, naming what is not)
    for path in ("/api/v1/queues/{queue}/jobs", "/api/v1/jobs/{id}", "/api/v1/cluster",
                 "/api/v1/cluster/stats", "/api/v1/jobs"):
        assert path in document["paths"]
    assert "max_deliveries" in document["components"]["schemas"]["NewJob"]["properties"]
    status, page = http.get("/docs")
    assert status == 200 and b"swagger-ui-bundle.js" in page
    status, script = http.get("/docs/assets/swagger-ui-bundle.js")
    assert status == 200 and len(script) > 100_000  # served by the node, no CDN
    status, text = http.get("/metrics")
    assert status == 200 and b"disq_jobs_added_total" in text


# -- every job command: HTTP and RESP give the same reply and leave the job alike --------------

def _state(node: DisqProcess, job_id: str) -> dict[str, Any] | None:
    """SHOW without what differs between two jobs made alike (ID, times)."""
    reply = resp(node, "SHOW", job_id)
    if reply is None:
        return None
    fields = dict(zip(reply[::2], reply[1::2], strict=True))
    for name in (b"id", b"ctime", b"ttl", b"next-requeue-within", b"next-awake-within",
                 b"due-ms"):
        fields.pop(name, None)
    if b"history" in fields:  # its events (their times and details differ)
        fields[b"history"] = [event for _, event, _ in fields[b"history"]]
    return fields


@pytest.mark.parametrize(("http_call", "command", "key"), [
    (("POST", "ack", None), ("ACKJOB",), "acked"),
    (("POST", "fastack", None), ("FASTACK",), "deleted"),
    (("POST", "nack", {}), ("NACK",), "requeued"),
    (("POST", "nack", {"delay_ms": 5000}), ("NACK", "DELAY-MS", 5000), "requeued"),
    (("POST", "enqueue", None), ("ENQUEUE",), "queued"),
    (("POST", "dequeue", None), ("DEQUEUE",), "dequeued"),
    (("POST", "working", None), ("WORKING",), "retry_ms"),
    (("DELETE", "", None), ("DELJOB",), "deleted"),
    (("PATCH", "", {"priority": 9, "delay_ms": 60_000}),
     ("JOBSET", "PRIORITY", 9, "DELAY-MS", 60_000), "ok"),
])
@pytest.mark.parametrize("delivered", [True, False], ids=["delivered", "queued"])
def test_each_job_command_does_the_same_over_http_and_resp(
        http_node: tuple[DisqProcess, Http], http_call: tuple[str, str, Any],
        command: tuple[Any, ...], key: str, delivered: bool) -> None:
    node, http = http_node
    over_http = resp(node, "ADDJOB", "same", "body", 0, "RETRY", 30).decode()
    over_resp = resp(node, "ADDJOB", "same2", "body", 0, "RETRY", 30).decode()
    if delivered:
        resp(node, "GETJOB", "FROM", "same")
        resp(node, "GETJOB", "FROM", "same2")
    method, action, body = http_call
    path = f"/api/v1/jobs/{over_http}" + (f"/{action}" if action else "")
    status, answer = http.request(method, path, body)
    try:
        expected: Any = resp(node, command[0], *(
            (over_resp, *command[1:]) if command[0] == "JOBSET" else
            (*command[1:], over_resp)))
    except Exception as exc:  # an error over RESP: the same error over HTTP
        assert status >= 400 and str(exc).endswith(answer["detail"]), (answer, exc)
        return
    assert status == 200, answer
    if key == "retry_ms":  # WORKING's seconds (Disque's), in ms as every HTTP duration
        expected *= 1000
    assert answer[key] == (True if expected == b"OK" or expected is True else expected)
    http_state, resp_state = _state(node, over_http), _state(node, over_resp)
    if http_state is not None and resp_state is not None:
        http_state.pop(b"queue"), resp_state.pop(b"queue")
    assert http_state == resp_state
