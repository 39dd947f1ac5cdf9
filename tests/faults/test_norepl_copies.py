"""An ADDJOB ... DEDUP answered -NOREPL adds nothing, even when a holder that logged its
copy in the AOF is killed before it heard that the ADDJOB failed: restarted, the
holder finds the copy provisional, asks the job's other holders before queueing it,
and drops it since none of them holds the job. (Before, the copy came back as a job,
next to the one the client's retry made: two jobs for one key.)"""

from __future__ import annotations

import os
import re
import signal
import threading
from pathlib import Path

import pytest
import redis
from jepsen import Config, FaultCluster, _call
from support import wait_for

JOB_ID = re.compile(rb"D-[0-9a-f]{8}-[A-Za-z0-9+/]{24}-[0-9a-f]{4}")


@pytest.mark.timeout(90)
def test_a_copy_of_a_failed_addjob_does_not_come_back_from_the_aof(tmp_path: Path) -> None:
    cluster = FaultCluster(tmp_path, Config(nodes=3, aof=True, node_timeout=1000))
    a, b, c = cluster.nodes
    stopped: list[int] = []
    try:
        aof = c.dir / "disque.aof"
        logged = aof.read_bytes().count(b"LOADJOB")
        os.kill(b.pid, signal.SIGSTOP)  # B never confirms its copy: the ADDJOB fails
        stopped.append(b.pid)
        outcome: list[object] = []

        def add() -> None:
            client = a.client(protocol=2, socket_timeout=20)
            try:
                outcome.append(client.execute_command(
                    "ADDJOB", "q", "payload", 3000, "REPLICATE", 3, "RETRY", 1,
                    "DEDUP", "key"))
            except redis.exceptions.RedisError as exc:
                outcome.append(exc)
            finally:
                client.close()

        adding = threading.Thread(target=add)
        adding.start()
        # C logs its copy (and confirms it); then it hears nothing more
        wait_for(lambda: aof.read_bytes().count(b"LOADJOB") > logged, 10, 0.01,
                 "C to log its copy")
        os.kill(c.pid, signal.SIGSTOP)
        stopped.append(c.pid)
        adding.join(30)
        assert len(outcome) == 1 and isinstance(outcome[0], redis.exceptions.ResponseError)
        assert str(outcome[0]).startswith("NOREPL"), outcome
        [job] = set(JOB_ID.findall(aof.read_bytes()))
        cluster.kill(2)  # kill -9: its AOF still has the copy, not the deletion
        stopped.remove(c.pid)
        os.kill(b.pid, signal.SIGCONT)
        stopped.remove(b.pid)
        cluster.restart(2)
        cluster.wait_formed(20)
        # the client's retry adds the job
        again = _call(a, "ADDJOB", "q", "payload", 5000, "REPLICATE", 3, "RETRY", 1,
                      "DEDUP", "key")
        assert again != job
        # the copy of the failed ADDJOB is dropped, never delivered
        wait_for(lambda: not _call(c, "SHOW", job), 15, 0.05,
                 "C to drop the copy of the failed ADDJOB")
        delivered = set()
        for node in cluster.nodes:
            while reply := _call(node, "GETJOB", "NOHANG", "COUNT", 10, "FROM", "q"):
                for entry in reply:
                    delivered.add(entry[1])
                    _call(node, "ACKJOB", entry[1])
        assert job not in delivered
        assert delivered <= {again}
    finally:
        for pid in stopped:
            os.kill(pid, signal.SIGCONT)
        cluster.close()
