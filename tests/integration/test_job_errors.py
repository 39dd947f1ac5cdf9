"""What consumers report of their jobs (disq extensions), against real servers: NACK
... ERROR kept with the job (the last 5, SHOW, JSCAN, HTTP, the AOF, the job's other
holders, a dead letter's WAITJOB answer) and WORKING ... PROGRESS / DATA (SHOW, WAITJOB
here and on a node that does not hold the job, HTTP)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jobutil
import pytest
from jobutil import NULL_BULK, RawClient, assert_error
from support import DisqProcess, form_cluster, free_port, wait_for
from test_jobset import holders

shared_disq = jobutil.shared_disq
node = jobutil.node
c = jobutil.c


def shown(c: RawClient, job_id: bytes) -> dict[bytes, Any]:
    reply = c.call("SHOW", job_id)
    assert reply is not NULL_BULK
    return dict(zip(reply[::2], reply[1::2], strict=True))


def taken(c: RawClient, queue: str = "q") -> bytes:
    entry = c.call("GETJOB", "NOHANG", "FROM", queue)
    assert entry is not NULL_BULK, f"no job in {queue}"
    return entry[0][1]


def failed(c: RawClient, job_id: bytes, *reasons: str, queue: str = "q") -> None:
    """Deliver the job and NACK it with each reason in turn."""
    for reason in reasons:
        assert taken(c, queue) == job_id
        assert c.call("NACK", "ERROR", reason, job_id) == 1


# -- errors ----------------------------------------------------------------------------------

def test_errors_are_kept_with_the_job_the_last_five(c: RawClient) -> None:
    job_id = c.add("q", "work", "RETRY", 60)
    plain = c.add("q", "plain", "RETRY", 60)
    assert b"errors" not in shown(c, job_id)
    failed(c, job_id, "first")
    [[delivery, when, reason]] = shown(c, job_id)[b"errors"]
    assert (delivery, reason) == (1, b"first") and when > 1_600_000_000_000
    failed(c, job_id, *(f"e{i}" for i in range(2, 8)))
    fields = shown(c, job_id)
    assert [(d, r) for d, _, r in fields[b"errors"]] == [
        (3, b"e3"), (4, b"e4"), (5, b"e5"), (6, b"e6"), (7, b"e7")]
    assert fields[b"nacks"] == 7
    # shown after the extended fields; a plain job shows none of them
    names = list(fields)
    assert names.index(b"errors") > names.index(b"due-ms")
    assert b"priority" not in shown(c, plain)
    # JSCAN REPLY ALL gives SHOW's fields
    [entry] = [e for e in c.call("JSCAN", 0, "REPLY", "ALL")[1]
               if dict(zip(e[::2], e[1::2], strict=True))[b"id"] == job_id]
    assert dict(zip(entry[::2], entry[1::2], strict=True))[b"errors"] == fields[b"errors"]


def test_a_nack_without_error_keeps_the_errors_and_counts(c: RawClient) -> None:
    job_id = c.add("q", "work", "RETRY", 60)
    failed(c, job_id, "boom")
    assert taken(c) == job_id
    assert c.call("NACK", job_id) == 1
    assert taken(c) == job_id
    assert c.call("NACK", "DELAY-MS", 1, "ERROR", "later", job_id) == 1
    wait_for(lambda: c.call("QLEN", "q") == 1, 5)
    assert [(d, r) for d, _, r in shown(c, job_id)[b"errors"]] == [(1, b"boom"),
                                                                   (3, b"later")]


@pytest.mark.parametrize(("args", "error"), [
    (("ERROR", b"x" * 1025, "{id}"), "ERR ERROR must be a reason of 1 to 1024 bytes"),
    (("ERROR", "", "{id}"), "ERR ERROR must be a reason of 1 to 1024 bytes"),
    (("ERROR",), "ERR syntax error"),
])
def test_a_bad_error_is_refused_and_changes_nothing(c: RawClient, args: tuple,
                                                    error: str) -> None:
    job_id = c.add("q", "work", "RETRY", 60)
    assert taken(c) == job_id
    assert_error(c, error, "NACK", *[job_id if a == "{id}" else a for a in args])
    fields = shown(c, job_id)
    assert (fields[b"state"], fields[b"nacks"]) == (b"active", 0)
    assert b"errors" not in fields and b"priority" not in fields
    assert c.call("NACK", "ERROR", b"x" * 1024, job_id) == 1  # the bound itself is fine


def test_a_dead_letter_answers_its_last_error(c: RawClient) -> None:
    job_id = c.add("q", "fails", "MAXDELIVERIES", 2, "RETRY", 60)
    failed(c, job_id, "first", "ValueError: the last")
    assert c.call("WAITJOB", job_id) == [[job_id, b"dead", b"ValueError: the last"]]
    fields = shown(c, job_id)
    assert (fields[b"queue"], fields[b"dead-reason"]) == (b"dead:q", b"max-deliveries")
    assert [r for _, _, r in fields[b"errors"]] == [b"first", b"ValueError: the last"]
    # put back (counters reset), it fails again: that error is its last
    assert c.call("DEADLETTER", "REQUEUE", "dead:q") == 1
    failed(c, job_id, "after")
    assert [(d, r) for d, _, r in shown(c, job_id)[b"errors"]] == [
        (1, b"first"), (2, b"ValueError: the last"), (1, b"after")]
    assert taken(c) == job_id
    assert c.call("NACK", job_id) == 1
    assert c.call("WAITJOB", job_id) == [[job_id, b"dead", b"after"]]
    # without an error: why it is one
    other = c.add("q", "fails", "MAXDELIVERIES", 1)
    assert taken(c) == other
    assert c.call("NACK", other) == 1
    assert c.call("WAITJOB", other) == [[other, b"dead", b"max-deliveries"]]


def test_errors_survive_a_restart_from_the_aof(
        start_node: Callable[..., DisqProcess]) -> None:
    node = start_node("--appendonly", "yes")
    with RawClient(node.port) as c:
        job_id = c.add("q", "work", "RETRY", 60)
        plain = c.add("q", "plain", "RETRY", 60)
        failed(c, job_id, "one", "two")
        errors = shown(c, job_id)[b"errors"]
    node.kill()  # (what was written: appendfsync everysec had its second)
    node.start()
    with RawClient(node.port) as c:
        fields = shown(c, job_id)
        assert fields[b"errors"] == errors
        assert b"priority" in fields  # (errors come with the extended fields)
        assert b"priority" not in shown(c, plain)
        # a rewritten AOF keeps them too (a loaded job waits for its RETRY: queued now)
        assert c.call("ENQUEUE", job_id) == 1
        failed(c, job_id, "three")
        errors = shown(c, job_id)[b"errors"]
        assert c.call("BGREWRITEAOF") == b"Background append only file rewriting started"
        wait_for(lambda: c.info_field("aof_rewrite_in_progress") == "0", 10)
    node.stop()
    node.start()
    with RawClient(node.port) as c:
        assert shown(c, job_id)[b"errors"] == errors


def test_errors_reach_the_job_s_other_holder(
        start_node: Callable[..., DisqProcess]) -> None:
    nodes = form_cluster([start_node("--cluster-node-timeout", "1000") for _ in range(2)])
    with RawClient(nodes[0].port) as c:
        job_id = c.add("q", "work", "REPLICATE", 2, "RETRY", 60)
        failed(c, job_id, "boom")
        errors = shown(c, job_id)[b"errors"]
    with RawClient(nodes[1].port) as other:
        wait_for(lambda: shown(other, job_id).get(b"errors") == errors, 10,
                 message="the error to reach the other holder")
        assert shown(other, job_id)[b"nacks"] == 1


def test_a_dead_letter_s_errors_reach_the_other_holder(
        start_node: Callable[..., DisqProcess]) -> None:
    nodes = form_cluster([start_node("--cluster-node-timeout", "1000") for _ in range(2)])
    with RawClient(nodes[0].port) as c:
        job_id = c.add("q", "work", "REPLICATE", 2, "RETRY", 60, "MAXDELIVERIES", 1)
        failed(c, job_id, "fatal")
        assert c.call("WAITJOB", job_id) == [[job_id, b"dead", b"fatal"]]
    with RawClient(nodes[1].port) as other:
        wait_for(lambda: shown(other, job_id)[b"queue"] == b"dead:q", 10)
        assert [r for _, _, r in shown(other, job_id)[b"errors"]] == [b"fatal"]
        assert other.call("WAITJOB", job_id) == [[job_id, b"dead", b"fatal"]]


# -- progress --------------------------------------------------------------------------------

def test_progress_is_kept_and_shown(c: RawClient) -> None:
    job_id = c.add("q", "work", "RETRY", 60)
    assert taken(c) == job_id
    assert c.call("WORKING", job_id) == 60  # plain: as before
    assert b"progress" not in shown(c, job_id)
    assert c.call("WORKING", job_id, "PROGRESS", 40, "DATA", b"step 2\xff") == 60
    fields = shown(c, job_id)
    assert (fields[b"progress"], fields[b"progress-data"]) == (40, b"step 2\xff")
    assert c.call("WAITJOB", "TIMEOUT", 10, job_id) == [[job_id, b"active", b"step 2\xff"]]
    assert c.call("WORKING", job_id, "PROGRESS", 41) == 60  # the data stays
    assert (shown(c, job_id)[b"progress"], shown(c, job_id)[b"progress-data"]) == (
        41, b"step 2\xff")


@pytest.mark.parametrize(("args", "error"), [
    (("PROGRESS", 101), "ERR PROGRESS must be between 0 and 100"),
    (("PROGRESS", -1), "ERR PROGRESS must be between 0 and 100"),
    (("PROGRESS", "x"), "ERR PROGRESS must be between 0 and 100"),
    (("DATA", b"x" * 4097), "ERR DATA must be at most 4096 bytes"),
    (("PROGRESS",), "ERR wrong number of arguments for 'working' command"),  # Disque's
    (("OTHER", 1), "ERR syntax error"),
])
def test_bad_progress_is_refused_and_changes_nothing(c: RawClient, args: tuple,
                                                     error: str) -> None:
    job_id = c.add("q", "work", "RETRY", 60)
    assert_error(c, error, "WORKING", job_id, *args)
    fields = shown(c, job_id)
    assert fields[b"state"] == b"queued" and b"progress" not in fields


def test_progress_seen_from_a_node_that_does_not_hold_the_job(
        start_node: Callable[..., DisqProcess]) -> None:
    from test_http import Http

    ports = [free_port() for _ in range(3)]
    nodes = form_cluster([start_node("--cluster-node-timeout", "1000", "--http-port", str(p))
                          for p in ports])
    with RawClient(nodes[0].port) as c:
        job_id = c.add("q", "work", "REPLICATE", 2, "RETRY", 60)
    owners = holders(nodes, job_id)
    [elsewhere] = [n for n in nodes if n not in owners]
    http = Http(ports[nodes.index(elsewhere)])
    path = f"/api/v1/jobs/{job_id.decode()}/result"
    with RawClient(owners[0].port) as c:
        c.call("DEQUEUE", job_id)
        assert c.call("WORKING", job_id, "PROGRESS", 70, "DATA", "70%") == 60
    with RawClient(owners[1].port) as c:  # the other holder was told
        wait_for(lambda: shown(c, job_id).get(b"progress") == 70, 10)
        assert shown(c, job_id)[b"progress-data"] == b"70%"
    with RawClient(elsewhere.port) as c:
        assert c.call("WAITJOB", "TIMEOUT", 500, job_id) == [[job_id, b"active", b"70%"]]
    assert http.get(path) == (200, {"id": job_id.decode(), "state": "active",
                                    "progress": 70, "progress_data": "70%"})
    # over HTTP: WORKING's progress, then the job's end with its result
    assert Http(ports[nodes.index(owners[0])]).post(
        f"/api/v1/jobs/{job_id.decode()}/working", {"progress": 90, "data": "almost"}) == (
        200, {"retry_ms": 60_000})
    # (the holders answer what they have: the other one, once told, says 90 too)
    wait_for(lambda: http.get(path)[1]["progress"] == 90, 10)
    with RawClient(owners[0].port) as c:
        assert c.call("ACKJOB", job_id, "RESULT", "done") == 1
    wait_for(lambda: http.get(path)[1].get("result") == "done", 10)


def test_errors_and_progress_over_http(start_node: Callable[..., DisqProcess]) -> None:
    from test_http import Http

    port = free_port()
    node = start_node("--http-port", str(port))
    http = Http(port)
    with RawClient(node.port) as c:
        job_id = c.add("q", "work", "RETRY", 60)
        assert taken(c) == job_id
    path = f"/api/v1/jobs/{job_id.decode()}"
    assert http.post(path + "/working", {"progress": 10, "data": "a"}) == (
        200, {"retry_ms": 60_000})
    assert http.post(path + "/working") == (200, {"retry_ms": 60_000})  # plain
    status, problem = http.post(path + "/working", {"progress": 101})
    assert status == 400 and "PROGRESS must be between 0 and 100" in problem["detail"]
    status, problem = http.post(path + "/nack", {"error": "x" * 1025})
    assert status == 400 and "ERROR must be a reason" in problem["detail"]
    status, problem = http.post(path + "/nack", {"error": 5})
    assert status == 400 and "'error' must be" in problem["detail"]
    status, job = http.get(path)
    assert (job["state"], job["nacks"], job["progress"], job["progress_data"]) == (
        "active", 0, 10, "a")
    assert "errors" not in job
    assert http.post(path + "/nack", {"error": "it broke", "delay_ms": 0}) == (
        200, {"requeued": 1})
    status, job = http.get(path)
    [[delivery, when, reason]] = job["errors"]
    assert (job["nacks"], delivery, reason) == (1, 1, "it broke")
    status, page = http.get("/api/v1/jobs")
    assert [j["errors"] for j in page["jobs"]] == [job["errors"]]
