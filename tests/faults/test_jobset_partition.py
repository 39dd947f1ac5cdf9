"""JOBSET with a holder cut off: it answers +OK only once every node holding a copy
applied the change. A holder that did not (cut off, or its link stuck) may still
deliver the job at its old time, so the client gets -NOREPL saying so, from the node
that holds the job and from one that does not alike; after the heal the same JOBSET
reaches every holder and answers +OK."""

from __future__ import annotations

from pathlib import Path

import pytest
import redis
from jepsen import Config, FaultCluster, _call
from netproxy import DROP, STUCK
from support import wait_for
from test_deadletters import show


def jobset_error(node, *args: object) -> str:
    try:
        reply = _call(node, "JOBSET", *args)
    except redis.exceptions.ResponseError as exc:
        return str(exc)
    raise AssertionError(f"JOBSET answered {reply!r} with a holder cut off")


@pytest.mark.timeout(90)
@pytest.mark.parametrize("mode", [DROP, STUCK])
def test_jobset_with_a_holder_cut_off_is_not_ok(tmp_path: Path, mode: str) -> None:
    cluster = FaultCluster(tmp_path, Config(nodes=4, aof=False, node_timeout=1000))
    try:
        a, b, c, d = cluster.nodes
        c_id = cluster.ids[2]
        job = _call(a, "ADDJOB", "q", "payload", 5000, "REPLICATE", 3, "RETRY", 30)
        holders = [n for n in cluster.nodes if _call(n, "SHOW", job)]
        if c not in holders:  # C is the one cut off: make it hold the job
            job = _call(c, "ADDJOB", "q", "payload", 5000, "REPLICATE", 3, "RETRY", 30)
            holders = [n for n in cluster.nodes if _call(n, "SHOW", job)]
        [outsider] = [n for n in cluster.nodes if n not in holders]
        [holder, _] = [n for n in holders if n is not c]
        assert b"due-ms" not in show(holder, job)  # a plain job
        cluster.net.isolate(c_id, cluster.ids, mode)
        error = jobset_error(holder, job, "DELAY-MS", 60_000)
        assert error.startswith("NOREPL") and "old" in error, error
        assert show(holder, job)[b"due-ms"] > 0  # applied where it could be
        error = jobset_error(outsider, job, "PRIORITY", 3)  # from a node without it
        assert error.startswith("NOREPL") and "old" in error, error
        cluster.net.heal()
        cluster.wait_formed(20)
        wait_for(lambda: _call(holder, "JOBSET", job, "DELAY-MS", 60_000) == b"OK", 15, 0.2,
                 "JOBSET to reach every holder once healed")
        due = show(holder, job)[b"due-ms"]
        assert abs(show(c, job)[b"due-ms"] - due) < 1000
        assert _call(outsider, "JOBSET", job, "PRIORITY", 4) == b"OK"
        for node in holders:
            wait_for(lambda node=node: show(node, job)[b"priority"] == 4, 5, 0.05,
                     "the priority on every holder")
    finally:
        cluster.close()
