"""QDEL and QPURGE (disq extensions) against real servers: every job of the queue added
before, in every state, deleted on every node; QDEL also takes the policy and the
topics' subscriptions; jobs added after stay; over HTTP and the Python client."""

from __future__ import annotations

from collections.abc import Callable

import jobutil
from disq_client import Client
from jobutil import RawClient, assert_error
from support import DisqProcess, cluster_nodes, form_cluster, myid, wait_for

shared_disq = jobutil.shared_disq
node = jobutil.node
c = jobutil.c


def _jobs_of(client: RawClient, queue: str) -> list[bytes]:
    """Every job of `queue` this node holds, in any state (JSCAN)."""
    out: list[bytes] = []
    cursor = b"0"
    while True:
        cursor, page = client.call("JSCAN", cursor, "QUEUE", queue, "COUNT", 1000)
        out += page
        if cursor == b"0":
            return out


def _policy(client: RawClient, queue: str) -> dict[bytes, object]:
    fields = client.call("QPOLICY", queue, "GET")
    return dict(zip(fields[0::2], fields[1::2], strict=True))


def test_qpurge_deletes_every_job_of_the_queue_and_keeps_its_policy(c: RawClient) -> None:
    queued = c.call("ADDJOB", "pq", "queued", 0)
    active = c.call("ADDJOB", "pq", "taken", 0)
    scheduled = c.call("ADDJOB", "pq", "later", 0, "DELAY", 60)
    c.call("GETJOB", "FROM", "pq")  # the first one, active now
    other = c.call("ADDJOB", "pq-other", "x", 0)
    assert c.call("QPOLICY", "pq", "SET", "MAXDELIVERIES", 3) == b"OK"
    assert sorted(_jobs_of(c, "pq")) == sorted([queued, active, scheduled])
    assert c.call("QPURGE", "pq") == 3
    assert _jobs_of(c, "pq") == [] and c.call("QLEN", "pq") == 0
    assert _policy(c, "pq")[b"maxdeliveries"] == 3
    assert c.call("SHOW", other) is not jobutil.NULL_BULK  # another queue: untouched
    after = c.call("ADDJOB", "pq", "after", 0)
    assert _jobs_of(c, "pq") == [after]  # a job added after the purge stays
    assert c.call("QPURGE", "pq") == 1
    assert c.call("QPURGE", "pq") == 0


def test_qdel_deletes_the_queue_its_policy_and_its_subscriptions(c: RawClient) -> None:
    c.call("ADDJOB", "dq", "a", 0)
    c.call("ADDJOB", "dq", "b", 0)
    assert c.call("QPOLICY", "dq", "SET", "RATE", 5) == b"OK"
    assert c.call("TOPIC", "SUBSCRIBE", "dq-topic", "dq") == 1
    assert c.call("TOPIC", "SUBSCRIBE", "dq-topic", "dq-keep") == 1
    assert c.call("PAUSE", "dq", "in") == b"in"
    assert c.call("QDEL", "dq") == 2
    assert c.call("QPOLICY", "dq", "GET") is jobutil.NULL_BULK
    assert c.call("TOPIC", "LIST", "dq-topic") == [[b"dq-topic", [b"dq-keep"], [b""]]]
    assert c.call("QSTAT", "dq") is jobutil.NULL_ARRAY  # the queue is gone (its pause too)
    assert c.call("ADDJOB", "dq", "new", 0)  # takes jobs again: not paused
    assert c.call("QLEN", "dq") == 1
    assert c.call("QDEL", "never-seen") == 0  # nothing to delete here: no error


def test_a_consumer_blocked_on_the_queue_stays_blocked(node: DisqProcess, c: RawClient
                                                        ) -> None:
    with RawClient(node.port) as waiting:
        waiting.send("GETJOB", "TIMEOUT", 5000, "FROM", "bq")
        wait_for(lambda: c.call("QSTAT", "bq") is not jobutil.NULL_ARRAY, 5)
        assert c.call("QDEL", "bq") == 0
        job_id = c.call("ADDJOB", "bq", "for you", 0)
        assert waiting.read()[0][1] == job_id


def test_bad_qdel_requests_get_clear_errors(c: RawClient) -> None:
    assert_error(c, "ERR wrong number of arguments for 'qdel' command", "QDEL")
    assert_error(c, "ERR wrong number of arguments for 'qpurge' command", "QPURGE", "a", "b")
    assert_error(c, "ERR a queue's name cannot be empty", "QDEL", "")
    assert_error(c, "ERR a queue's name is at most 1024 bytes", "QPURGE", "q" * 1025)


def test_the_python_client_purges_and_deletes(node: DisqProcess) -> None:
    with Client([f"127.0.0.1:{node.port}"]) as client:
        client.add_job("py-pq", b"x")
        client.add_job("py-pq", b"y")
        assert client.qpurge("py-pq") == 2
        client.add_job("py-pq", b"z")
        assert client.qdel("py-pq") == 1
        assert client.qlen("py-pq") == 0


def test_every_node_deletes_its_copies_and_a_restarted_node_catches_up(
        start_node: Callable[..., DisqProcess]) -> None:
    nodes = form_cluster([start_node("--cluster-node-timeout", "1000", "--appendonly", "yes")
                          for _ in range(3)])
    ids = []
    for i, n in enumerate(nodes):
        with RawClient(n.port) as each:
            ids += [each.call("ADDJOB", "cq", f"job {i}.{k}", 0, "REPLICATE", 3)
                    for k in range(5)]
    with RawClient(nodes[2].port) as third:
        wait_for(lambda: len(_jobs_of(third, "cq")) == 15, 10)
    third_id = myid(nodes[2])
    nodes[2].stop()  # its AOF keeps its 15 copies
    wait_for(lambda: "fail?" in cluster_nodes(nodes[0])[third_id].flags
             or "fail" in cluster_nodes(nodes[0])[third_id].flags, 10,
             message="node 0 to see node 2 down (else the purge waits for it)")
    with RawClient(nodes[0].port) as first:
        assert first.call("QPURGE", "cq") == 15
    for n in nodes[:2]:
        with RawClient(n.port) as each:
            assert _jobs_of(each, "cq") == []
    with RawClient(nodes[1].port) as second:
        kept = second.call("ADDJOB", "cq", "after", 0, "REPLICATE", 2)
    nodes[2].start()  # its AOF brings the copies back: the purge reaches it by the sync
    with RawClient(nodes[2].port) as third:
        wait_for(lambda: set(_jobs_of(third, "cq")) <= {kept}, 20,
                 message="the restarted node to delete its copies of the purged jobs")
    with RawClient(nodes[1].port) as second:
        assert _jobs_of(second, "cq") == [kept]


def test_queues_over_http_are_deleted_and_purged(start_node: Callable[..., DisqProcess]
                                                 ) -> None:
    from support import free_port
    from test_http import Http

    port = free_port()
    n = start_node("--http-port", str(port))
    http = Http(port)
    with RawClient(n.port) as c:
        c.call("ADDJOB", "hq", "a", 0)
        c.call("ADDJOB", "hq", "b", 0)
        assert c.call("QPOLICY", "hq", "SET", "MAXDELIVERIES", 2) == b"OK"
        assert http.request("POST", "/api/v1/queues/hq/purge") == (200, {"deleted": 2})
        assert _policy(c, "hq")[b"maxdeliveries"] == 2
        c.call("ADDJOB", "hq", "c", 0)
        assert http.request("DELETE", "/api/v1/queues/hq") == (200, {"deleted": 1})
        assert c.call("QPOLICY", "hq", "GET") is jobutil.NULL_BULK
        assert http.get("/api/v1/queues/hq")[0] == 404
