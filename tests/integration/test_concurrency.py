"""QPOLICY ... CONCURRENCY n (a disq extension) against real servers: at most n jobs of
a queue delivered and not yet ended at a time, on one node and across three."""

from __future__ import annotations

from collections.abc import Callable

import jobutil
from jobutil import NULL_ARRAY, NULL_BULK, BlockedGetjob, RawClient, assert_error, ids_of
from support import DisqProcess, form_cluster, wait_for

shared_disq = jobutil.shared_disq
node = jobutil.node
c = jobutil.c


def test_at_most_n_run_and_an_end_makes_room(node: DisqProcess, c: RawClient) -> None:
    assert c.call("QPOLICY", "capped", "SET", "CONCURRENCY", 2) == b"OK"
    fields = c.call("QPOLICY", "capped", "GET")
    assert fields[fields.index(b"concurrency") + 1] == 2
    added = [c.add("capped", f"job{i}") for i in range(5)]
    running = ids_of(c.call("GETJOB", "NOHANG", "COUNT", 5, "FROM", "capped"))
    assert running == added[:2]
    assert c.call("GETJOB", "NOHANG", "FROM", "capped") is NULL_ARRAY
    waiting = BlockedGetjob(node.port, c, "capped")
    assert c.call("ACKJOB", running[0]) == 1  # one ended: the waiting consumer gets one
    assert ids_of(waiting.reply()) == [added[2]]
    assert c.call("NACK", running[1]) == 1  # a requeue ends a run too
    assert ids_of(c.call("GETJOB", "NOHANG", "COUNT", 5, "FROM", "capped")) == [running[1]]
    assert c.call("GETJOB", "NOHANG", "FROM", "capped") is NULL_ARRAY
    assert c.call("QPOLICY", "capped", "DEL") == 1  # no cap: the rest at once
    assert len(ids_of(c.call("GETJOB", "NOHANG", "COUNT", 5, "FROM", "capped"))) == 2


def test_bad_concurrency_is_refused(c: RawClient) -> None:
    for value in (0, -1, 1_000_001, "x"):
        assert_error(c, "ERR CONCURRENCY must be between 1 and 1000000",
                     "QPOLICY", "capped", "SET", "CONCURRENCY", value)
    assert c.call("QPOLICY", "capped", "GET") is NULL_BULK


def test_the_nodes_share_the_cap(start_node: Callable[..., DisqProcess]) -> None:
    """Consumers on every node of three, jobs on every node, nothing acked: at most n
    run in the whole cluster; as they end, others start, never more than n at once."""
    nodes = form_cluster([start_node("--cluster-node-timeout", "2000") for _ in range(3)])
    with RawClient(nodes[0].port) as admin:
        assert admin.call("QPOLICY", "shared", "SET", "CONCURRENCY", 3) == b"OK"
    clients = [RawClient(n.port) for n in nodes]
    try:
        for client in clients:
            for i in range(10):
                client.add("shared", f"j{i}", "REPLICATE", 1, "RETRY", 300)
        running: list[tuple[RawClient, bytes]] = []

        def take_all() -> int:
            for client in clients:
                for job_id in ids_of(client.call("GETJOB", "NOHANG", "COUNT", 10,
                                                 "FROM", "shared")):
                    running.append((client, job_id))
            return len(running)

        # the shares follow each node's demand (reports five times a second): keep
        # asking on every node until three run; never more
        wait_for(lambda: take_all() >= 3, 10, 0.05, "three jobs running")
        for _ in range(20):
            assert take_all() == 3
        for round_no in range(3):  # end them, and three others start
            for client, job_id in running:
                assert client.call("ACKJOB", job_id) == 1
            running.clear()
            wait_for(lambda: take_all() >= 3, 10, 0.05, f"three more, round {round_no}")
            assert take_all() == 3
    finally:
        for client in clients:
            client.close()
