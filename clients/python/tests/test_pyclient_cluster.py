"""The clients against real three-node clusters: discovery from one seed, replication,
failover when the current node dies or hangs, HELLO priorities, and a consumer moving
to the node that produces its jobs."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable
from typing import Any

from disq_client import Client
from nodes_at import addr
from support import DisqProcess, call, myid, wait_for

Connect = Callable[..., Any]
StartCluster = Callable[..., list[DisqProcess]]


def port_of(c: Any) -> int:
    assert c.current_node is not None
    port: int = c.current_node[1]
    return port


def node_at(nodes: list[DisqProcess], port: int) -> DisqProcess:
    return next(n for n in nodes if n.port == port)


def test_learns_the_cluster_from_one_seed(cluster: list[DisqProcess], connect: Connect) -> None:
    c = connect(addr(cluster[1]))
    hello = c.hello()
    ids = {myid(n): n.port for n in cluster}
    assert hello.node_id == myid(cluster[1])
    assert {n.id: n.port for n in hello.nodes} == ids
    assert all(n.priority == 1 for n in hello.nodes)
    assert {e.id: a[1] for a, e in c.view.nodes.items()} == ids


def test_replicated_job_on_every_node(cluster: list[DisqProcess], connect: Connect) -> None:
    c = connect(addr(cluster[0]))
    job_id = c.add_job("q", b"x", replicate=3, timeout_ms=5000)
    ids = sorted(myid(n) for n in cluster)
    for n in cluster:
        with Client(addr(n), switch_after_jobs=0) as pinned:
            info = pinned.show(job_id)
            assert info is not None and sorted(info.nodes_delivered) == ids
            assert info.state == ("queued" if n is cluster[0] else "active")
    assert c.ack(job_id) == 1


def test_failover_when_the_node_is_killed(start_cluster: StartCluster,
                                          connect: Connect) -> None:
    nodes = start_cluster(3)
    c = connect([addr(n) for n in nodes])
    c.connect()
    victim = node_at(nodes, port_of(c))
    victim_prefix = myid(victim)[:8]
    ids = c.add_jobs("q", [b"%d" % i for i in range(10)], replicate=3, retry_ms=1000)
    first = c.get_jobs("q", count=4)
    assert len(first) == 4
    assert c.ack(first[0].id, first[1].id) == 2

    victim.kill()
    # The next commands go to another node, which holds a copy of every job.
    assert c.ack(first[2].id, first[3].id) == 2
    assert port_of(c) != victim.port
    late = c.add_job("q", b"after", replicate=2)
    assert late[2:10] != victim_prefix

    # The jobs the dead node had queued come back from the copies after their RETRY.
    expected = set(ids[4:]) | {late}
    received: set[str] = set()
    deadline = time.monotonic() + 20
    while not expected <= received:
        assert time.monotonic() < deadline, f"missing {expected - received}"
        jobs = c.get_jobs("q", count=10, timeout_ms=500)
        if jobs:
            c.ack(*[j.id for j in jobs])
            received |= {j.id for j in jobs}


def blocked(node: DisqProcess) -> int:
    info = call(node, "INFO", "clients")
    assert isinstance(info, bytes)
    return int(info.split(b"blocked_clients:")[1].split(b"\r\n")[0])


def test_a_blocked_consumer_moves_when_its_node_dies(start_cluster: StartCluster,
                                                     connect: Connect) -> None:
    nodes = start_cluster(3)
    c = connect([addr(n) for n in nodes])
    c.connect()
    victim = node_at(nodes, port_of(c))
    survivors = [n for n in nodes if n is not victim]
    got: dict[str, Any] = {}
    consumer = threading.Thread(target=lambda: got.update(jobs=c.get_jobs("q")), daemon=True)
    consumer.start()
    wait_for(lambda: blocked(victim) == 1, message="GETJOB to block")
    victim.kill()
    [waiting_on] = wait_for(lambda: [n for n in survivors if blocked(n) == 1], timeout=10,
                            message="GETJOB to block on another node")
    # (produced where the consumer waits: the other survivor could push the job to the
    # dead node, which asked for jobs of q a moment before it died)
    with Client(addr(waiting_on)) as producer:
        job_id = producer.add_job("q", b"x", replicate=2)
    consumer.join(15)
    assert [j.id for j in got["jobs"]] == [job_id]


def test_failover_when_the_node_hangs(start_cluster: StartCluster, connect: Connect) -> None:
    nodes = start_cluster(3)
    c = connect([addr(n) for n in nodes], timeout_ms=500)
    c.connect()
    stuck = node_at(nodes, port_of(c))
    stuck_id = myid(stuck)
    os.kill(stuck.pid, signal.SIGSTOP)
    try:
        # ADDJOB times out on the stuck node (after the client timeout plus the
        # replication timeout) and is added on another node instead.
        job_id = c.add_job("q", b"x", replicate=2, timeout_ms=500)
        assert port_of(c) != stuck.port and job_id[2:10] != stuck_id[:8]
        assert c.show(job_id) is not None
    finally:
        os.kill(stuck.pid, signal.SIGCONT)


def test_a_leaving_node_is_left_for_a_better_one(start_cluster: StartCluster,
                                                 connect: Connect) -> None:
    nodes = start_cluster(3)
    leaving = nodes[0]
    assert call(leaving, "CLUSTER", "LEAVING", "yes") == b"OK"
    c = connect(addr(leaving))  # the only seed
    c.connect()
    assert port_of(c) != leaving.port  # HELLO gave it priority 100: moved at once
    # ... and the other nodes learn it by gossip
    wait_for(lambda: {n.port: n.priority for n in c.hello().nodes}[leaving.port] == 100,
             timeout=10, message="HELLO to show the leaving node with priority 100")
    assert c.add_job("q", b"x", replicate=2)


def test_consumer_moves_to_the_producing_node(cluster: list[DisqProcess],
                                              connect: Connect) -> None:
    consumer_node, producer_node = cluster[0], cluster[1]
    producer = Client(addr(producer_node), switch_after_jobs=0)
    consumer = connect(addr(consumer_node), switch_after_jobs=10)
    try:
        assert consumer.connect()[1] == consumer_node.port
        ids = producer.add_jobs("q", [b"%d" % i for i in range(30)], replicate=1)
        received: list[str] = []
        # Federation brings the first jobs to the consumer's node; after ten jobs all
        # made by the producer's node, the consumer moves there.
        def moved() -> bool:
            received.extend(j.id for j in consumer.get_jobs("q", count=5, timeout_ms=1000))
            return port_of(consumer) == producer_node.port
        wait_for(moved, timeout=15, message="the consumer to move")
        assert len(received) >= 10
        assert consumer.current_node_id == myid(producer_node)
        while len(received) < 30:
            jobs = consumer.get_jobs("q", count=10, timeout_ms=2000)
            assert jobs, f"{30 - len(received)} jobs missing"
            received += [j.id for j in jobs]
        assert sorted(received) == sorted(ids)
        assert consumer.ack(*received) == 30
    finally:
        producer.close()


def test_pipelines_of_encoded_commands_and_a_connection_of_ones_own(
        cluster: list[DisqProcess]) -> None:
    """execute_pipeline: encoded commands in one write, error replies as values;
    connection() and failed(): a caller keeping writes in flight itself (disq_spark)
    moves to the next node as the client's own failover would."""
    from disq_client.commands import addjob_options, encode_addjobs
    from disq_client.protocol import ErrorReply, encode

    with Client([addr(n) for n in cluster], switch_after_jobs=0) as c:
        c.view.prefer(addr(cluster[1]))
        payloads = encode_addjobs("pipe", [b"a", b"b"], addjob_options(5000, 2, None, None,
                                                                        None, None, False))
        replies = c.execute_pipeline([*payloads, encode(("ACKJOB", "nonsense"))])
        assert all(isinstance(r, bytes) and r.startswith(b"D-") for r in replies[:2])
        assert isinstance(replies[2], ErrorReply) and "BADID" in str(replies[2])
        assert port_of(c) == cluster[1].port  # the preferred node
        conn = c.connection()
        assert conn.addr == c.current_node and c.core.failovers == 0
        c.failed(conn.addr)
        assert c.core.failovers == 1 and not conn.connected
        assert c.connection().addr != conn.addr  # the next node
        assert c.view.candidates()[-1] == conn.addr
