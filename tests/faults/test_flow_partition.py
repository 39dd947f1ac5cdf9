"""Flows under a partition: a child (ADDJOB ... AFTER parent) never runs before its
parent is acked, on either side; a holder cut off when the parent was acked keeps its
copy waiting (it cannot know), and after the heal the child is not run again."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from jepsen import Config, FaultCluster, _call
from support import DisqProcess, wait_for


def fields(node: DisqProcess, job_id: bytes) -> dict[bytes, object]:
    reply = _call(node, "SHOW", job_id)
    return {} if not reply else dict(zip(reply[::2], reply[1::2], strict=True))  # type: ignore[arg-type]


def queued(nodes: list[DisqProcess], queue: str) -> int:
    return sum(int(_call(n, "QLEN", queue)) for n in nodes)  # type: ignore[call-overload]


@pytest.mark.timeout(120)
def test_a_child_waits_on_both_sides_until_its_parent_is_acked(tmp_path: Path) -> None:
    cluster = FaultCluster(tmp_path, Config(nodes=3, aof=False, node_timeout=1000))
    try:
        nodes = cluster.nodes
        parent = _call(nodes[0], "ADDJOB", "fp-parent", "p", 0, "REPLICATE", 3)
        child = _call(nodes[1], "ADDJOB", "fp-child", "c", 0, "REPLICATE", 3, "RETRY", 1,
                      "AFTER", parent)
        assert isinstance(child, bytes)
        wait_for(lambda: all(fields(n, child).get(b"after") == [parent] for n in nodes), 10,
                 message="every holder of the child to know it waits")
        cluster.net.isolate(cluster.ids[2], cluster.ids)  # node 2 alone
        time.sleep(2.5)  # a negative check: the child must not run anywhere meanwhile
        assert queued(nodes, "fp-child") == 0
        got = _call(nodes[0], "GETJOB", "FROM", "fp-parent")
        assert got[0][1] == parent  # type: ignore[index]
        assert _call(nodes[0], "ACKJOB", parent) == 1
        wait_for(lambda: queued(nodes[:2], "fp-child") == 1, 10,
                 message="the child released on the side that saw the ACK")
        side = next(n for n in nodes[:2] if int(_call(n, "QLEN", "fp-child")) == 1)  # type: ignore[call-overload]
        assert _call(side, "GETJOB", "FROM", "fp-child")[0][1] == child  # type: ignore[index]
        assert _call(side, "ACKJOB", child) == 1
        time.sleep(2)  # a negative check: the cut-off copy stays waiting, never queued
        assert int(_call(nodes[2], "QLEN", "fp-child")) == 0  # type: ignore[call-overload]
        assert fields(nodes[2], child).get(b"after") == [parent]
        cluster.net.heal()
        cluster.wait_formed(20)
        # The ACK of the child reaches node 2's copy: it is never delivered again.
        wait_for(lambda: fields(nodes[2], child).get(b"state") in (None, b"acked"), 20,
                 message="node 2 to learn the child was acked")
        time.sleep(2)  # a negative check: no second run of the child
        assert queued(nodes, "fp-child") == 0
    finally:
        cluster.close()
