"""Recurring jobs over HTTP (/api/v1/cron: CRON LIST, ADD, DEL), against a real node:
defined, listed, replaced and deleted as over RESP, with CRON ADD's checks and a
user's queues."""

from __future__ import annotations

import base64
from collections.abc import Callable

from support import DisqProcess, call, free_port
from test_http import Http


def test_cron_over_http(start_node: Callable[..., DisqProcess]) -> None:
    port = free_port()
    node = start_node("--http-port", str(port))
    http = Http(port)
    status, answer = http.post("/api/v1/cron", {"name": "nightly", "queue": "reports",
                                                "spec": "0 3 * * *", "body": "run",
                                                "tz": "Europe/Paris", "priority": 3})
    assert status == 201, answer
    schedule = answer["schedule"]
    assert (schedule["name"], schedule["queue"], schedule["spec"], schedule["tz"]) == (
        "nightly", "reports", "0 3 * * *", "Europe/Paris")
    assert 0 < schedule["next_fire_in"] <= 24 * 3600 * 1000
    assert call(node, "CRON", "LIST")[0][1] == b"nightly"  # the RESP view: the same
    assert http.post("/api/v1/cron", {"name": "nightly", "queue": "reports",
                                      "spec": "*/5 * * * *", "body": "x"})[0] == 201
    assert [s["spec"] for s in http.get("/api/v1/cron")[1]["schedules"]] == ["*/5 * * * *"]
    for bad, detail in (
            ({"name": "b", "queue": "q", "spec": "not cron", "body": "x"}, "spec"),
            ({"queue": "q", "spec": "* * * * *", "body": "x"}, "'name' must be a string"),
            ({"name": "b", "queue": "q", "spec": "* * * * *", "body": "x", "nope": 1},
             "unknown field 'nope'"),
            ({"name": "b", "queue": "q", "spec": "* * * * *", "body": "x", "priority": 300},
             "PRIORITY must be between 0 and 255")):
        status, problem = http.post("/api/v1/cron", bad)
        assert status == 400 and detail in problem["detail"], problem
    assert len(http.get("/api/v1/cron")[1]["schedules"]) == 1  # nothing added
    assert http.request("DELETE", "/api/v1/cron/nightly") == (200, {"deleted": True})
    assert http.request("DELETE", "/api/v1/cron/nightly")[0] == 404
    assert http.get("/api/v1/cron")[1]["schedules"] == []


def test_a_user_defines_schedules_of_its_queues_only(start_node: Callable[..., DisqProcess]
                                                    ) -> None:
    port = free_port()
    node = start_node("--http-port", str(port))
    call(node, "ACL", "SETUSER", "alice", "on", ">pw", "~a:*", "+@all")
    alice = Http(port, auth="Basic " + base64.b64encode(b"alice:pw").decode())
    job = {"name": "t", "spec": "* * * * *", "body": "x"}
    assert alice.post("/api/v1/cron", {**job, "queue": "b:q"})[0] == 403
    assert alice.post("/api/v1/cron", {**job, "queue": "a:q"})[0] == 201
    call(node, "CRON", "ADD", "other", "b:q", "* * * * *", "x")
    assert [s["name"] for s in alice.get("/api/v1/cron")[1]["schedules"]] == ["t"]
    assert alice.request("DELETE", "/api/v1/cron/other")[0] == 403
