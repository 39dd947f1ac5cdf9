"""ADDJOB ... ATTR against real servers: the errors, SHOW's and the HTTP API's
`attrs`, and the attributes surviving replication to a cluster's other holders and an
AOF restart."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jobutil
import pytest
import test_http
from disq_client import Client
from jobutil import NULL_ARRAY, Error, RawClient
from support import DisqProcess, form_cluster
from test_http import Http

shared_disq = jobutil.shared_disq
node = jobutil.node
c = jobutil.c
http_node = test_http.http_node


def attrs_of(c: RawClient, job_id: bytes) -> list[bytes] | None:
    reply = c.call("SHOW", job_id)
    assert isinstance(reply, list), reply
    shown = dict(zip(reply[::2], reply[1::2], strict=True))
    value = shown.get(b"attrs")
    assert value is None or isinstance(value, list)
    return value


@pytest.mark.parametrize(("options", "error"), [
    (("ATTR", "", "v"), "ERR ATTR needs a key of 1 to 64 bytes and a value of at most 256 bytes"),
    (("ATTR", "k" * 65, "v"), "ERR ATTR needs a key of 1 to 64 bytes"),
    (("ATTR", "k", "v" * 257), "ERR ATTR needs a key of 1 to 64 bytes"),
    (("ATTR", "k"), "ERR syntax error"),
    (tuple(x for i in range(17) for x in ("ATTR", f"k{i}", "v")),
     "ERR ATTR: a job takes at most 16 attributes"),
])
def test_bad_attrs_are_refused_and_add_nothing(c: RawClient, options: tuple[Any, ...],
                                               error: str) -> None:
    for reply in (c.call("ADDJOB", "q", "body", 0, *options),
                  c.call("ADDJOBS", "q", 0, *options, "JOBS", "a", "b")):
        assert isinstance(reply, Error) and reply.decode().startswith(error), reply
    assert c.call("QLEN", "q") == 0


def test_show_gives_the_attrs_of_a_job_that_has_some(c: RawClient) -> None:
    job_id = c.add("q", "body", "ATTR", "tenant", "acme", "ATTR", "size", "12")
    assert attrs_of(c, job_id) == [b"tenant", b"acme", b"size", b"12"]
    assert attrs_of(c, c.add("q", "plain")) is None
    reply = c.call("ADDJOBS", "q", 0, "ATTR", "k", "v", "JOBS", "a", "b")
    assert isinstance(reply, list) and len(reply) == 2
    for added in reply:
        assert attrs_of(c, bytes(added)) == [b"k", b"v"]


def test_the_attrs_survive_an_aof_restart(start_node: Callable[..., DisqProcess]) -> None:
    node = start_node("--appendonly", "yes", name="n")
    with RawClient(node.port) as c:
        job_id = c.add("q", "body", "ATTR", "tenant", "acme", "ATTR", "empty", "",
                       "PRIORITY", 5)
    node.stop()
    node = start_node("--appendonly", "yes", name="n")
    with RawClient(node.port) as c:
        assert attrs_of(c, job_id) == [b"tenant", b"acme", b"empty", b""]


def test_the_attrs_reach_every_holder(start_node: Callable[..., DisqProcess]) -> None:
    nodes = form_cluster([start_node("--cluster-node-timeout", "1000") for _ in range(3)])
    with RawClient(nodes[0].port) as c:
        job_id = c.add("q", "body", "ATTR", "tenant", "acme", "REPLICATE", 3)
    for holder in nodes[1:]:
        with RawClient(holder.port) as c:
            assert attrs_of(c, job_id) == [b"tenant", b"acme"]


def test_the_http_api_takes_and_shows_attrs(http_node: tuple[DisqProcess, Http]) -> None:
    node, http = http_node
    status, added = http.post("/api/v1/queues/q/jobs", [
        {"body": "a", "attrs": {"tenant": "acme", "size": "3"}},
        {"body": "b", "attrs": [["tenant", "other"]]},
        {"body": "c", "attrs": {"": "v"}},
        {"body": "d"},
    ])
    assert status == 207
    first, second, third, plain = added["jobs"]
    assert third["error"]["status"] == 400 and "ATTR needs" in third["error"]["detail"]
    assert http.get(f"/api/v1/jobs/{first['id']}")[1]["attrs"] == {"tenant": "acme",
                                                                    "size": "3"}
    assert http.get(f"/api/v1/jobs/{second['id']}")[1]["attrs"] == {"tenant": "other"}
    assert "attrs" not in http.get(f"/api/v1/jobs/{plain['id']}")[1]
    status, problem = http.post("/api/v1/queues/q/jobs", {"body": "e", "attrs": "x=1"})
    assert status == 400 and "'attrs' must be" in problem["detail"]
    peeked = http.get("/api/v1/queues/q/peek?count=5")[1]["jobs"]
    assert peeked[0]["attrs"] == {"tenant": "acme", "size": "3"}


# -- GETJOB ... WHERE ---------------------------------------------------------------------

def bodies(reply: object) -> list[bytes]:
    assert isinstance(reply, list), reply
    return [entry[2] for entry in reply]


def test_getjob_where_takes_only_matching_jobs_and_leaves_the_rest(c: RawClient) -> None:
    for body, tenant, size in (("a", "acme", "1"), ("b", "other", "50"), ("c", "acme", "30"),
                               ("d", "acme", "big"), ("e", "acme-eu", "40")):
        c.add("q", body, "ATTR", "tenant", tenant, "ATTR", "size", size)
    c.add("q", "plain")
    assert bodies(c.call("GETJOB", "COUNT", 10, "WHERE", "tenant", "PREFIX", "acme",
                         "WHERE", "size", ">", 20, "FROM", "q")) == [b"c", b"e"]
    assert bodies(c.call("GETJOB", "WHERE", "tenant", "!=", "acme", "COUNT", 10,
                         "FROM", "q")) == [b"b"]
    assert c.call("GETJOB", "TIMEOUT", 50, "WHERE", "size", "<", 0, "FROM", "q") == NULL_ARRAY
    assert bodies(c.call("GETJOB", "COUNT", 10, "WHERE", "tenant", "EXISTS",
                         "FROM", "q")) == [b"a", b"d"]
    assert bodies(c.call("GETJOB", "NOHANG", "COUNT", 10, "FROM", "q")) == [b"plain"]


@pytest.mark.parametrize(("where", "error"), [
    (("WHERE", "k", "~", "v"), "ERR WHERE needs key = value"),
    (("WHERE", "k"), "ERR WHERE needs key = value"),
    (("WHERE", "k", "<", "ten"), "ERR WHERE key < n and key > n need a number"),
])
def test_a_bad_filter_is_refused_and_takes_nothing(c: RawClient, where: tuple[str, ...],
                                                  error: str) -> None:
    c.add("q", "body", "ATTR", "k", "v")
    reply = c.call("GETJOB", "NOHANG", *where, "FROM", "q")
    assert isinstance(reply, Error) and reply.decode().startswith(error), reply
    assert c.call("QLEN", "q") == 1


def test_the_python_client_adds_attrs_and_filters(node: DisqProcess) -> None:
    with Client([f"127.0.0.1:{node.port}"]) as client:
        acme = client.add_job("q", "a", attrs={"tenant": "acme", "size": "5"})
        client.add_jobs("q", ["b", "c"], attrs={"tenant": "other"})
        assert [job.id for job in client.get_jobs(
            "q", count=10, where=[("tenant", "=", "acme"), ("size", "<", 10)])] == [acme]
        assert [job.body for job in client.get_jobs(
            "q", count=10, timeout_ms=60_000, where=[("tenant", "EXISTS")])] == [b"b", b"c"]
        assert client.get_jobs("q", timeout_ms=50, where=[("tenant", "EXISTS")]) == []


def test_the_http_job_list_searches_attributes_and_bodies(
        start_node: Callable[..., DisqProcess]) -> None:
    from support import free_port

    port = free_port()
    n = start_node("--http-port", str(port))
    http = Http(port)
    with RawClient(n.port) as raw:
        eu = raw.call("ADDJOB", "s-q", "hello eu", 0, "ATTR", "region", "eu")
        raw.call("ADDJOB", "s-q", "hello us", 0, "ATTR", "region", "us")
        raw.call("ADDJOB", "s-other", "bye", 0)
    status, found = http.get("/api/v1/jobs?where=region%20%3D%20eu")
    assert status == 200 and [j["id"] for j in found["jobs"]] == [eu.decode()], found
    status, found = http.get("/api/v1/jobs?text=hello&queue=s-q")
    assert sorted(j["body"] for j in found["jobs"]) == ["hello eu", "hello us"]
    status, found = http.get("/api/v1/jobs?text=hello&where=region%20exists&where=region"
                             "%20!%3D%20eu")
    assert [j["body"] for j in found["jobs"]] == ["hello us"]
    status, problem = http.get("/api/v1/jobs?where=region%20~%20eu")
    assert status == 400 and "WHERE needs" in problem["detail"], problem
    status, problem = http.get("/api/v1/jobs?where=a%20%3D%20b%20c")
    assert status == 400 and "one condition each" in problem["detail"], problem
    assert http.get("/api/v1/jobs?text=" + "x" * 1025)[0] == 400


def test_getjob_withcounters_gives_the_attributes(c: RawClient) -> None:
    with_attrs = c.call("ADDJOB", "wc-q", "a", 0, "ATTR", "k", "v", "ATTR", "n", "1")
    extended = c.call("ADDJOB", "wc-q", "b", 0, "PRIORITY", 3)
    plain = c.call("ADDJOB", "wc-q", "c", 0)
    got = c.call("GETJOB", "WITHCOUNTERS", "COUNT", 3, "FROM", "wc-q")
    by_id = {entry[1]: entry for entry in got}
    fields = dict(zip(by_id[with_attrs][3::2], by_id[with_attrs][4::2], strict=True))
    assert fields[b"attrs"] == [b"k", b"v", b"n", b"1"] and fields[b"priority"] == 128
    fields = dict(zip(by_id[extended][3::2], by_id[extended][4::2], strict=True))
    assert fields[b"attrs"] == [] and fields[b"priority"] == 3
    assert len(by_id[plain]) == 7  # Disque's layout, untouched


def test_a_filtered_getjob_blocks_for_a_job_that_matches(node: DisqProcess, c: RawClient
                                                        ) -> None:
    with RawClient(node.port) as eu, RawClient(node.port) as us, \
            RawClient(node.port) as plain:
        eu.send("GETJOB", "TIMEOUT", 10_000, "WHERE", "region", "=", "eu", "FROM", "bq")
        us.send("GETJOB", "TIMEOUT", 10_000, "WHERE", "region", "=", "us", "FROM", "bq")
        wait_blocked(c, 2)
        other = c.add("bq", "asia", "ATTR", "region", "asia")  # no filtered one matches
        assert c.call("QLEN", "bq") == 1  # it stays queued
        plain.send("GETJOB", "TIMEOUT", 10_000, "FROM", "bq")
        assert plain.read()[0][1] == other  # a plain consumer takes it
        c.add("bq", "for us", "ATTR", "region", "us")
        assert us.read()[0][2] == b"for us"
        c.add("bq", "for eu", "ATTR", "region", "eu")
        assert eu.read()[0][2] == b"for eu"
        assert c.call("QLEN", "bq") == 0
        # the timeout answers as a plain GETJOB's
        eu.send("GETJOB", "TIMEOUT", 100, "WHERE", "region", "=", "eu", "FROM", "bq")
        assert eu.read() == NULL_ARRAY
    # a consumer gone while blocked leaves nothing behind: the next job stays queued
    with RawClient(node.port) as gone:
        gone.send("GETJOB", "WHERE", "region", "=", "eu", "FROM", "bq")
        wait_blocked(c, 1)
    wait_blocked(c, 0)
    c.add("bq", "later", "ATTR", "region", "eu")
    assert c.call("QLEN", "bq") == 1


def wait_blocked(c: RawClient, count: int) -> None:
    from support import wait_for

    wait_for(lambda: f"blocked_clients:{count}\r" in c.call("INFO", "clients").decode(), 5,
             message=f"{count} blocked consumer(s)")
