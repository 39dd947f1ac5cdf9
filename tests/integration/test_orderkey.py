"""ADDJOB ... ORDERKEY k [STRICT] (a disq extension) against real servers: the jobs of
a key delivered one at a time in the order they were added, the next once the one
before is acked, a dead letter or its RETRY ran out (the same one first then); other
keys and plain jobs not held back; on one node and across three with consumers on
every node."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import jobutil
import test_http
from disq_client import Client
from jobutil import NULL_ARRAY, Error, RawClient, assert_error, fields_of, ids_of
from support import DisqProcess, form_cluster, wait_for
from test_http import Http

shared_disq = jobutil.shared_disq
node = jobutil.node
c = jobutil.c
http_node = test_http.http_node


def take(c: RawClient, queue: str, count: int = 10) -> list[bytes]:
    return ids_of(c.call("GETJOB", "NOHANG", "COUNT", count, "FROM", queue))


def test_one_job_of_a_key_at_a_time_in_order(c: RawClient) -> None:
    a = [c.add("ok", f"a{i}", "ORDERKEY", "a", "RETRY", 30) for i in range(3)]
    b = [c.add("ok", f"b{i}", "ORDERKEY", "b", "RETRY", 30) for i in range(2)]
    plain = c.add("ok", "plain")
    assert sorted(take(c, "ok")) == sorted([a[0], b[0], plain])  # one per key, the first
    assert take(c, "ok") == []
    assert c.call("QLEN", "ok") == 0  # the others are held, not queued
    assert c.call("ACKJOB", a[0]) == 1
    assert take(c, "ok") == [a[1]]  # a's next, not b's
    assert c.call("ACKJOB", b[0]) == 1
    assert c.call("ACKJOB", a[1]) == 1
    assert sorted(take(c, "ok")) == sorted([a[2], b[1]])
    show = fields_of(c.call("SHOW", a[2]))
    assert (show["orderkey"], show["orderkey-strict"]) == (b"a", 0)


def test_a_nack_and_a_retry_deliver_the_same_job_again_first(c: RawClient) -> None:
    first, second = (c.add("okr", f"j{i}", "ORDERKEY", "k", "RETRY", 1) for i in range(2))
    assert take(c, "okr") == [first]
    assert c.call("NACK", first) == 1
    assert take(c, "okr") == [first]  # the same one again, not the next
    start = time.monotonic()
    got = ids_of(c.call("GETJOB", "TIMEOUT", 5000, "FROM", "okr"))  # its RETRY runs out
    assert got == [first] and time.monotonic() - start > 0.5
    assert c.call("ACKJOB", first) == 1
    assert take(c, "okr") == [second]


def test_a_dead_letter_or_a_deletion_lets_the_next_go(c: RawClient) -> None:
    first, second, third = (c.add("okd", f"j{i}", "ORDERKEY", "k", "MAXDELIVERIES", 1,
                                  "RETRY", 30) for i in range(3))
    assert take(c, "okd") == [first]
    assert c.call("NACK", first) == 1  # its one delivery used: a dead letter
    assert take(c, "okd") == [second]
    assert c.call("DELJOB", second) == 1
    assert take(c, "okd") == [third]


def test_a_blocked_consumer_gets_the_next_when_one_is_acked(node: DisqProcess,
                                                            c: RawClient) -> None:
    first, second = (c.add("okb", f"j{i}", "ORDERKEY", "k", "RETRY", 30) for i in range(2))
    assert take(c, "okb") == [first]
    waiting = jobutil.BlockedGetjob(node.port, c, "okb")
    assert c.call("ACKJOB", first) == 1
    assert ids_of(waiting.reply()) == [second]


def test_bad_orderkey_input_changes_nothing(c: RawClient) -> None:
    assert_error(c, "ERR ORDERKEY must be 1 to 256 bytes", "ADDJOB", "okx", "b", 0,
                 "ORDERKEY", "")
    assert_error(c, "ERR ORDERKEY must be 1 to 256 bytes", "ADDJOB", "okx", "b", 0,
                 "ORDERKEY", "k" * 257)
    assert_error(c, "ERR STRICT needs an ORDERKEY", "ADDJOB", "okx", "b", 0, "STRICT")
    assert_error(c, "ERR STRICT needs an ORDERKEY", "ADDJOBS", "okx", 0, "STRICT", "JOBS",
                 "b")
    assert c.call("QLEN", "okx") == 0
    ids = c.call("ADDJOBS", "okx", 0, "ORDERKEY", "k", "RETRY", 30, "JOBS", "1", "2", "3")
    assert take(c, "okx") == [ids[0]]  # a batch's jobs keep their order too
    assert c.call("ACKJOB", ids[0]) == 1
    assert take(c, "okx") == [ids[1]]


def test_strict_alone_has_its_majority(c: RawClient) -> None:
    job = c.add("oks", "j", "ORDERKEY", "k", "STRICT")
    assert take(c, "oks") == [job]
    assert fields_of(c.call("SHOW", job))["orderkey-strict"] == 1


def test_the_http_api_and_the_python_client_take_and_show_the_key(
        http_node: tuple[DisqProcess, Http]) -> None:
    node, http = http_node
    status, added = http.post("/api/v1/queues/okh/jobs", [
        {"body": "a", "orderkey": "k", "retry_ms": 30_000}, {"body": "b", "orderkey": "k"},
        {"body": "c", "strict": True}])
    assert status == 207
    first, second, bad = added["jobs"]
    assert bad["error"]["status"] == 400 and "STRICT needs" in bad["error"]["detail"]
    shown = http.get(f"/api/v1/jobs/{first['id']}")[1]
    assert (shown["orderkey"], shown["orderkey_strict"]) == ("k", 0)
    peeked = http.get("/api/v1/queues/okh/peek?count=5")[1]["jobs"]
    assert [job["id"] for job in peeked] == [first["id"]]  # the second is held
    with Client(f"127.0.0.1:{node.port}") as client:
        job_id = client.add_job("okp", "x", orderkey="k2", strict=True)
        later = client.add_job("okp", "y", orderkey="k2")
        assert [job.id for job in client.get_jobs("okp", count=5, nohang=True)] == [job_id]
        client.ack(job_id)
        assert [job.id for job in client.get_jobs("okp", count=5, nohang=True)] == [later]


# -- three nodes ---------------------------------------------------------------------
def test_three_nodes_consumers_everywhere_one_in_flight_per_key_in_order(
        start_node: Callable[..., DisqProcess]) -> None:
    """Producers on every node, consumers on every node: each key's jobs are delivered
    in the order they were added, never two of a key in flight at once, and the keys
    run in parallel."""
    nodes = form_cluster([start_node("--cluster-node-timeout", "3000") for _ in range(3)])
    keys, per_key = 6, 8
    added: dict[str, list[bytes]] = {f"k{k}": [] for k in range(keys)}
    clients = [RawClient(n.port) for n in nodes]
    try:
        for i in range(per_key):
            for k in range(keys):
                key = f"k{k}"
                producer = clients[(i + k) % 3]  # each key's jobs through every node
                added[key].append(producer.add("o3", f"{key}:{i}", "ORDERKEY", key,
                                               "RETRY", 30))
        order: dict[str, list[bytes]] = {key: [] for key in added}
        in_flight: dict[str, bytes] = {}
        violations: list[str] = []
        lock = threading.Lock()
        done = threading.Event()
        total = keys * per_key
        max_parallel = [0]

        def consume(port: int) -> None:
            with RawClient(port) as client:
                while not done.is_set():
                    reply = client.call("GETJOB", "TIMEOUT", 200, "FROM", "o3")
                    if reply is NULL_ARRAY:
                        continue
                    _, job_id, body = reply[0]
                    key = body.decode().split(":")[0]
                    with lock:
                        if key in in_flight:
                            violations.append(f"{key}: {job_id!r} while {in_flight[key]!r}")
                        in_flight[key] = job_id
                        order[key].append(job_id)
                        max_parallel[0] = max(max_parallel[0], len(in_flight))
                    time.sleep(0.01)  # some work
                    with lock:
                        del in_flight[key]
                    assert client.call("ACKJOB", job_id) == 1
                    with lock:
                        if sum(len(v) for v in order.values()) >= total:
                            done.set()

        threads = [threading.Thread(target=consume, args=(n.port,), daemon=True)
                   for n in nodes for _ in range(2)]
        for thread in threads:
            thread.start()
        assert done.wait(60), (order, violations)
        for thread in threads:
            thread.join(5)
        assert violations == []
        assert order == added  # each key in the order added, each job once
        assert max_parallel[0] > 1  # the keys ran in parallel
    finally:
        for client in clients:
            client.close()


def test_three_nodes_retry_expiry_redelivers_the_head_first(
        start_node: Callable[..., DisqProcess]) -> None:
    nodes = form_cluster([start_node("--cluster-node-timeout", "3000") for _ in range(3)])
    with RawClient(nodes[0].port) as a, RawClient(nodes[1].port) as b:
        first = a.add("o3r", "first", "ORDERKEY", "k", "RETRY", 1)
        second = b.add("o3r", "second", "ORDERKEY", "k", "RETRY", 1)
        got = ids_of(b.call("GETJOB", "TIMEOUT", 5000, "FROM", "o3r"))
        assert got == [first]  # wherever the consumer is
        again = ids_of(a.call("GETJOB", "TIMEOUT", 5000, "FROM", "o3r"))
        assert again == [first]  # not acked: its RETRY ran out, the same one again
        assert b.call("ACKJOB", first) == 1
        assert ids_of(a.call("GETJOB", "TIMEOUT", 5000, "FROM", "o3r")) == [second]
        wait_for(lambda: not isinstance(a.call("SHOW", second), Error), 2)


def test_strict_needs_a_majority_to_add_and_to_deliver(
        start_node: Callable[..., DisqProcess]) -> None:
    """STRICT: its copies on a majority (REPLICATE 1 asked: 2 of 3), never ASYNC; on
    a node cut off from the others (they are killed) its ADDJOB and, once nothing else
    is to be had, its GETJOB are refused (-NOMAJORITY), and the strict jobs queued there
    leave the queue."""
    nodes = form_cluster([start_node("--cluster-node-timeout", "1000") for _ in range(3)])
    with RawClient(nodes[0].port) as c:
        assert_error(c, "ERR STRICT and ASYNC cannot be combined: a strict key's job is "
                     "replicated to a majority before ADDJOB answers", "ADDJOB", "o3s", "b",
                     0, "ORDERKEY", "k", "STRICT", "ASYNC", "REPLICATE", 1, "RETRY", 1)
        jobs = [c.add("o3s", f"j{i}", "ORDERKEY", f"k{i}", "STRICT", "REPLICATE", 1,
                      "RETRY", 1) for i in range(2)]
        for job in jobs:
            assert len(fields_of(c.call("SHOW", job))["nodes-delivered"]) >= 2
        plain = c.add("o3s", "plain", "REPLICATE", 1)
        for other in nodes[1:]:
            other.kill()
        wait_for(lambda: isinstance(c.call("ADDJOB", "o3s", "x", 0, "ORDERKEY", "k",
                                           "STRICT", "REPLICATE", 1), Error), 10, 0.1,
                 "the node to see it has no majority")
        assert_error(c, "NOMAJORITY This node does not reach a majority of the cluster: a "
                     "STRICT order key waits", "ADDJOB", "o3s", "x", 0, "ORDERKEY", "k2",
                     "STRICT", "REPLICATE", 1)
        assert take(c, "o3s") == [plain]  # what is not strict goes on
        reply = c.call("GETJOB", "NOHANG", "FROM", "o3s")
        assert isinstance(reply, Error) and reply.startswith(b"NOMAJORITY"), reply
        assert c.call("QLEN", "o3s") == 0  # the strict jobs left the queue
