"""ADDJOB ... ORDERKEY under kill -9 and partitions, against real nodes behind proxies.

Producers add each key's jobs one after the other (body "key:seq"), through random
nodes; consumers on every node take, work a little and ack. An *inversion* is a job
first delivered after a later job of its key was first delivered (a job delivered
again after its successor, because the node that released the successor did not hear
of its ack in time, is a *stale redelivery*: counted, reported, not an inversion).
Only jobs whose ADDJOB answered an ID are counted.

- kill -9 of a node (3 nodes, REPLICATE 2): its keys are taken over by the next node
  of each key's order, which gets the copies it lacks first: 0 inversions.
- a partition (5 nodes, {0, 1} | {2, 3, 4}, then healed): each side goes on with the
  keys; a key written on both sides during the cut may have its order broken where the
  two sides' jobs meet, and only such a key. With STRICT the minority adds nothing
  (-NOMAJORITY, or -NOREPL: a strict job needs copies on a majority) and delivers
  none of the keys' jobs: 0 inversions.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import redis
from jepsen import Config, FaultCluster, _client
from support import wait_for

QUEUE = "oq"
KEYS = 24
BOTH_SIDES = range(KEYS // 2, KEYS)  # partition run: these keys are written on any node


class OrderRun:
    def __init__(self, cluster: FaultCluster, replicate: int, strict: bool) -> None:
        self.cluster = cluster
        self.replicate = replicate
        self.strict = strict
        self.lock = threading.Lock()
        self.answered: set[str] = set()  # bodies whose ADDJOB answered an ID
        self.refused = 0  # ADDJOBs answered an error (NOMAJORITY on a strict minority...)
        self.firsts: dict[str, list[int]] = {}  # key -> seqs in the order first delivered
        self.delivered: set[str] = set()
        self.deliveries = 0
        self.stale = 0
        self.sides: dict[str, set[int]] = {}  # key -> the sides it was written on, cut
        self.side_of: dict[int, int] | None = None  # node -> side while a cut is on
        self.down: set[int] = set()
        self.stop_producing = threading.Event()
        self.stop = threading.Event()

    def alive(self, allowed: range | None = None) -> list[int]:
        nodes = range(len(self.cluster.nodes)) if allowed is None else allowed
        return [i for i in nodes if i not in self.down]

    def produce(self, keys: range, nodes: range | None, seed: int) -> None:
        rng = random.Random(seed)
        seqs = dict.fromkeys(keys, 0)
        strict = ["STRICT"] if self.strict else []
        while not self.stop_producing.is_set():
            for k in keys:
                key = f"k{k}"
                i = rng.choice(self.alive(nodes))
                body = f"{key}:{seqs[k]}"
                seqs[k] += 1
                with self.lock:
                    side = self.side_of.get(i) if self.side_of is not None else None
                try:
                    client = _client(self.cluster.nodes[i], timeout=3)
                    client.execute_command("ADDJOB", QUEUE, body, 1000, "ORDERKEY", key,
                                           "RETRY", 1, "REPLICATE", self.replicate, *strict)
                    client.close()
                except redis.exceptions.RedisError:
                    with self.lock:
                        self.refused += 1
                    continue
                with self.lock:
                    self.answered.add(body)
                    if side is not None:
                        self.sides.setdefault(key, set()).add(side)
            time.sleep(0.02)

    def consume(self, seed: int) -> None:
        rng = random.Random(seed)
        while not self.stop.is_set():
            choices = self.alive()
            try:
                client = _client(self.cluster.nodes[rng.choice(choices)], timeout=3)
                got = client.execute_command("GETJOB", "TIMEOUT", 200, "FROM", QUEUE)
                for _, job_id, body in got or []:
                    self.record(body.decode())
                    time.sleep(0.005)  # some work
                    client.execute_command("ACKJOB", job_id)
                client.close()
            except redis.exceptions.RedisError:
                time.sleep(0.05)

    def record(self, body: str) -> None:
        key, seq = body.split(":")
        with self.lock:
            self.deliveries += 1
            if body in self.delivered:
                firsts = self.firsts.get(key, [])
                if firsts and max(firsts) > int(seq):
                    self.stale += 1
                return
            self.delivered.add(body)
            self.firsts.setdefault(key, []).append(int(seq))

    def inversions(self) -> dict[str, int]:
        """key -> its answered jobs first delivered after a later answered one."""
        out: dict[str, int] = {}
        with self.lock:
            for key, seqs in self.firsts.items():
                highest = -1
                for seq in seqs:
                    if f"{key}:{seq}" not in self.answered:
                        continue
                    if seq < highest:
                        out[key] = out.get(key, 0) + 1
                    highest = max(highest, seq)
        return out

    def lost(self) -> int:
        with self.lock:
            return len(self.answered - self.delivered)

    def summary(self, what: str) -> str:
        return (f"{what}: answered={len(self.answered)} refused={self.refused} "
                f"deliveries={self.deliveries} delivered={len(self.delivered)} "
                f"stale-redeliveries={self.stale} inversions={self.inversions()}")


def _run(cluster: FaultCluster, run: OrderRun, producers: list[tuple[range, range | None]],
         fault: Callable[[], object], traffic_s: float) -> None:
    threads = [threading.Thread(target=run.produce, args=(keys, nodes, 100 + n))
               for n, (keys, nodes) in enumerate(producers)]
    threads += [threading.Thread(target=run.consume, args=(k,))
                for k in range(2 * len(cluster.nodes))]
    try:
        for thread in threads:
            thread.start()
        wait_for(lambda: len(run.answered) >= 3 * KEYS, 30, message="traffic flowing")
        fault()
        time.sleep(traffic_s)
        run.stop_producing.set()
        for thread in threads[:len(producers)]:
            thread.join(30)
        wait_for(lambda: run.lost() == 0, 60, 0.1, "every answered job delivered")
    finally:
        run.stop_producing.set()
        run.stop.set()
        for thread in threads:
            thread.join(30)


@pytest.mark.timeout(120)
def test_kill_of_a_keys_owner_keeps_every_keys_order(tmp_path: Path) -> None:
    cluster = FaultCluster(tmp_path, Config(nodes=3, aof=False, node_timeout=1000))
    run = OrderRun(cluster, replicate=2, strict=False)

    def kill() -> None:
        run.down.add(0)
        cluster.kill(0)

    try:
        _run(cluster, run, [(range(KEYS), None)], kill, 4.0)
    finally:
        cluster.close()
    print(run.summary("kill -9"))
    assert run.inversions() == {}
    assert len(run.answered) > 6 * KEYS


@pytest.mark.timeout(150)
@pytest.mark.parametrize("strict", [False, True],
                         ids=["plain", "strict"])
def test_a_partition_breaks_order_only_for_keys_written_on_both_sides(
        tmp_path: Path, strict: bool) -> None:
    cluster = FaultCluster(tmp_path, Config(nodes=5, aof=False, node_timeout=1000))
    run = OrderRun(cluster, replicate=2, strict=strict)
    minority, majority = [0, 1], [2, 3, 4]

    def cut() -> None:
        with run.lock:
            run.side_of = {i: 0 if i in minority else 1 for i in range(5)}
        cluster.net.cut([cluster.ids[i] for i in minority], [cluster.ids[i] for i in majority])

    def heal_later() -> None:
        time.sleep(5.0)
        cluster.net.heal()
        with run.lock:
            run.side_of = None

    healer = threading.Thread(target=heal_later)
    try:
        _run(cluster, run, [(range(KEYS // 2), range(2, 5)), (BOTH_SIDES, None)],
             lambda: (cut(), healer.start()), 7.0)
    finally:
        healer.join(30)
        cluster.close()
    print(run.summary("partition " + ("strict" if strict else "plain")))
    inverted = run.inversions()
    both = {key for key, sides in run.sides.items() if len(sides) > 1}
    assert set(inverted) <= both, (inverted, run.sides)
    if strict:
        assert inverted == {}
        assert run.refused > 0  # the minority's strict ADDJOBs
