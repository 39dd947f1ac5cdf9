"""WAITJOB across a partition: on a side without the job's holders it may time out
or answer `unknown`, never an end the job did not have; once the partition heals, a
WAITJOB that was waiting all along answers the job's true end (its node asks again
the peers whose link came back), and so does a new one. (A result readable after
kill -9 of all its holders but one: tests/integration/test_results.py.)"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
import redis
from jepsen import Config, FaultCluster, _call
from support import DisqProcess, wait_for

RESULT = b"the true end"


def state_on(node: DisqProcess, job: bytes, timeout_ms: int) -> list[object]:
    [entry] = _call(node, "WAITJOB", "TIMEOUT", timeout_ms, job)  # type: ignore[misc]
    return entry  # type: ignore[no-any-return]


def waiting_on(node: DisqProcess, job: bytes, timeout_ms: int
               ) -> tuple[threading.Thread, list[object]]:
    """A WAITJOB TIMEOUT `timeout_ms` on its own connection, in a thread."""
    answers: list[object] = []

    def wait() -> None:
        client = node.client(protocol=2, socket_timeout=timeout_ms / 1000 + 10)
        client.response_callbacks.clear()
        try:
            answers.append(client.execute_command("WAITJOB", "TIMEOUT", timeout_ms, job))
        except redis.exceptions.RedisError as exc:
            answers.append(exc)
        finally:
            client.close()

    thread = threading.Thread(target=wait, daemon=True)
    thread.start()
    return thread, answers


@pytest.mark.timeout(90)
def test_waitjob_across_a_partition_never_answers_a_wrong_end(tmp_path: Path) -> None:
    cluster = FaultCluster(tmp_path, Config(nodes=3, aof=False, node_timeout=1000))
    try:
        job = _call(cluster.nodes[0], "ADDJOB", "q", "work", 0, "REPLICATE", 2,
                    "RETRY", 60)
        holders = [n for n in cluster.nodes if _call(n, "SHOW", job)]
        [outsider] = [n for n in cluster.nodes if n not in holders]
        outsider_id = cluster.ids[cluster.nodes.index(outsider)]
        # the outsider's WAITJOB asked the holders, which watch the job for it
        waiting = waiting_on(outsider, job, 40_000)
        wait_for(lambda: state_on(outsider, job, 300)[1] in (b"queued", b"active"), 10, 0.05,
                 "the outsider to hear of the job")
        cluster.net.isolate(outsider_id, cluster.ids)
        wait_for(lambda: _call(outsider, "CLUSTER", "NODES").count(b"fail") >= 2, 10, 0.05,
                 "the outsider to count its peers failing")
        # the job ends on the holders' side; the outsider cannot know it
        holder = wait_for(lambda: next((n for n in holders if _call(
            n, "GETJOB", "NOHANG", "FROM", "q")), None), 10, 0.05, "the job delivered")
        assert _call(holder, "ACKJOB", job, "RESULT", RESULT) == 1
        time.sleep(0.5)  # (the ACK's end would reach the outsider now, were it linked)
        for timeout_ms in (1, 1000, 0):  # (0: no timeout, and no node to ask: unknown)
            _, state, data = state_on(outsider, job, timeout_ms)
            assert state in (b"unknown", b"queued", b"active"), (state, data)
            assert data is None
        thread, answers = waiting
        assert thread.is_alive() and not answers  # not a wrong end: no end at all
        cluster.net.heal()
        cluster.wait_formed(20)
        thread.join(15)  # asked again once its links are up: within a second or so
        assert answers == [[[job, b"acked", RESULT]]]
        assert state_on(outsider, job, 5000) == [job, b"acked", RESULT]
    finally:
        cluster.close()
