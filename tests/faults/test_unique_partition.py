"""ADDJOB ... UNIQUE across a partition, as README promises it: the key is checked with
the nodes a node reaches, so each side of a partition may add a job of the key (the
AP outcome: two live jobs, one per side, both run), and within one side producers
racing on every node get that side's one job. Once healed, no third job is added
while the two live (an ADDJOB of the key answers one of them), both are delivered,
and once both are acked the key is free: producers racing on every node add one new
job."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
import redis
from jepsen import Config, FaultCluster, _call
from support import DisqProcess, wait_for


def add_unique(node: DisqProcess, deadline: float) -> bytes:
    """ADDJOB ... UNIQUE k as a producer sends it: again after an error (-NOREPL while a
    peer it cannot reach is not yet known failing) until it gets an ID."""
    while True:
        try:
            return _call(node, "ADDJOB", "q", "body", 0, "REPLICATE", 1, "RETRY", 60,  # type: ignore[return-value]
                         "UNIQUE", "k")
        except redis.exceptions.RedisError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def race(nodes: list[DisqProcess], seconds: float = 15) -> list[bytes]:
    """One producer per node, all at once: the ID each one got."""
    deadline = time.monotonic() + seconds
    got: dict[int, bytes | BaseException] = {}

    def produce(i: int) -> None:
        try:
            got[i] = add_unique(nodes[i], deadline)
        except BaseException as exc:  # (reported below)
            got[i] = exc

    threads = [threading.Thread(target=produce, args=(i,)) for i in range(len(nodes))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(seconds + 10)
    answers = [got.get(i) for i in range(len(nodes))]
    assert all(isinstance(a, bytes) for a in answers), answers
    return answers  # type: ignore[return-value]


def live(nodes: list[DisqProcess]) -> int:
    """The key's jobs queued on these nodes (REPLICATE 1: one copy each)."""
    return sum(int(_call(n, "QLEN", "q")) for n in nodes)  # type: ignore[call-overload]


@pytest.mark.timeout(120)
def test_unique_across_a_partition_gives_one_job_per_side(tmp_path: Path) -> None:
    cluster = FaultCluster(tmp_path, Config(nodes=3, aof=False, node_timeout=1000))
    try:
        a, b, c = cluster.nodes
        cluster.net.isolate(cluster.ids[2], cluster.ids)
        on_a, on_b, on_c = race([a, b, c])
        assert on_a == on_b  # one side: one job
        assert on_c != on_a  # the other side: its own (AP, as README says)
        assert live([a, b]) == 1 and live([c]) == 1
        assert add_unique(c, time.monotonic() + 5) == on_c  # each side keeps its one
        assert add_unique(b, time.monotonic() + 5) == on_a
        cluster.net.heal()
        cluster.wait_formed(20)
        # healed: every node answers one of the two live jobs, none adds a third
        for node in (a, b, c):
            assert add_unique(node, time.monotonic() + 10) in (on_a, on_c)
        assert live([a, b, c]) == 2
        # both run; once both are acked the key is free again
        delivered: set[bytes] = set()

        def consume() -> bool:  # (a consumer per node; federation may move the jobs)
            for node in (a, b, c):
                got = _call(node, "GETJOB", "NOHANG", "FROM", "q")
                if got is not None:
                    [[_, job, _]] = got  # type: ignore[misc]
                    delivered.add(job)
                    assert _call(node, "ACKJOB", job) == 1
            return len(delivered) >= 2

        wait_for(consume, 10, 0.05, "both jobs delivered")
        assert delivered == {on_a, on_c}
        wait_for(lambda: all(_call(n, "SHOW", j) is None for n in (a, b, c) for j in delivered),
                 10, 0.05, "the acked jobs gone everywhere")
        answers = race([a, b, c])
        assert len(set(answers)) == 1 and answers[0] not in delivered, answers
        assert live([a, b, c]) == 1
    finally:
        cluster.close()
