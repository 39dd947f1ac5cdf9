"""Federation with real nodes: jobs move to the node whose consumers wait."""

from __future__ import annotations

import threading
import time

import pytest
import redis
from support import assert_stays, call, cluster_nodes, myid, wait_for


def pairs(flat: list) -> dict:
    return dict(zip(flat[::2], flat[1::2], strict=True))


def show_state(node, job_id) -> bytes | None:
    fields = call(node, "SHOW", job_id)
    return None if fields is None else pairs(fields)[b"state"]


def blocked_consumer(node, queue: str,
                     timeout_ms: int = 5000) -> tuple[threading.Thread, list[object]]:
    """A GETJOB TIMEOUT `timeout_ms` on `node` in a thread, returned once it is
    blocked; its reply lands in the list."""
    got: list[object] = []
    client = node.client(protocol=2, socket_timeout=timeout_ms / 1000 + 10)
    client.response_callbacks.clear()

    def consume() -> None:
        try:
            got.append(client.execute_command("GETJOB", "TIMEOUT", timeout_ms, "FROM", queue))
        finally:
            client.close()

    consumer = threading.Thread(target=consume)
    consumer.start()
    wait_for(lambda: call(node, "QSTAT", queue) is not None
             and pairs(call(node, "QSTAT", queue))[b"blocked"] == 1,
             message=f"the consumer blocked on port {node.port}")
    return consumer, got


def test_blocked_consumer_gets_a_job_added_on_another_node(make_cluster):
    """A consumer blocked on B receives, within a bus round trip or so, the job a
    producer adds on A; acknowledged on B, the job is gone from A as well and is
    never delivered again after its RETRY (Disque, with REPLICATE 1, leaves the copy on A and delivers it again)."""
    a, b, _ = make_cluster(3)
    consumer, got = blocked_consumer(b, "fq")
    started = time.monotonic()
    job_id = call(a, "ADDJOB", "fq", "hello", 0, "REPLICATE", 1, "RETRY", 1)
    consumer.join(10)
    elapsed = time.monotonic() - started
    assert got == [[[b"fq", job_id, b"hello"]]]
    assert elapsed < 1.0, elapsed  # pushed at once, not found by a later poll
    stat = pairs(call(b, "QSTAT", "fq"))
    assert stat[b"import-from"] == [myid(a).encode()] and stat[b"import-rate"] >= 1
    assert call(b, "QSCAN", "BUSYLOOP", "IMPORTRATE", 1)[1] == [b"fq"]
    assert call(a, "QSCAN", "BUSYLOOP", "IMPORTRATE", 1)[1] == []
    assert b"jobs_imported:1\r\n" in call(b, "INFO", "federation")
    assert b"jobs_exported:1\r\n" in call(a, "INFO", "federation")
    assert b"Federation" not in call(a, "INFO", "all")  # Disque's layout unchanged
    assert call(b, "ACKJOB", job_id) == 1
    wait_for(lambda: show_state(a, job_id) is None, message="the copy on a retired")
    assert_stays(lambda: all(call(n, "QLEN", "fq") == 0 for n in (a, b)), 2.0,
                 "an acked job must not come back after its RETRY")


@pytest.mark.parametrize("retry", [60, 0])
def test_no_job_is_pushed_to_a_node_that_died(make_cluster, retry):
    """A node that asked for a queue and then died is skipped when a job comes: the
    job goes to the live node that asked (a job pushed to the dead one would wait for
    its RETRY there; a RETRY 0 one would be lost)."""
    a, b, c = make_cluster(3)
    a_id = myid(a)
    assert call(a, "GETJOB", "TIMEOUT", 300, "FROM", "dq") is None  # a asked everyone
    a.kill()
    wait_for(lambda: cluster_nodes(c)[a_id].link == "disconnected",
             message="c to see its link to a down")
    consumer, got = blocked_consumer(b, "dq")
    job_id = call(c, "ADDJOB", "dq", "body", 0, "REPLICATE", 1, "RETRY", retry)
    consumer.join(10)
    assert got == [[[b"dq", job_id, b"body"]]]


def test_no_job_moves_to_a_node_whose_consumer_gave_up(make_cluster):
    """A consumer on B that timed out must not pull the next job added on A
    to B, where nobody waits for it any more: 10 rounds of GETJOB TIMEOUT 1 (ms) on B,
    then ADDJOB REPLICATE 1 on A once A read what B sent it after (its cancel among
    it), and the job stays queued on A. (A second GETJOB on B
    is a consumer of its own: once the first ask is ASK_PERIOD_MS old it asks again,
    and A, holding the job, rightly sends it, which on a loaded machine arrives after
    that 1 ms consumer left too.)"""
    a, b = make_cluster(2)
    on_a, on_b = a.client(protocol=2, socket_timeout=5), b.client(protocol=2, socket_timeout=5)
    try:
        for client in (on_a, on_b):
            client.response_callbacks.clear()
        for round_no in range(10):
            queue = f"gone-{round_no}"
            assert on_b.execute_command("GETJOB", "TIMEOUT", 1, "FROM", queue) is None
            # B's cancel went to A before the reply; A may read the next ADDJOB's client
            # before that bus frame (a loaded machine). A change B then sends A over the
            # same link, seen on A, says A read the cancel too
            assert on_b.execute_command("QPOLICY", queue, "SET", "MAXLEN", 1000) == b"OK"
            wait_for(lambda queue=queue: b"maxlen" in (
                on_a.execute_command("QPOLICY", queue, "GET") or []), 5,
                message="B's policy on A")
            job_id = on_a.execute_command("ADDJOB", queue, "body", 0, "REPLICATE", 1)
            assert_stays(lambda queue=queue: (
                on_a.execute_command("QLEN", queue), on_b.execute_command("QLEN", queue))
                == (1, 0), 0.2, f"round {round_no}: the job stays on A")
            assert on_a.execute_command("DELJOB", job_id) == 1
    finally:
        on_a.close()
        on_b.close()


def test_consumers_on_two_nodes_drain_a_producer_on_a_third(make_cluster):
    """Every job produced on A is delivered exactly once to consumers on B and C."""
    a, b, c = make_cluster(3)
    total = 200
    ids = {call(a, "ADDJOB", "work", f"job-{i}", 0, "REPLICATE", 1, "RETRY", 60)
           for i in range(total)}
    seen: list[bytes] = []
    lock = threading.Lock()

    def consume(node) -> None:
        while True:
            reply = call(node, "GETJOB", "TIMEOUT", 1000, "COUNT", 10, "FROM", "work")
            if reply is None:
                return
            for _, job_id, _ in reply:
                assert call(node, "ACKJOB", job_id) == 1
                with lock:
                    seen.append(job_id)

    workers = [threading.Thread(target=consume, args=(n,)) for n in (b, c)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(60)
    assert len(seen) == total and set(seen) == ids  # all of them, none twice
    wait_for(lambda: all(call(n, "INFO", "jobs").split(b"registered_jobs:")[1].strip()
                         == b"0" for n in (a, b, c)), message="no job left anywhere")


def test_at_most_once_job_moves_without_a_copy_left_behind(make_cluster):
    """A RETRY 0 job taken by federation leaves its exporter entirely."""
    a, b, _ = make_cluster(3)
    job_id = call(a, "ADDJOB", "once", "body", 0, "REPLICATE", 1, "RETRY", 0)
    assert call(b, "GETJOB", "TIMEOUT", 3000, "FROM", "once") == [[b"once", job_id, b"body"]]
    assert show_state(a, job_id) is None
    assert show_state(b, job_id) == b"active"


def test_leaving_node_replicates_externally(make_cluster):
    """CLUSTER LEAVING yes: ADDJOB keeps no copy on the leaving node but puts it on
    REPLICATE other nodes, one of which queues it; GETJOB with nothing to serve answers
    -LEAVING; peers see priority 100; too few other nodes gives Disque's NOREPL text."""
    nodes = make_cluster(4)
    a, others = nodes[0], nodes[1:]
    assert call(a, "CLUSTER", "LEAVING", "yes") == b"OK"
    wait_for(lambda: all(b"leaving" in call(n, "CLUSTER", "NODES") for n in others),
             message="the others to see a leaving")
    for args in ((), ("ASYNC",)):
        job_id = call(a, "ADDJOB", "lq", "work", 5000, "REPLICATE", 3, *args)
        assert show_state(a, job_id) is None
        wait_for(lambda j=job_id: sorted(show_state(n, j) or b"-" for n in others)
                 == [b"active", b"active", b"queued"], message="3 copies, one queued")
    assert b"registered_jobs:0" in call(a, "INFO", "jobs")
    assert call(a, "GETJOB", "NOHANG", "FROM", "nothing-here") is None
    with pytest.raises(redis.ResponseError, match="^LEAVING This node is leaving the cluster"):
        call(a, "GETJOB", "FROM", "nothing-here")  # would block: refused instead
    hello = call(others[0], "HELLO")
    assert [e[3] for e in hello[2:] if e[0] == myid(a).encode()] == [b"100"]
    with pytest.raises(redis.ResponseError, match="unable to hold a copy of the message for "
                       "the following reason: I'm leaving the cluster$"):
        call(a, "ADDJOB", "lq", "work", 5000, "REPLICATE", 4)


def used_memory(node) -> int:
    info = call(node, "INFO", "memory").decode()
    return int(info.split("used_memory:")[1].split("\r\n")[0])


@pytest.mark.parametrize("policy", ["acks", "noeviction"])
def test_above_95_percent_evicts_what_may_go_else_oom(start_node, policy):
    """Above 95% of maxmemory, ADDJOB/ENQUEUE/NACK first evict (policy `acks`) the jobs
    that may go: acked ones and at-most-once jobs already delivered; if that is not
    enough, or with `noeviction`, they fail with -OOM. Queued jobs are never evicted."""
    node = start_node("--maxmemory-policy", policy)
    body = "x" * 4000
    maxmemory = int((used_memory(node) + 4 * 1024 * 1024) / 0.95)
    assert call(node, "CONFIG", "SET", "maxmemory", maxmemory) == b"OK"
    added = 0
    # redis-py turns -OOM into OutOfMemoryError, the code dropped from the message
    with pytest.raises(redis.exceptions.OutOfMemoryError,
                       match="^command not allowed when used memory > 'maxmemory'.$"):
        for _ in range(20_000):  # ~1000 jobs fill the 4 MiB
            call(node, "ADDJOB", "mq", body, 0, "RETRY", 0)
            added += 1
    assert 500 < added < 2000
    assert call(node, "QLEN", "mq") == added  # nothing queued was lost
    delivered = [entry[1] for entry in call(node, "GETJOB", "COUNT", 200, "FROM", "mq")]
    assert call(node, "PING") == b"PONG"  # other commands are not refused
    if policy == "noeviction":
        with pytest.raises(redis.exceptions.OutOfMemoryError):
            call(node, "ADDJOB", "mq", body, 0, "RETRY", 0)
        assert all(call(node, "SHOW", job_id) for job_id in delivered)
        return
    for _ in range(100):  # each ADDJOB makes room by evicting delivered RETRY 0 jobs
        call(node, "ADDJOB", "mq", body, 0, "RETRY", 0)
    assert call(node, "QLEN", "mq") == added - 200 + 100
    evicted = [job_id for job_id in delivered if call(node, "SHOW", job_id) is None]
    assert len(evicted) >= 90
    with pytest.raises(redis.exceptions.OutOfMemoryError):  # queued jobs stay: full
        for _ in range(200):
            call(node, "ADDJOB", "mq", body, 0, "RETRY", 0)


def test_memory_pressure_replicates_externally_and_collects_queues(make_cluster):
    """Above 75% of maxmemory a node keeps no new copy (ADDJOB replicates externally,
    REPLJOB is refused); above 95% empty idle queues go after 2 s (Disque's levels).
    INFO used_memory follows the jobs held, so the node recovers when they go."""
    a, b, c = make_cluster(3)
    level_1 = int(used_memory(a) / 0.85)  # used memory at 85% of maxmemory
    assert call(a, "CONFIG", "SET", "maxmemory", level_1) == b"OK"
    job_id = call(a, "ADDJOB", "mq", "body", 5000, "REPLICATE", 2)
    assert show_state(a, job_id) is None
    assert sorted(show_state(n, job_id) or b"-" for n in (b, c)) == [b"active", b"queued"]
    with pytest.raises(redis.ResponseError, match="reason: I'm out of memory$"):
        call(a, "ADDJOB", "mq", "body", 5000, "REPLICATE", 3)
    with pytest.raises(redis.ResponseError, match="^NOREPL Timeout reached"):
        call(b, "ADDJOB", "mq", "body", 300, "REPLICATE", 3)  # a refuses the copy
    assert call(a, "CONFIG", "SET", "maxmemory", 1) == b"OK"  # level 2, as Disque's test
    for i in range(20):  # empty idle queues on a: collected in about 2 s
        call(a, "GETJOB", "NOHANG", "FROM", f"idle-{i}")
    wait_for(lambda: b"registered_queues:0" in call(a, "INFO", "queues"), timeout=10,
             message="idle queues collected under memory pressure")
    assert call(a, "CONFIG", "SET", "maxmemory", "1gb") == b"OK"
    assert show_state(a, call(a, "ADDJOB", "mq", "again", 5000, "REPLICATE", 3)) == b"queued"


def test_queue_randomly_queues_the_job_on_another_node(make_cluster):
    """ADDJOB ... QUEUE-RANDOMLY (a later Disque option, its test 14-queue-randomly):
    the job is replicated to REPLICATE other nodes, one of them queues it, the node it
    was added on keeps no copy. On a single node it is simply queued there."""
    nodes = make_cluster(4)
    a = nodes[0]
    job_id = call(a, "ADDJOB", "rq", "body", 5000, "REPLICATE", 3, "QUEUE-RANDOMLY")
    assert call(a, "QLEN", "rq") == 0 and show_state(a, job_id) is None
    wait_for(lambda: sorted(show_state(n, job_id) or b"-" for n in nodes[1:]) == [
        b"active", b"active", b"queued"], message="queued on one of the three others")
    with pytest.raises(redis.ResponseError, match="^NOREPL Not enough reachable nodes"):
        call(a, "ADDJOB", "rq", "body", 5000, "REPLICATE", 4, "QUEUE-RANDOMLY")


def test_queue_randomly_on_a_single_node(start_node):
    node = start_node()
    job_id = call(node, "ADDJOB", "rq", "body", 0, "QUEUE-RANDOMLY")
    assert show_state(node, job_id) == b"queued"


def test_globalqlen_counts_the_queue_on_every_node(make_cluster):
    """GLOBALQLEN queue (a later Disque command, its test 13-globallqlen): the jobs
    queued in the whole cluster, whichever node is asked; a node that cannot be
    reached counts for nothing instead of blocking the answer."""
    nodes = make_cluster(3)
    assert [call(n, "GLOBALQLEN", "gq") for n in nodes] == [0, 0, 0]
    ids = [call(nodes[i % 3], "ADDJOB", "gq", f"job{i}", 5000, "REPLICATE", 2, "RETRY", 60)
           for i in range(10)]
    assert [call(n, "GLOBALQLEN", "gq") for n in nodes] == [10, 10, 10]
    assert sum(call(n, "QLEN", "gq") for n in nodes) == 10
    for i in range(4):  # jobs 0-3 were queued on nodes 0, 1, 2, 0
        assert call(nodes[i % 3], "GETJOB", "NOHANG", "FROM", "gq")[0][1] in ids
    assert call(nodes[1], "GLOBALQLEN", "gq") == 6
    nodes[2].kill()
    live = call(nodes[0], "QLEN", "gq") + call(nodes[1], "QLEN", "gq")
    started = time.monotonic()
    assert call(nodes[0], "GLOBALQLEN", "gq") == live  # the dead node's share is gone
    assert time.monotonic() - started < 3  # at most the 1 s wait for a silent node
    with pytest.raises(redis.ResponseError, match="wrong number of arguments"):
        call(nodes[0], "GLOBALQLEN")


def test_globalqlen_on_a_single_node_is_qlen(start_node):
    node = start_node()
    call(node, "ADDJOB", "gq", "x", 0)
    assert call(node, "GLOBALQLEN", "gq") == 1 == call(node, "QLEN", "gq")


@pytest.mark.parametrize("nack", [(), ("DELAY-MS", 200)], ids=["plain", "delay-ms"])
def test_a_nacked_job_reaches_a_consumer_blocked_on_another_node(make_cluster, nack):
    """A job NACKed on a node where nobody waits goes to a node whose consumer waits,
    pushed as a new job is: also from a node that imported the job (which answers no
    NEEDJOBS for the 5 s it counts its imports: it left the job there until then, and
    the consumer got it ~5.2 s after the NACK). Delivered while `a` still counts that
    import, so by the push, not by an ask after the 5 s; RETRY 60 rules out a requeue."""
    a, b, c = make_cluster(3)
    job_id = call(c, "ADDJOB", "nq", "body", 0, "REPLICATE", 1, "RETRY", 60)
    assert call(a, "GETJOB", "TIMEOUT", 5000, "FROM", "nq") == [[b"nq", job_id, b"body"]]
    imported = time.monotonic()
    assert pairs(call(a, "QSTAT", "nq"))[b"import-rate"] >= 1
    consumer, got = blocked_consumer(b, "nq", timeout_ms=20_000)
    assert call(a, "NACK", *nack, job_id) == 1
    consumer.join(25)
    assert got == [[[b"nq", job_id, b"body"]]]
    assert time.monotonic() - imported < 5.0, "delivered only once a stopped importing"
    assert call(b, "ACKJOB", job_id) == 1


def test_a_consumer_gets_the_most_urgent_job_of_its_node_and_its_peers(make_cluster):
    """Priorities hold across nodes: a consumer on `a` gets b's PRIORITY 0 jobs before
    a's own PRIORITY 200 ones (b told a its best priority: QBEST; a asks b for the
    jobs more urgent than its own and holds its consumer for them); then a's, and a
    NOHANG GETJOB is never held. GLOBALQLEN from a is a barrier: b's answer comes
    on the link after b's QBEST."""
    a, b = make_cluster(2)
    for i in range(3):
        call(b, "ADDJOB", "pq", f"urgent-{i}", 0, "PRIORITY", 0, "REPLICATE", 1)
    for i in range(20):
        call(a, "ADDJOB", "pq", f"later-{i}", 0, "PRIORITY", 200, "REPLICATE", 1)
    assert call(a, "GLOBALQLEN", "pq") == 23
    bodies = []
    for _ in range(23):
        [[_, job_id, body]] = call(a, "GETJOB", "TIMEOUT", 3000, "FROM", "pq")
        bodies.append(body.decode())
        assert call(a, "ACKJOB", job_id) == 1
    assert bodies[:3] == [f"urgent-{i}" for i in range(3)]
    assert sorted(bodies[3:]) == sorted(f"later-{i}" for i in range(20))
    # a NOHANG GETJOB takes this node's job at once, whatever the peers hold
    call(b, "ADDJOB", "pq", "urgent-b", 0, "PRIORITY", 0, "REPLICATE", 1)
    later = call(a, "ADDJOB", "pq", "later-a", 0, "PRIORITY", 200, "REPLICATE", 1)
    assert call(a, "GLOBALQLEN", "pq") == 2
    assert call(a, "GETJOB", "NOHANG", "FROM", "pq") == [[b"pq", later, b"later-a"]]
