"""Batches under faults: many batches filled and consumed on five nodes while one node is
killed (for good) and another is cut off, then healed. Every batch's callback is added
exactly once in the cluster, and never before every member whose ADDJOB answered an ID
was acknowledged.

The size is BATCHES x MEMBERS: 20 x 200 in `make test`; DISQ_BATCH_FAULT_SCALE=full
runs the issue's 100 x 1,000 (minutes on two cores)."""

from __future__ import annotations

import os
import random
import threading
import time
from pathlib import Path

import pytest
import redis
from jepsen import Config, FaultCluster, _call, _client
from support import wait_for

FULL = os.environ.get("DISQ_BATCH_FAULT_SCALE") == "full"
BATCHES = 100 if FULL else 20
MEMBERS = 1000 if FULL else 200
CHUNK = 100  # bodies per ADDJOBS
KILLED, CUT = 4, 3  # node 4 dies for good; node 3 is cut off from the others a while


class Run:
    """What producers, consumers and the callback reader saw (under `lock`)."""

    def __init__(self, cluster: FaultCluster) -> None:
        self.cluster = cluster
        self.lock = threading.Lock()
        self.members: dict[str, set[bytes]] = {f"b{i}": set() for i in range(BATCHES)}
        self.acked_at: dict[bytes, float] = {}  # member -> when its ACKJOB was sent
        self.callbacks: dict[str, list[float]] = {}  # batch -> when each callback came
        self.produced = threading.Event()
        self.stop = threading.Event()
        self.errors: list[str] = []

    def live(self) -> list[int]:
        return [i for i in range(len(self.cluster.nodes)) if i != KILLED
                and self.cluster.nodes[i].alive()]

    def client(self, rng: random.Random) -> redis.Redis:
        return _client(self.cluster.nodes[rng.choice(self.live())])

    def produce(self, batches: list[str], seed: int) -> None:
        rng = random.Random(seed)
        for bid in batches:
            sent = 0
            while sent < MEMBERS:
                bodies = [f"{bid}:{sent + j}" for j in range(CHUNK)]
                try:
                    client = self.client(rng)
                    replies = client.execute_command(
                        "ADDJOBS", "work", 5000, "RETRY", 2, "BATCH", bid, "JOBS", *bodies)
                    client.close()
                except redis.exceptions.RedisError:
                    time.sleep(0.05)
                    continue  # the outcome is unknown: those jobs count for nothing
                ids = {r for r in replies if isinstance(r, bytes)}
                with self.lock:
                    self.members[bid] |= ids
                sent += CHUNK  # bodies refused (an error in place of the ID) are not members

    def consume(self, seed: int) -> None:
        rng = random.Random(seed)
        while not self.stop.is_set():
            try:
                client = self.client(rng)
                got = client.execute_command("GETJOB", "TIMEOUT", 200, "COUNT", 50,
                                             "FROM", "work", "cb")
                for queue, job_id, body in got or []:
                    if queue == b"cb":
                        with self.lock:
                            self.callbacks.setdefault(body.decode(), []).append(time.time())
                    else:
                        with self.lock:
                            self.acked_at.setdefault(job_id, time.time())
                    client.execute_command("ACKJOB", job_id)
                client.close()
            except redis.exceptions.RedisError:
                time.sleep(0.05)


@pytest.mark.timeout(900 if FULL else 240)
def test_one_callback_per_batch_never_early_under_a_kill_and_a_partition(
        tmp_path: Path) -> None:
    # (the full size loads two cores with five nodes and their clients: pings wait)
    cluster = FaultCluster(tmp_path, Config(nodes=5, aof=False,
                                            node_timeout=3000 if FULL else 1000))
    run = Run(cluster)
    threads: list[threading.Thread] = []
    try:
        nodes = cluster.nodes
        for i in range(BATCHES):
            assert _call(nodes[i % 4], "BATCH", "NEW", f"b{i}", "ONDONE", "cb", f"b{i}") == b"OK"
        names = list(run.members)
        producers = [threading.Thread(target=run.produce, args=(names[k::3], k))
                     for k in range(3)]
        consumers = [threading.Thread(target=run.consume, args=(100 + k,)) for k in range(3)]
        threads = producers + consumers
        for thread in threads:
            thread.start()
        wait_for(lambda: sum(map(len, run.members.values())) >= BATCHES * MEMBERS // 4,
                 120, message="a quarter of the members added")
        cluster.kill(KILLED)
        wait_for(lambda: sum(map(len, run.members.values())) >= BATCHES * MEMBERS // 2,
                 120, message="half of the members added")
        cluster.net.isolate(cluster.ids[CUT], cluster.ids)
        for producer in producers:
            producer.join(600)
        # Close half the batches while node 3 is cut off (the majority side counts
        # them), the other half after the heal.
        for i in range(0, BATCHES, 2):
            # (at least: a job whose ADDJOBS lost its connection may be a member too)
            wait_for(lambda i=i: _closes(nodes[i % 3], f"b{i}", len(run.members[f"b{i}"])),
                     60, message=f"b{i} to close")
        cluster.net.heal()
        for i in range(1, BATCHES, 2):
            wait_for(lambda i=i: _closes(nodes[CUT if i % 4 == 1 else i % 3], f"b{i}",
                                         len(run.members[f"b{i}"])),
                     30, message=f"b{i} to close")
        wait_for(lambda: len(run.callbacks) == BATCHES, 300 if FULL else 120,
                 message="every batch's callback")
        time.sleep(3)  # a negative check: no second callback may come
        run.stop.set()
        for thread in consumers:
            thread.join(30)
        for bid, seen in run.callbacks.items():
            assert len(seen) == 1, f"{bid}: {len(seen)} callbacks"
            # (no member: every ADDJOBS of the batch refused, e.g. on the cut-off node)
            last_ack = max((run.acked_at[m] for m in run.members[bid]), default=0.0)
            assert seen[0] >= last_ack, f"{bid}: its callback came before its last ack"
    finally:
        run.stop.set()
        for thread in threads:
            thread.join(30)
        cluster.close()


def _closes(node: object, bid: str, expected: int) -> bool:
    """BATCH CLOSE answers the members counted, at least those that got an ID (a node
    just healed may first answer -NOMAJORITY: tried again)."""
    client = _client(node, timeout=30)  # type: ignore[arg-type]
    try:
        return client.execute_command("BATCH", "CLOSE", bid) >= expected  # type: ignore[no-any-return]
    except redis.exceptions.ResponseError as exc:
        if "NOMAJORITY" in str(exc) or "NOREPL" in str(exc):
            print(f"BATCH CLOSE {bid}: {exc}")  # shown if the close never comes
            return False
        if "BATCHCLOSED" in str(exc):  # an earlier try closed it, its answer lost
            return True
        raise
    finally:
        client.close()
