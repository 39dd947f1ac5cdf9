"""The HTTP API's batches (/api/v1/batches) against real nodes: made, members added by
the job route's "batch", closed, read and listed as BATCH NEW / CLOSE / STATUS / LIST
answer over RESP; their errors as problems with their statuses; a user of some queues
reads, lists and closes only the batches of its queues."""

from __future__ import annotations

import base64
from collections.abc import Callable
from urllib.parse import quote

from support import DisqProcess, call, free_port, wait_for
from test_acl import NOPERM_KEY, client_as
from test_http import Http


def _node(start_node: Callable[..., DisqProcess]) -> tuple[DisqProcess, Http]:
    port = free_port()
    return start_node("--http-port", str(port)), Http(port)


def _as(http: Http, user: str) -> Http:
    """The same node's API as `user` (its password: `user`-pw)."""
    port = int(http.base.rsplit(":", 1)[1])
    return Http(port, auth="Basic " + base64.b64encode(f"{user}:{user}-pw".encode()).decode())


def test_a_batch_made_filled_closed_and_done_over_http(
        start_node: Callable[..., DisqProcess]) -> None:
    node, http = _node(start_node)
    status, made = http.post("/api/v1/batches", {"id": "h/1 é", "ondone": ["h-done", "fin"],
                                                 "onsuccess": ["h-ok", "good"], "ttl_ms": 60_000})
    assert status == 201, made
    assert made["state"] == "open" and made["members"] == 0 and made["callbacks"] == []
    path = "/api/v1/batches/" + quote("h/1 é", safe="")
    ids = []
    for body in ("a", "b"):  # the job route's "batch" (ADDJOB's option)
        status, added = http.post("/api/v1/queues/h-work/jobs", {"body": body, "batch": "h/1 é"})
        assert status == 201, added
        ids.append(added["id"])
    status, shown = http.get(f"/api/v1/jobs/{quote(ids[0], safe='')}")
    assert status == 200 and shown["batch"] == "h/1 é"  # SHOW names it
    assert http.get(path)[1]["members"] == 2
    assert http.post(path + "/close") == (200, {"members": 2})
    status, problem = http.post(path + "/close")
    assert (status, problem["code"]) == (409, "BATCHCLOSED")
    status, problem = http.post("/api/v1/queues/h-work/jobs", {"body": "late", "batch": "h/1 é"})
    assert (status, problem["code"]) == (409, "BATCHCLOSED")
    status, added = http.post("/api/v1/queues/h-more/jobs", [
        {"body": "late", "batch": "h/1 é"}, {"body": "free"}])  # a list: each its outcome
    assert status == 207 and added["jobs"][0]["error"]["status"] == 409
    assert added["jobs"][0]["error"]["code"] == "BATCHCLOSED" and "id" in added["jobs"][1]
    for job_id in ids:
        assert call(node, "GETJOB", "NOHANG", "FROM", "h-work")
        assert call(node, "ACKJOB", job_id) == 1
    wait_for(lambda: http.get(path)[1]["state"] == "done", 5, message="the batch done")
    done = http.get(path)[1]
    resp = call(node, "BATCH", "STATUS", "h/1 é")
    assert done == {"id": "h/1 é", "state": "done", "members": 2, "pending": 0, "acked": 2,
                    "dead": 0, "callbacks": [c.decode() for c in resp[resp.index(b"callbacks") + 1]],
                    "expires_ms": resp[resp.index(b"expires") + 1]}
    assert len(done["callbacks"]) == 2
    assert http.get("/api/v1/batches")[1] == {"batches": [done], "complete": True}
    assert http.get("/api/v1/batches?state=done")[1]["batches"] == [done]
    assert http.get("/api/v1/batches?state=open")[1]["batches"] == []


def test_bad_batch_requests_get_problems_and_change_nothing(
        start_node: Callable[..., DisqProcess]) -> None:
    node, http = _node(start_node)
    for body, detail in (
            ({}, "'id' must be a string, the batch's ID"),
            ({"id": 5}, "'id' must be a string, the batch's ID"),
            ({"id": ""}, "a batch ID must be 1 to 256 bytes"),
            ({"id": "b", "ondone": "q"}, "'ondone' must be a list of two strings (a queue and a body)"),
            ({"id": "b", "ondone": ["", "x"]}, "ONDONE needs a queue name and a job body"),
            ({"id": "b", "ttl_ms": 0}, "TTL must be between 1 and 7776000 seconds"),
            ({"id": "b", "ttl": 60}, "'ttl' (seconds) is gone: give 'ttl_ms' (milliseconds)"),
            ({"id": "b", "color": "red"}, "unknown field 'color'")):
        status, problem = http.post("/api/v1/batches", body)
        assert (status, problem["detail"]) == (400, detail), body
    assert http.get("/api/v1/batches")[1]["batches"] == []
    assert http.post("/api/v1/batches", {"id": "b"})[0] == 201
    status, problem = http.post("/api/v1/batches", {"id": "b"})
    assert (status, problem["code"]) == (409, "BATCHEXISTS")
    for method, path in (("GET", "/api/v1/batches/nope"), ("POST", "/api/v1/batches/nope/close")):
        status, problem = http.request(method, path, {} if method == "POST" else None)
        assert (status, problem["code"], problem["detail"]) == (404, "NOBATCH", "no batch 'nope'")
    status, problem = http.post("/api/v1/queues/q/jobs", {"body": "x", "batch": "nope"})
    assert (status, problem["code"]) == (404, "NOBATCH")
    assert call(node, "QLEN", "q") == 0
    status, problem = http.get("/api/v1/batches?state=gone")
    assert (status, problem["detail"]) == (400, "STATE must be open, closed or done")


def test_a_user_of_some_queues_reads_and_closes_only_its_batches(
        start_node: Callable[..., DisqProcess]) -> None:
    node, http = _node(start_node)
    admin = client_as(node)
    assert admin.execute_command("ACL", "SETUSER", "ann", "on", ">ann-pw", "~a:*",
                                 "+@all") == b"OK"
    assert admin.execute_command("ACL", "SETUSER", "nat", "on", ">nat-pw", "~*", "+@all",
                                 "-batch") == b"OK"
    admin.close()
    for bid, ondone in (("mine", "a:done"), ("theirs", "b:done")):
        assert http.post("/api/v1/batches", {"id": bid, "ondone": [ondone, "x"]})[0] == 201
    assert http.post("/api/v1/batches", {"id": "plain"})[0] == 201
    ann = _as(http, "ann")
    status, listed = ann.get("/api/v1/batches")
    assert status == 200 and [b["id"] for b in listed["batches"]] == ["mine"]
    assert ann.get("/api/v1/batches/mine")[0] == 200
    for method, path in (("GET", "/api/v1/batches/theirs"),
                         ("POST", "/api/v1/batches/theirs/close")):
        status, problem = ann.request(method, path, {} if method == "POST" else None)
        assert (status, problem["code"], problem["detail"]) == (403, "NOPERM", NOPERM_KEY)
    status, problem = ann.post("/api/v1/batches", {"id": "new", "ondone": ["b:q", "x"]})
    assert (status, problem["code"]) == (403, "NOPERM")
    assert ann.post("/api/v1/batches/mine/close") == (200, {"members": 0})
    assert http.get("/api/v1/batches/theirs")[1]["state"] == "open"  # not closed by ann
    assert {b["id"] for b in http.get("/api/v1/batches")[1]["batches"]} == {
        "mine", "theirs", "plain"}
    status, problem = _as(http, "nat").get("/api/v1/batches")
    assert (status, problem["code"]) == (403, "NOPERM")  # may not run BATCH at all
