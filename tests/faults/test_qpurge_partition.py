"""QPURGE under a partition: a node cut off while the queue was purged keeps its jobs
until it is back, then deletes them (the purge reaches it by the periodic sync), and
none of them comes back through the other nodes meanwhile: a consumer there blocked on
the queue makes its node ask the cut-off one for jobs (federation) and the copies it
sends are refused. A job added after the purge is kept."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from jepsen import Config, FaultCluster, _call, _client
from support import DisqProcess, cluster_nodes, wait_for


def jobs_of(node: DisqProcess, queue: str) -> list[bytes]:
    reply = _call(node, "JSCAN", 0, "QUEUE", queue, "COUNT", 10_000, "BUSYLOOP")
    return list(reply[1])  # type: ignore[index]


@pytest.mark.timeout(120)
def test_a_purge_reaches_a_node_cut_off_and_its_copies_are_refused(tmp_path: Path) -> None:
    cluster = FaultCluster(tmp_path, Config(nodes=3, aof=False, node_timeout=1000))
    try:
        nodes = cluster.nodes
        cluster.net.isolate(cluster.ids[2], cluster.ids)  # node 2 alone
        wait_for(lambda: any("fail" in f or "fail?" in f for f in
                             (cluster_nodes(nodes[0])[cluster.ids[2]].flags,)), 15,
                 message="node 0 to see node 2 failing")
        wait_for(lambda: any("fail" in f or "fail?" in f for f in
                             (cluster_nodes(nodes[2])[cluster.ids[0]].flags,)), 15,
                 message="node 2 to see node 0 failing")
        cut_off = [_call(nodes[2], "ADDJOB", "pp", f"old {i}", 0, "REPLICATE", 1)
                   for i in range(20)]
        assert all(isinstance(job_id, bytes) for job_id in cut_off), cut_off
        reachable = [_call(nodes[0], "ADDJOB", "pp", f"old {i}", 0, "REPLICATE", 2)
                     for i in range(10)]
        assert _call(nodes[0], "QPURGE", "pp") == 10
        assert jobs_of(nodes[0], "pp") == [] and jobs_of(nodes[1], "pp") == []
        assert len(reachable) == 10
        with ThreadPoolExecutor(1) as pool:
            # nothing queued here: node 0 asks its peers for jobs, node 2 once healed
            client = _client(nodes[0], timeout=30)
            consumer = pool.submit(client.execute_command, "GETJOB", "TIMEOUT", 8000,
                                   "COUNT", 100, "FROM", "pp")
            time.sleep(0.2)  # (blocked or not, the test holds: it only gives it a start)
            cluster.net.heal()
            cluster.wait_formed(20)
            wait_for(lambda: jobs_of(nodes[2], "pp") == [], 20,
                     message="node 2 to delete the purged jobs")
            got = consumer.result(30)
            client.close()
        delivered = [] if not isinstance(got, list) else [job[1] for job in got]
        assert not set(delivered) & set(cut_off), "a purged job was delivered"
        for n in nodes:
            assert not set(jobs_of(n, "pp")) & set(cut_off), "a purged job is held"
        kept = _call(nodes[1], "ADDJOB", "pp", "new", 0, "REPLICATE", 3)
        assert isinstance(kept, bytes)
        assert all(jobs_of(n, "pp") == [kept] for n in nodes)  # a new job: kept everywhere
    finally:
        cluster.close()
