"""When jobs fail across real nodes: policies on every node, a job held by
three nodes becoming one dead letter, DEADLETTER REQUEUE from a node without the dead
letters, a back-off honoured by the holder that takes over, RATE shared by nodes.
(A partition and a kill -9 while a job becomes a dead letter: tests/faults.)"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from support import DisqProcess, assert_stays, wait_for


def call(node: DisqProcess, *args: Any) -> Any:
    client = node.client()
    try:
        return client.execute_command(*args)
    finally:
        client.close()


def policy(node: DisqProcess, queue: str) -> dict[bytes, Any] | None:
    reply = call(node, "QPOLICY", queue, "GET")
    return None if reply is None else dict(zip(reply[::2], reply[1::2], strict=True))


def show(node: DisqProcess, job: bytes) -> dict[bytes, Any]:
    reply = call(node, "SHOW", job)
    return dict(zip(reply[::2], reply[1::2], strict=True))


def test_policies_reach_every_node(make_cluster: Callable[..., list[DisqProcess]]) -> None:
    a, b, c = make_cluster(3)
    call(a, "QPOLICY", "q", "SET", "MAXDELIVERIES", 4, "RATE", 50)
    for node in (b, c):
        wait_for(lambda n=node: (policy(n, "q") or {}).get(b"maxdeliveries") == 4, 5,
                 message="the policy on every node")
    call(b, "QPOLICY", "q", "DEL")
    for node in (a, c):
        wait_for(lambda n=node: policy(n, "q") is None, 5, message="deleted everywhere")


def test_a_job_on_three_nodes_becomes_one_dead_letter(
        make_cluster: Callable[..., list[DisqProcess]]) -> None:
    a, b, c = make_cluster(3)
    job = call(a, "ADDJOB", "q", "body", 5000, "REPLICATE", 3, "RETRY", 30,
               "MAXDELIVERIES", 2)
    for _ in range(2):
        reply = call(a, "GETJOB", "TIMEOUT", 5000, "FROM", "q")
        assert reply[0][1] == job
        call(a, "NACK", job)
    nodes = (a, b, c)
    for node in nodes:  # every holder's copy moved (JOBMOVE)
        wait_for(lambda n=node: show(n, job)[b"queue"] == b"dead:q", 5,
                 message="every copy in the dead-letter queue")
        fields = show(node, job)
        assert (fields[b"dead-from"], fields[b"dead-reason"]) == (b"q", b"max-deliveries")
    assert sum(call(n, "QLEN", "dead:q") for n in nodes) == 1  # queued once, on A
    assert sum(call(n, "QLEN", "q") for n in nodes) == 0
    # put back from a node that holds no dead letter queued: A's goes back
    assert call(c, "DEADLETTER", "REQUEUE", "dead:q") == 1
    wait_for(lambda: all(show(n, job)[b"queue"] == b"q" for n in nodes), 5,
             message="every copy back in q")
    assert sum(call(n, "QLEN", "q") for n in nodes) == 1
    assert all(show(n, job)[b"nacks"] == 0 for n in nodes)


def test_a_holder_taking_over_honours_the_backoff(
        make_cluster: Callable[..., list[DisqProcess]]) -> None:
    a, b = make_cluster(2)
    call(a, "QPOLICY", "q", "SET", "BACKOFF", 4000, 4000)
    wait_for(lambda: policy(b, "q") is not None, 5, message="the policy on B")
    job = call(a, "ADDJOB", "q", "body", 5000, "REPLICATE", 2, "RETRY", 1)
    assert call(a, "GETJOB", "TIMEOUT", 5000, "FROM", "q")[0][1] == job
    nacked = time.monotonic()
    call(a, "NACK", job)  # waits 3.2 to 4.8 s on A; B is told when it ends
    a.kill()
    # Without the back-off B would queue its copy a RETRY (1 s) after the QUEUED.
    assert_stays(lambda: call(b, "QLEN", "q") == 0, 2.5, "B waits for the back-off")
    wait_for(lambda: call(b, "QLEN", "q") == 1, 10, message="B queues it after the back-off")
    assert time.monotonic() - nacked >= 3.2


def test_rate_is_shared_by_the_nodes(make_cluster: Callable[..., list[DisqProcess]]) -> None:
    nodes = make_cluster(3)
    call(nodes[0], "QPOLICY", "rq", "SET", "RATE", 20)
    for node in nodes:
        wait_for(lambda n=node: policy(n, "rq") is not None, 5, message="the policy")
        for i in range(60):
            call(node, "ADDJOB", "rq", f"j{i}", 0, "REPLICATE", 1)
    delivered = [0, 0, 0]
    stop = time.monotonic() + 4.0

    def consume(i: int) -> None:
        client = nodes[i].client()
        try:
            while time.monotonic() < stop:
                reply = client.execute_command("GETJOB", "TIMEOUT", 200, "FROM", "rq")
                if reply:
                    delivered[i] += 1
                    client.execute_command("ACKJOB", reply[0][1])
        finally:
            client.close()

    threads = [threading.Thread(target=consume, args=(i,)) for i in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    total = sum(delivered)
    # 20 a second for 4 s, plus what the buckets held at the start and the shares'
    # first moments (a node's share starts at the whole rate): never 3x the rate
    assert total <= 20 * 4 * 1.25 + 3 * 5, delivered
    assert all(count > 0 for count in delivered), delivered  # every node gets a share
