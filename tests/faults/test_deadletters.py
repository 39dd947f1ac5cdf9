"""A job held by three nodes reaching MAXDELIVERIES becomes exactly one dead letter,
even with its holders' counters apart: one holder cut off by a partition (it requeues
and delivers its own copy meanwhile) and another killed with kill -9 and restarted
from its AOF. Once the partition heals, every copy is the dead letter, in the
dead-letter queue, queued on at most one node: one job, as its ID says."""

from __future__ import annotations

from pathlib import Path

import pytest
from jepsen import Config, FaultCluster, _call
from support import wait_for


def show(node, job: bytes) -> dict[bytes, object]:
    reply = _call(node, "SHOW", job)
    return dict(zip(reply[::2], reply[1::2], strict=True))


@pytest.mark.timeout(90)
def test_one_dead_letter_across_a_partition_and_a_kill(tmp_path: Path) -> None:
    cluster = FaultCluster(tmp_path, Config(nodes=3, aof=True, node_timeout=1000))
    try:
        a, b, c = cluster.nodes
        a_id, b_id, c_id = cluster.ids
        job = _call(a, "ADDJOB", "q", "payload", 5000, "REPLICATE", 3, "RETRY", 2,
                    "MAXDELIVERIES", 3)
        wait_for(lambda: all(_call(n, "SHOW", job) for n in (b, c)), 5,
                 message="every holder has a copy")
        cluster.net.isolate(c_id, cluster.ids)
        # A's side: three deliveries, NACKed: A makes it a dead letter, B hears of it.
        for _ in range(3):
            reply = _call(a, "GETJOB", "TIMEOUT", 5000, "FROM", "q")
            assert reply and reply[0][1] == job, reply
            _call(a, "NACK", job)
        assert show(a, job)[b"queue"] == b"dead:q"
        wait_for(lambda: show(b, job)[b"queue"] == b"dead:q", 5, message="B hears of it")
        # C's side: its copy comes due after RETRY, C queues and delivers it (its
        # counters now differ from A's), and the consumer NACKs it once.
        reply = _call(c, "GETJOB", "TIMEOUT", 10_000, "FROM", "q")
        assert reply and reply[0][1] == job, reply
        _call(c, "NACK", job)
        assert show(c, job)[b"queue"] == b"q"
        # B dies without a word and comes back from its AOF.
        cluster.kill(1)
        cluster.restart(1)
        cluster.net.heal()
        cluster.wait_formed(20)
        nodes = (a, b, c)
        wait_for(lambda: all(show(n, job)[b"queue"] == b"dead:q" for n in nodes), 20, 0.1,
                 "every copy to become the dead letter")
        for node in nodes:
            fields = show(node, job)
            assert (fields[b"dead-from"], fields[b"dead-reason"]) == (b"q", b"max-deliveries")
        assert sum(_call(n, "QLEN", "q") for n in nodes) == 0
        # one dead letter: queued on at most one node (now, or after its RETRY)
        wait_for(lambda: sum(_call(n, "QLEN", "dead:q") for n in nodes) == 1, 15, 0.1,
                 "the dead letter queued once")
        assert sum(_call(n, "QLEN", "dead:q") for n in nodes) == 1
        info = [_call(n, "INFO", "failures").decode() for n in nodes]
        assert "dead_lettered_jobs:1" in info[0], info[0]
    finally:
        cluster.close()
