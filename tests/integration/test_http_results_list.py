"""GET /api/v1/results, the results a node keeps (the dashboard's finished jobs), against
a real node: the last kept first, a queue's alone, `limit` bounded, each result cut to
its preview (a UTF-8 character never cut in two, binary as base64 with its size), the
past results left out; a user restricted to some queues sees only theirs and is
refused another queue's."""

from __future__ import annotations

import base64
from collections.abc import Callable

from support import DisqProcess, call, free_port, wait_for
from test_acl import NOPERM_KEY, client_as
from test_http import Http

from disq.server.http.api_results import MAX_RESULTS_LISTED, PREVIEW_BYTES


def _node(start_node: Callable[..., DisqProcess]) -> tuple[DisqProcess, int]:
    port = free_port()
    return start_node("--http-port", str(port)), port


def _as(port: int, user: bytes) -> Http:
    """The node's HTTP API as `user` (its password: `user`-pw)."""
    return Http(port, auth="Basic " + base64.b64encode(user + b":" + user + b"-pw").decode())


def _acked(node: DisqProcess, queue: str, result: bytes | str | None) -> str:
    """A job of `queue` taken and acknowledged with `result` (None: a plain ACK)."""
    job_id = call(node, "ADDJOB", queue, "body", 0)
    assert isinstance(job_id, bytes)
    assert call(node, "GETJOB", "NOHANG", "FROM", queue)
    extra = () if result is None else ("RESULT", result)
    assert call(node, "ACKJOB", job_id, *extra) == 1
    return job_id.decode()


def test_results_are_listed_newest_first(start_node: Callable[..., DisqProcess]) -> None:
    node, port = _node(start_node)
    http = Http(port)
    first = _acked(node, "a", "one")
    second = _acked(node, "b", b"\xff\x00\x01")
    third = _acked(node, "a", "é" * PREVIEW_BYTES)  # 2 bytes a character: cut at 1024
    status, listed = http.get("/api/v1/results")
    assert status == 200 and listed["complete"] is True
    assert [r["id"] for r in listed["results"]] == [third, second, first]
    long, binary, short = listed["results"]
    assert short == {"id": first, "state": "acked", "result": "one", "queue": "a",
                     "ended_ms": short["ended_ms"], "expires_ms": short["ended_ms"] + 3_600_000,
                     "bytes": 3, "truncated": False, "repeats": 0}
    assert (binary["result"], binary["result_base64"], binary["bytes"]) == (None, "/wAB", 3)
    assert long["result"] == "é" * (PREVIEW_BYTES // 2) and long["truncated"] is True
    assert long["bytes"] == 2 * PREVIEW_BYTES
    cut = _acked(node, "c", "x" + "é" * PREVIEW_BYTES)  # the 1024th byte is a character's first
    status, listed = http.get("/api/v1/results?queue=c")
    assert [r["id"] for r in listed["results"]] == [cut]
    assert listed["results"][0]["result"] == "x" + "é" * (PREVIEW_BYTES // 2 - 1)
    # the full result is the job's own route's
    assert http.get(f"/api/v1/jobs/{third}/result")[1]["result"] == "é" * PREVIEW_BYTES

    # a queue's alone, and limit
    status, listed = http.get("/api/v1/results?queue=a&limit=1")
    assert [r["id"] for r in listed["results"]] == [third]
    assert http.get("/api/v1/results?queue=nothing")[1] == {"results": [], "complete": True}
    plain = _acked(node, "a", None)  # a plain ACK nobody waited for keeps nothing
    assert plain not in [r["id"] for r in http.get("/api/v1/results")[1]["results"]]


def test_bad_limits_and_past_results(start_node: Callable[..., DisqProcess]) -> None:
    node, port = _node(start_node)
    http = Http(port)
    for query in ("limit=0", f"limit={MAX_RESULTS_LISTED + 1}", "limit=x"):
        status, problem = http.get(f"/api/v1/results?{query}")
        assert status == 400 and "'limit'" in problem["detail"], (query, problem)
    assert http.get(f"/api/v1/results?limit={MAX_RESULTS_LISTED}")[0] == 200
    # a result past its RESULT-TTL is not listed, even before the cron drops it
    call(node, "QPOLICY", "short", "SET", "RESULT-TTL", 1)
    gone = _acked(node, "short", "soon gone")
    listed = http.get("/api/v1/results?queue=short")[1]["results"]
    assert [r["id"] for r in listed] == [gone]
    assert listed[0]["expires_ms"] - listed[0]["ended_ms"] == 1000
    wait_for(lambda: http.get("/api/v1/results?queue=short")[1]["results"] == [], 5,
             message="the result past its time left out")


def test_a_user_of_some_queues_lists_only_their_results(
        start_node: Callable[..., DisqProcess]) -> None:
    node, port = _node(start_node)
    http = Http(port)
    mine = _acked(node, "c:q", "mine")
    _acked(node, "other", "theirs")
    admin = client_as(node)
    admin.execute_command("ACL", "SETUSER", "carl", "on", ">carl-pw", "~c:*", "+@all")
    admin.execute_command("ACL", "SETUSER", "nora", "on", ">nora-pw", "~*", "+@all",
                          "-waitjob")
    admin.close()
    carl = _as(port, b"carl")
    status, listed = carl.get("/api/v1/results")
    assert status == 200 and [r["id"] for r in listed["results"]] == [mine]
    assert [r["queue"] for r in carl.get("/api/v1/results?queue=c:q")[1]["results"]] == ["c:q"]
    status, problem = carl.get("/api/v1/results?queue=other")
    assert (status, problem["code"], problem["detail"]) == (403, "NOPERM", NOPERM_KEY)
    # the admin sees both; a user who may not run WAITJOB reads no result
    assert len(http.get("/api/v1/results")[1]["results"]) == 2
    status, problem = _as(port, b"nora").get("/api/v1/results")
    assert (status, problem["code"]) == (403, "NOPERM")
