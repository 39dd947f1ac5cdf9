"""REPLAY on three nodes: every retained job once, whichever of its holders keep it,
in creation order; a retry on another node adds nothing; a holder killed (kill -9)
before the REPLAY: every job another holder keeps is still replayed once; the
segments read again after every node restarts."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from jobutil import NULL_ARRAY, RawClient, Status
from support import DisqProcess, call, wait_for

OK = Status(b"OK")
N = 60


def retained(node: DisqProcess) -> int:
    text = call(node, "INFO", "retention")
    assert isinstance(text, bytes)
    for line in text.decode().splitlines():
        if line.startswith("retained_jobs:"):
            return int(line.split(":")[1])
    return 0


def fields(reply: object) -> dict[str, int]:
    assert isinstance(reply, list), reply
    return {k.decode(): v for k, v in zip(reply[::2], reply[1::2], strict=True)}


def fill(nodes: list[DisqProcess], queue: str, n: int = N) -> tuple[list[bytes], int, int]:
    """N jobs added round-robin on the nodes with REPLICATE 2, taken and acked; their
    bodies in creation order and the window."""
    for node in nodes:
        wait_for(lambda n=node: call(n, "QPOLICY", queue, "GET") is not None,
                 message="the policy everywhere")
    t0 = int(time.time() * 1000)
    bodies = []
    for i in range(n):
        node = nodes[i % len(nodes)]
        body = f"b{i:03d}".encode()
        job_id = call(node, "ADDJOB", queue, body, 0, "REPLICATE", 2, "RETRY", 30)
        assert isinstance(job_id, bytes) and job_id.startswith(b"D-"), job_id
        bodies.append(body)
        time.sleep(0.002)  # (creation times a few ms apart: the order is clear)
    taken = [0]

    def take() -> bool:  # (jobs may move to the node a GETJOB asked)
        taken[0] += len(drain_all(nodes, queue))
        return taken[0] == n

    wait_for(take, timeout=30, message="every job taken and acked")
    wait_for(lambda: retained_bodies(nodes, queue, t0) == sorted(bodies), timeout=20,
             message="every job retained")
    assert sum(retained(node) for node in nodes) >= 2 * n  # (each by its holders)
    return bodies, t0, int(time.time() * 1000)


def retained_bodies(nodes: list[DisqProcess], queue: str, t0: int) -> list[bytes]:
    """The distinct bodies the nodes retain (RETAINED on each)."""
    found = set()
    for node in nodes:
        page = call(node, "RETAINED", queue, "FROM", t0, "COUNT", 10_000)
        assert isinstance(page, list), page
        found |= {j[2] for j in page[1]}
    return sorted(found)


def drain_all(nodes: list[DisqProcess], queue: str) -> list[bytes]:
    out = []
    for node in nodes:
        with RawClient(node.port) as c:
            while True:
                got = c.call("GETJOB", "NOHANG", "COUNT", 100, "FROM", queue)
                if got is NULL_ARRAY or not got:
                    break
                out += [j[2] for j in got]
                c.call("ACKJOB", *[j[1] for j in got])
    return out


def replay_until_complete(node: DisqProcess, queue: str, t0: int, t1: int,
                          count: int) -> int:
    """The same REPLAY (into queue + "2") run until one fails no ADDJOB and finds every
    job added (a peer not yet known down may fail some): the jobs added in all."""
    added = 0

    def complete() -> bool:
        nonlocal added
        result = fields(call(node, "REPLAY", queue, "FROM", t0, "TO", t1, "INTO",
                             queue + "2"))
        added += result["added"]
        return result["failed"] == 0 and result["added"] + result["skipped"] == count

    wait_for(complete, timeout=60, interval=0.5, message="a replay without failures")
    return added


def test_replay_reads_every_node_once_in_order(
        make_cluster: Callable[..., list[DisqProcess]]) -> None:
    nodes = make_cluster(3)
    assert call(nodes[0], "QPOLICY", "cq", "SET", "RETAIN", 3600) == OK
    bodies, t0, t1 = fill(nodes, "cq")
    result = fields(call(nodes[1], "REPLAY", "cq", "FROM", t0, "TO", t1, "INTO", "cq2"))
    assert result["added"] == N and result["nodes"] == 3 and result["unreached"] == 0, result
    with RawClient(nodes[1].port) as c:  # the replaying node queued them, in order
        got = c.call("GETJOB", "NOHANG", "COUNT", 1000, "FROM", "cq2")
        assert [j[2] for j in got] == bodies
        c.call("ACKJOB", *[j[1] for j in got])
    # retried on another node: nothing twice
    result = fields(call(nodes[2], "REPLAY", "cq", "FROM", t0, "TO", t1, "INTO", "cq2"))
    assert result["added"] == 0 and result["skipped"] == N, result
    assert drain_all(nodes, "cq2") == []
    # RETAINED with SHARD: each job in exactly one shard (on each of its holders)
    seen: list[bytes] = []
    for shard in range(3):
        bodies_of_shard = set()
        for node in nodes:
            page = call(node, "RETAINED", "cq", "FROM", t0, "TO", t1, "COUNT", 1000,
                        "SHARD", f"{shard}/3")
            assert isinstance(page, list) and page[0] == b""
            bodies_of_shard |= {j[2] for j in page[1]}
        seen += bodies_of_shard
    assert sorted(seen) == bodies
    # every node restarted (kill -9): the segments are read again
    for node in nodes:
        node.kill()
        node.start()
    wait_for(lambda: retained_bodies(nodes, "cq", t0) == bodies, timeout=20,
             message="the segments indexed again")
    wait_for(lambda: fields(call(nodes[0], "REPLAY", "cq", "FROM", t0, "TO", t1, "INTO",
                                 "cq3"))["nodes"] == 3, timeout=20, message="3 nodes read")  # (a retry adds nothing)
    assert sorted(drain_all(nodes, "cq3")) == bodies


def test_replay_with_a_holder_killed(make_cluster: Callable[..., list[DisqProcess]]) -> None:
    """kill -9 of one node: each job has another holder, so every job is replayed once."""
    nodes = make_cluster(3)
    assert call(nodes[0], "QPOLICY", "kq", "SET", "RETAIN", 3600) == OK
    bodies, t0, t1 = fill(nodes, "kq")
    nodes[2].kill()
    assert replay_until_complete(nodes[0], "kq", t0, t1, N) == N
    assert sorted(drain_all(nodes[:2], "kq2")) == bodies


def test_a_holder_killed_during_a_replay(
        make_cluster: Callable[..., list[DisqProcess]]) -> None:
    """kill -9 of a node while a REPLAY runs: what that REPLAY could not add (a page the
    node did not answer, a copy it did not take) is added by the same REPLAY run again,
    and no job twice."""
    nodes = make_cluster(3)
    assert call(nodes[0], "QPOLICY", "dq", "SET", "RETAIN", 3600) == OK
    count = 600
    bodies, t0, t1 = fill(nodes, "dq", count)
    results: list[dict[str, int]] = []
    replaying = threading.Thread(target=lambda: results.append(fields(call(
        nodes[0], "REPLAY", "dq", "FROM", t0, "TO", t1, "INTO", "dq2"))))
    replaying.start()
    time.sleep(0.05)
    nodes[2].kill()
    replaying.join(60)
    assert results[0]["added"] + replay_until_complete(nodes[0], "dq", t0, t1, count) == count
    assert sorted(drain_all(nodes[:2], "dq2")) == bodies
