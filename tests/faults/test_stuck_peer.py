"""A peer that accepts its bus connections and never reads them (netproxy's `stuck`):
the other nodes keep answering, keep replicating among themselves, close the stuck
link instead of queueing for it without end, and take the peer back once it reads."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from jepsen import Config, FaultCluster, _call
from netproxy import STUCK
from support import cluster_nodes, wait_for

BODY = b"x" * (1 << 20)
JOBS = 40  # 40 MB of REPLJOB for the stuck peer: far more than TCP buffers hold
ANSWER_S = 2.0  # a command must be answered within this, whatever the bus does


def timed(node, *args):
    started = time.monotonic()
    reply = _call(node, *args)
    assert time.monotonic() - started < ANSWER_S, f"{args[0]} took too long"
    return reply


@pytest.mark.timeout(60)
def test_stuck_peer(tmp_path: Path) -> None:
    cluster = FaultCluster(tmp_path, Config(nodes=3, aof=False, node_timeout=1000))
    try:
        a, b, c = cluster.nodes
        a_id, b_id, c_id = cluster.ids
        dialed = cluster.net.connections_from(a_id, c.port)
        cluster.net.isolate(c_id, cluster.ids, STUCK)
        for _ in range(JOBS):  # queued for B and C at once: C's copies go nowhere
            assert timed(a, "ADDJOB", "big", BODY, 0, "REPLICATE", 3, "ASYNC").startswith(b"D-")
        # A gives up the link it cannot write to (after the node timeout), so what it
        # queued for C is dropped rather than kept, and reconnects (in vain, for now).
        wait_for(lambda: cluster.net.connections_from(a_id, c.port) > dialed, 15, 0.1,
                 "A to drop its link to the stuck peer and dial again")
        wait_for(lambda: {"fail?", "fail"} & set(cluster_nodes(a)[c_id].flags), 10, 0.1,
                 "A to flag the stuck peer as failing")
        # Meanwhile A answers, and replicates to the peer that reads.
        assert timed(a, "PING") == b"PONG"
        job = timed(a, "ADDJOB", "small", "hello", 1500, "REPLICATE", 2)
        assert job.startswith(b"D-")
        assert timed(b, "SHOW", job)
        cluster.net.heal()
        cluster.wait_formed(20)
        job = timed(a, "ADDJOB", "small", "again", 1500, "REPLICATE", 3)
        assert timed(c, "SHOW", job)
    finally:
        cluster.close()
