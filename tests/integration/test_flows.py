"""Flows, ADDJOB ... AFTER parent (a disq extension), against real servers: a job waits
until each parent job is acked and each parent batch is done, and goes to its dead
letters (`parent-failed`) when a parent goes dead; three levels across three nodes."""

from __future__ import annotations

from collections.abc import Callable

import jobutil
from disq_client import Client
from jobutil import NULL_ARRAY, RawClient, assert_error, fake_id
from support import DisqProcess, form_cluster, free_port, wait_for

shared_disq = jobutil.shared_disq
node = jobutil.node
c = jobutil.c


def show(client: RawClient, job_id: bytes) -> dict[bytes, object]:
    reply = client.call("SHOW", job_id)
    return {} if reply is None or reply == NULL_ARRAY else dict(
        zip(reply[::2], reply[1::2], strict=True))


def take(clients: list[RawClient], queue: str) -> tuple[RawClient, bytes] | None:
    """One job of `queue` from any node (a node without one asks the others)."""
    for client in clients:
        got = client.call("GETJOB", "NOHANG", "FROM", queue)
        if got is not NULL_ARRAY and got:
            return client, got[0][1]
    return None


def test_a_job_waits_for_its_parent_then_runs(c: RawClient) -> None:
    parent = c.call("ADDJOB", "f-parent", "p", 0)
    child = c.call("ADDJOB", "f-child", "c", 0, "AFTER", parent)
    assert show(c, child)[b"after"] == [parent]
    assert c.call("QLEN", "f-child") == 0
    assert c.call("GETJOB", "NOHANG", "FROM", "f-child") is NULL_ARRAY
    assert c.call("GETJOB", "FROM", "f-parent")[0][1] == parent
    assert c.call("QLEN", "f-child") == 0  # running is not done
    assert c.call("ACKJOB", parent) == 1
    wait_for(lambda: c.call("QLEN", "f-child") == 1, 5)
    assert b"after" not in show(c, child)
    assert c.call("GETJOB", "FROM", "f-child")[0][1] == child


def test_a_dead_parent_sends_the_child_and_its_children_to_dead_letters(
        c: RawClient) -> None:
    parent = c.call("ADDJOB", "f-fail", "p", 0, "MAXDELIVERIES", 1)
    child = c.call("ADDJOB", "f-fail2", "c", 0, "AFTER", parent)
    grandchild = c.call("ADDJOB", "f-fail3", "g", 0, "AFTER", child)
    c.call("GETJOB", "FROM", "f-fail")
    c.call("NACK", parent)  # its only delivery: a dead letter
    wait_for(lambda: show(c, grandchild).get(b"dead-reason") == b"parent-failed", 5)
    assert show(c, child)[b"dead-reason"] == b"parent-failed"
    assert show(c, child)[b"queue"] == b"dead:f-fail2"
    assert c.call("QLEN", "f-fail2") == 0 and c.call("QLEN", "f-fail3") == 0
    assert_error(c, f"PARENTFAILED parent {parent.decode()} is a dead letter",
                 "ADDJOB", "f-fail2", "late", 0, "AFTER", parent)


def test_a_batch_parent_releases_its_children_once_done(c: RawClient) -> None:
    assert c.call("BATCH", "NEW", "f-batch") == b"OK"
    members = [c.call("ADDJOB", "f-members", f"m{i}", 0, "BATCH", "f-batch") for i in range(3)]
    child = c.call("ADDJOB", "f-after-batch", "c", 0, "AFTER", "f-batch")
    assert c.call("BATCH", "CLOSE", "f-batch") == 3
    for _, job_id, _ in c.call("GETJOB", "COUNT", 3, "FROM", "f-members"):
        assert c.call("QLEN", "f-after-batch") == 0
        c.call("ACKJOB", job_id)
    wait_for(lambda: c.call("QLEN", "f-after-batch") == 1, 5)
    assert c.call("GETJOB", "FROM", "f-after-batch")[0][1] == child
    assert len(set(members)) == 3


def test_bad_parents_are_refused_and_add_nothing(c: RawClient) -> None:
    unknown = fake_id().decode()
    assert_error(c, f"NOJOB parent {unknown} is not known (ended and forgotten, or never "
                    "added)", "ADDJOB", "f-bad", "x", 0, "AFTER", unknown)
    assert_error(c, "NOBATCH no batch 'nope' (AFTER names a job ID or a batch ID)",
                 "ADDJOB", "f-bad", "x", 0, "AFTER", "nope")
    parent = c.call("ADDJOB", "f-bad-parent", "p", 0)
    assert_error(c, "ERR AFTER and DELAY, DELAY-MS or AT cannot be combined: the job is "
                    "due once its parents are done",
                 "ADDJOB", "f-bad", "x", 0, "AFTER", parent, "DELAY-MS", 10)
    assert c.call("BATCH", "NEW", "f-bad-batch") == b"OK"
    assert_error(c, "ERR a batch's member cannot wait for parents (AFTER): a batch could "
                    "then wait for what waits for it",
                 "ADDJOB", "f-bad", "x", 0, "AFTER", parent, "BATCH", "f-bad-batch")
    assert_error(c, "ERR a job waits for at most 32 parents (AFTER)", "ADDJOB", "f-bad",
                 "x", 0, *[arg for _ in range(33) for arg in ("AFTER", parent)])
    assert c.call("QLEN", "f-bad") == 0
    assert c.call("JSCAN", "QUEUE", "f-bad", "COUNT", 100)[1] == []


def test_the_python_client_adds_a_child(node: DisqProcess) -> None:
    with Client([f"127.0.0.1:{node.port}"]) as client:
        parent = client.add_job("f-py", "p")
        child = client.add_job("f-py-child", "c", after=[parent])
        job = client.get_jobs("f-py")[0]
        client.ack(job.id)
        wait_for(lambda: client.qlen("f-py-child") == 1, 5)
        assert client.get_jobs("f-py-child")[0].id == child


def test_a_flow_of_three_levels_across_three_nodes(
        start_node: Callable[..., DisqProcess]) -> None:
    """A -> (B1, B2 on other nodes) -> C after both: each level runs only once the one
    before is acked, wherever its jobs are held and consumed."""
    nodes = form_cluster([start_node("--cluster-node-timeout", "2000") for _ in range(3)])
    clients = [RawClient(n.port) for n in nodes]
    try:
        a = clients[0].call("ADDJOB", "l1", "a", 0)
        b1 = clients[1].call("ADDJOB", "l2", "b1", 0, "AFTER", a)
        b2 = clients[2].call("ADDJOB", "l2", "b2", 0, "AFTER", a)
        c3 = clients[0].call("ADDJOB", "l3", "c", 0, "AFTER", b1, "AFTER", b2)
        assert all(isinstance(i, bytes) for i in (b1, b2, c3))
        assert take(clients, "l2") is None and take(clients, "l3") is None
        taken = take(clients, "l1")
        assert taken is not None and taken[1] == a
        taken[0].call("ACKJOB", a)
        done: set[bytes] = set()

        def second_level() -> bool:
            got = take(clients, "l2")
            if got is not None:
                assert take(clients, "l3") is None or len(done) == 2
                got[0].call("ACKJOB", got[1])
                done.add(got[1])
            return done == {b1, b2}

        wait_for(second_level, 15, message="both jobs of the second level")
        got3: list[tuple[RawClient, bytes]] = []
        wait_for(lambda: bool(got3.append(t) or True if (t := take(clients, "l3")) else False),
                 15, message="the third level")
        assert got3[0][1] == c3
    finally:
        for client in clients:
            client.close()


def test_a_child_over_http(start_node: Callable[..., DisqProcess]) -> None:
    from test_http import Http

    port = free_port()
    server = start_node("--http-port", str(port))
    http = Http(port)
    status, parent = http.post("/api/v1/queues/h-parent/jobs", {"body": "p"})
    assert status == 201, parent
    status, child = http.post("/api/v1/queues/h-child/jobs",
                              {"body": "c", "after": [parent["id"]]})
    assert status == 201, child
    status, shown = http.get(f"/api/v1/jobs/{child['id']}")
    assert status == 200 and shown["after"] == [parent["id"]], shown
    status, problem = http.post("/api/v1/queues/h-child/jobs", {"body": "c", "after": "x"})
    assert status == 400 and "'after' must be a list of strings" in problem["detail"], problem
    status, problem = http.post("/api/v1/queues/h-child/jobs",
                                {"body": "c", "after": [fake_id().decode()]})
    assert status >= 400 and "is not known" in problem["detail"], problem
    with RawClient(server.port) as raw:
        assert raw.call("GETJOB", "FROM", "h-parent")[0][1] == parent["id"].encode()
        raw.call("ACKJOB", parent["id"])
        wait_for(lambda: raw.call("QLEN", "h-child") == 1, 5)
