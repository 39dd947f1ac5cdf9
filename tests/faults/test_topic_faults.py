"""Topics under a kill or a partition: publishes with MSGIDs to random nodes of five
while one node is killed for good, or cut off for a third of the run. Every subscribed queue that answered a job ID for a message delivers
that message at least once (0 lost); a retried publish (same MSGID) adds nothing twice
where its first answer came back. Beside each publish the same message goes to a plain
queue by ADDJOB with a DEDUP key (what a publish does for each queue): the subscribed
queues see no more duplicate deliveries than it does, beyond chance."""

from __future__ import annotations

import random
import threading
import time
from pathlib import Path

import pytest
import redis
from jepsen import Config, FaultCluster, _call, _client
from support import wait_for

MESSAGES = 400
QUEUES = (b"t-audit", b"t-billing")
PLAIN = b"t-plain"  # fed by ADDJOB ... DEDUP, as a yardstick
KILLED = 4


class Run:
    def __init__(self, cluster: FaultCluster) -> None:
        self.cluster = cluster
        self.lock = threading.Lock()
        self.answered: dict[bytes, set[bytes]] = {q: set() for q in (*QUEUES, PLAIN)}
        self.delivered: dict[bytes, dict[bytes, int]] = {q: {} for q in (*QUEUES, PLAIN)}
        self.published = 0
        self.stop = threading.Event()
        self.kill = True  # the consumers keep off the node to be killed

    def node(self, rng: random.Random, avoid_killed: bool) -> redis.Redis:
        choices = [i for i in range(5) if not (avoid_killed and i == KILLED)
                   and self.cluster.nodes[i].alive()]
        return _client(self.cluster.nodes[rng.choice(choices)], timeout=10)

    def publish(self) -> None:
        rng = random.Random(1)
        for n in range(MESSAGES):
            body = b"m%d" % n
            for _ in range(5):  # a publish whose answer was lost is sent again
                try:
                    client = self.node(rng, avoid_killed=False)
                    reply = client.execute_command("TOPIC", "PUBLISH", "t-events", body,
                                                   "MSGID", body, "RETRY", 2)
                    plain = client.execute_command("ADDJOB", PLAIN, body, 0, "DEDUP", body,
                                                   "RETRY", 2)
                    client.close()
                except redis.exceptions.RedisError:
                    time.sleep(0.05)
                    continue
                with self.lock:
                    for queue, job in [*zip(reply[0::2], reply[1::2], strict=True),
                                       (PLAIN, plain)]:
                        if isinstance(job, bytes):
                            self.answered[queue].add(body)
                    self.published += 1
                break

    def consume(self, seed: int) -> None:
        rng = random.Random(seed)
        while not self.stop.is_set():
            try:
                client = self.node(rng, avoid_killed=self.kill)
                got = client.execute_command("GETJOB", "TIMEOUT", 200, "COUNT", 50,
                                             "FROM", *QUEUES, PLAIN)
                for queue, job_id, body in got or []:
                    with self.lock:
                        seen = self.delivered[queue]
                        seen[body] = seen.get(body, 0) + 1
                    client.execute_command("ACKJOB", job_id)
                client.close()
            except redis.exceptions.RedisError:
                time.sleep(0.05)

    def lost(self) -> list[tuple[bytes, bytes]]:
        with self.lock:
            return [(q, b) for q in (*QUEUES, PLAIN) for b in self.answered[q]
                    if b not in self.delivered[q]]


@pytest.mark.timeout(180)
@pytest.mark.parametrize("fault", ["kill", "partition"])
def test_no_subscribed_queue_loses_a_message_it_answered(tmp_path: Path, fault: str) -> None:
    cluster = FaultCluster(tmp_path, Config(nodes=5, aof=False, node_timeout=1000))
    run = Run(cluster)
    run.kill = fault == "kill"
    threads = [threading.Thread(target=run.publish)]
    threads += [threading.Thread(target=run.consume, args=(10 + k,)) for k in range(2)]
    try:
        for queue in QUEUES:
            assert _call(cluster.nodes[0], "TOPIC", "SUBSCRIBE", "t-events", queue) == 1
        for thread in threads:
            thread.start()
        wait_for(lambda: run.published >= MESSAGES // 3, 60, message="a third published")
        if fault == "kill":
            cluster.kill(KILLED)
        else:  # a node cut off for a while, publishes and consumers still on it
            cluster.net.isolate(cluster.ids[KILLED], cluster.ids)
            wait_for(lambda: run.published >= MESSAGES * 2 // 3, 60,
                     message="two thirds published")
            cluster.net.heal()
        threads[0].join(120)
        wait_for(lambda: not run.lost(), 60, message="every answered message delivered")
        with run.lock:
            extras = {}
            for queue in (*QUEUES, PLAIN):
                assert len(run.answered[queue]) >= MESSAGES * 9 // 10, (
                    queue, len(run.answered[queue]))
                extras[queue] = sum(count - 1 for count in run.delivered[queue].values())
                print(f"{queue.decode()}: {len(run.answered[queue])} answered, "
                      f"{extras[queue]} deliveries beyond the first")
            # The same causes touch a job of any queue alike (mostly: a RETRY expiring on
            # a job delivered on the other side of the partition, or left unacked by the
            # node killed): a subscribed queue sees about the plain queue's duplicates.
            # Which jobs a fault catches is chance (runs saw 7 against 0, 4 against 4):
            # more than twice as many and 10 more would be a fan-out's own.
            for queue in QUEUES:
                assert extras[queue] <= 2 * extras[PLAIN] + 10, extras
    finally:
        run.stop.set()
        for thread in threads:
            thread.join(30)
        cluster.close()
