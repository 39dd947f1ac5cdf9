"""CRON under partitions: a tick fires only on the side that reaches a majority of
the known nodes, so no tick yields two jobs, and a side without a majority fires
nothing (nor catches up, once healed, what the majority side fired)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from jepsen import Config, FaultCluster, _call
from support import DisqProcess, wait_for

EVERY_SECOND = "* * * * * *"


def queued(nodes: list[DisqProcess]) -> int:
    return sum(int(_call(n, "QLEN", "ticks")) for n in nodes)  # type: ignore[call-overload]


def settled(nodes: list[DisqProcess]) -> int:
    """The jobs queued once nothing more comes (a tick's ADDJOB may still wait for its
    copies when the schedule is deleted)."""
    count = queued(nodes)
    while True:
        time.sleep(1.5)  # a negative check: no job may come any more
        again = queued(nodes)
        if again == count:
            return count
        count = again


@pytest.mark.timeout(120)
def test_a_tick_fires_once_and_only_on_the_majority_side(tmp_path: Path) -> None:
    cluster = FaultCluster(tmp_path, Config(nodes=3, aof=False, node_timeout=1000))
    try:
        nodes = cluster.nodes
        added = int(time.time() * 1000)
        # REPLICATE 1: alone, each side could add the tick's job by itself
        assert _call(nodes[0], "CRON", "ADD", "beat", "ticks", EVERY_SECOND, "x",
                     "REPLICATE", 1) == b"OK"
        wait_for(lambda: queued(nodes) >= 2, 10, message="2 ticks")
        firer = max(range(3), key=lambda i: int(_call(nodes[i], "QLEN", "ticks")))  # type: ignore[call-overload]
        rest = [n for i, n in enumerate(nodes) if i != firer]
        # The firer alone on its side: the other two go on, it adds nothing.
        cluster.net.isolate(cluster.ids[firer], cluster.ids)
        alone = int(_call(nodes[firer], "QLEN", "ticks"))  # type: ignore[call-overload]
        start = queued(rest)
        wait_for(lambda: queued(rest) >= start + 5, 20, message="the majority side fires")
        assert int(_call(nodes[firer], "QLEN", "ticks")) <= alone + 1  # type: ignore[call-overload]
        cluster.net.heal()
        cluster.wait_formed(20)
        # Every node alone: no side has a majority, no tick fires.
        for node_id in cluster.ids:
            cluster.net.isolate(node_id, cluster.ids)
        wait_for(lambda: all(_call(n, "CLUSTER", "NODES").count(b"fail") >= 2 for n in nodes), 10,
                 message="every node to see the others failing")
        before = queued(nodes)
        time.sleep(3)  # a negative check: three ticks, none of which may fire
        assert queued(nodes) == before
        cluster.net.heal()
        cluster.wait_formed(20)
        wait_for(lambda: queued(nodes) >= before + 2, 10, message="ticks after the heal")
        assert _call(nodes[0], "CRON", "DEL", "beat") == 1
        deleted = int(time.time() * 1000)
        # at most one job per tick between the CRON ADD and the CRON DEL
        assert settled(nodes) <= deleted // 1000 - added // 1000
    finally:
        cluster.close()
