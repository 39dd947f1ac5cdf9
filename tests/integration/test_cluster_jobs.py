"""Jobs across a cluster of real processes: synchronous and asynchronous replication
(REPLJOB / GOTJOB), its failures (NOREPL), requeue by the other holders when the origin
dies, ACK garbage collection (SETACK / GOTACK / DELJOB), FASTACK, WORKING, NACK and
their counters, PAUSE ... BCAST, pipelined replicated ADDJOBs and a client that leaves
while its ADDJOB waits.

Modelled on Disque's own cluster units 02-jobs-replication, 03-jobs-queueing, 04-ttl,
05-acks, 11-waiting-nack and 12-nack-and-counters: jobs are looked for with SHOW on every
node, and every condition is polled, as job-utils.tcl does. A node that must not answer
REPLJOB is made so with `PAUSE <queue> in` on that node only (a paused queue ignores
REPLJOB), which keeps the node reachable: that is how a waiting ADDJOB is produced
without stopping processes.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from jobutil import ID_RE, NULL_ARRAY, Error, RawClient, Status
from support import (
    NODE_TIMEOUT,
    DisqProcess,
    assert_stays,
    bus_variants,
    cluster_nodes,
    form_cluster,
    meet,
    myid,
    wait_for,
    wait_formed,
)

from disq.replication.requeue import sender_wins

# Every test here that forms its cluster with make_cluster runs on an open bus and on
# one with cluster-secret (its handshake and frame tags on every link).
bus_args = bus_variants

NOREPL_REACH = "NOREPL Not enough reachable nodes for the requested replication level"
NOREPL_TIMEOUT = ("NOREPL Timeout reached before replicating to the requested number of "
                  "nodes")
NOREPL_EXPIRED = ("NOREPL job removed (expired?) before the requested replication level "
                  "was achieved")
RETRY0 = ("ERR With RETRY set to 0 please explicitly set  REPLICATE to 1 (at-most-once "
          "delivery)")
PAUSED = "PAUSED Queue paused in input, try later"
SLACK = 1.0  # s: how late a reply due at a given time may be on a loaded machine


class Member:
    """One node of the cluster with a connection kept open for polling."""

    def __init__(self, proc: DisqProcess) -> None:
        self.proc = proc
        self.id = myid(proc)
        self.c = RawClient(proc.port)

    def __repr__(self) -> str:
        return f"<node {self.id[:8]} port {self.proc.port}>"

    def call(self, *args: Any) -> Any:
        return self.c.call(*args)

    def add(self, queue: str, body: str, timeout: int, *options: Any) -> bytes:
        reply = self.call("ADDJOB", queue, body, timeout, *options)
        assert isinstance(reply, Status) and ID_RE.match(reply), reply
        assert reply[2:10] == self.id[:8].encode()  # created here
        return bytes(reply)

    def error(self, *args: Any) -> str:
        reply = self.call(*args)
        assert isinstance(reply, Error), f"{args!r} replied {reply!r}"
        return reply.decode()

    def show(self, job_id: bytes) -> dict[str, Any] | None:
        return self.c.show(job_id)

    def state(self, job_id: bytes) -> str | None:
        job = self.show(job_id)
        return None if job is None else job["state"].decode()

    def registered(self) -> int:
        return int(self.c.info_field("registered_jobs"))

    def jobs_in(self, queue: str) -> list[bytes]:
        cursor, ids = self.call("JSCAN", 0, "BUSYLOOP", "QUEUE", queue)
        assert cursor == b"0"
        return [bytes(i) for i in ids]

    def restart(self) -> None:
        self.c.close()
        self.proc.start()
        self.c = RawClient(self.proc.port)
        assert myid(self.proc) == self.id

    def close(self) -> None:
        self.c.close()


@pytest.fixture
def cluster(make_cluster) -> Iterator[Callable[..., list[Member]]]:
    """cluster(n, timeout=NODE_TIMEOUT): a formed cluster of n nodes, as Members."""
    opened: list[Member] = []

    def make(n: int, timeout: int = NODE_TIMEOUT) -> list[Member]:
        members = [Member(p) for p in make_cluster(n, timeout=timeout)]
        opened.extend(members)
        return members

    yield make
    for member in opened:
        member.close()


# -- looking for a job on every node --------------------------------------------------------
def states(nodes: list[Member], job_id: bytes) -> list[str | None]:
    return [n.state(job_id) for n in nodes]


def queued_on(nodes: list[Member], job_id: bytes) -> list[Member]:
    return [n for n in nodes if n.state(job_id) == "queued"]


def holders(nodes: list[Member], job_id: bytes) -> list[Member]:
    return [n for n in nodes if n.show(job_id) is not None]


def wait_gone(nodes: list[Member], job_id: bytes, timeout: float = 10.0) -> None:
    try:
        wait_for(lambda: not holders(nodes, job_id), timeout, 0.02,
                 f"{job_id!r} to disappear from every node")
    except AssertionError as exc:
        left = {n: n.state(job_id) for n in holders(nodes, job_id)}
        raise AssertionError(f"{exc}; still there: {left}") from None


def wait_stable(value: Callable[[], Any], ok: Callable[[Any], bool], hold: float,
                timeout: float = 15.0, message: str = "a stable state") -> Any:
    """Poll `value()` until it returned the same value, accepted by `ok`, for `hold`
    seconds in a row (one look is not enough while copies race to requeue)."""
    deadline = time.monotonic() + timeout
    last: Any = object()
    since = 0.0
    while True:
        current = value()
        now = time.monotonic()
        if current != last or not ok(current):
            last, since = current, now
        elif now - since >= hold:
            return current
        if now > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {message}; "
                                 f"last value {current!r}")
        time.sleep(0.02)


def one_queued(nodes: list[Member], job_id: bytes, hold: float = 1.0) -> Member:
    """The node that holds the job queued, once exactly one does and that lasts."""
    def where() -> list[int]:
        return [i for i, n in enumerate(nodes) if n.state(job_id) == "queued"]
    found = wait_stable(where, lambda q: len(q) == 1, hold,
                        message=f"exactly one queued copy of {job_id!r}")
    return nodes[found[0]]


def timed(fn: Callable[..., Any], *args: Any) -> tuple[Any, float]:
    start = time.monotonic()
    result = fn(*args)
    return result, time.monotonic() - start


def counters(entry: list) -> tuple[int, int]:
    """(nacks, additional-deliveries) of a GETJOB WITHCOUNTERS entry."""
    assert len(entry) == 7 and entry[3] == b"nacks" and entry[5] == b"additional-deliveries"
    return entry[4], entry[6]


# -- synchronous and asynchronous replication -------------------------------------------------
def test_replicate_3_on_3_nodes_and_defaults(start_node):
    """02-jobs-replication: the ID comes once 3 copies exist; the origin queues it, the
    others keep it active; REPLICATE defaults to min(3, cluster size)."""
    procs = [start_node("--cluster-node-timeout", str(NODE_TIMEOUT)) for _ in range(3)]

    a, b, c = members = [Member(p) for p in procs]
    try:
        # two nodes first: default REPLICATE is 2
        form_cluster(procs[:2])
        job = a.add("q2", "two", 5000)
        shown = a.show(job)
        assert shown["repl"] == 2 and shown["state"] == b"queued"
        assert sorted(shown["nodes-delivered"]) == sorted([a.id.encode(), b.id.encode()])
        assert b.state(job) == "active"
        assert a.error("ADDJOB", "q2", "x", 5000, "REPLICATE", 3) == NOREPL_REACH
        assert a.call("FASTACK", job) == 1
        wait_gone([a, b], job)

        # the third node joins: default REPLICATE is 3
        meet(procs[0], procs[2])
        wait_formed(procs)
        nodes = [a, b, c]
        all_ids = sorted(n.id.encode() for n in nodes)

        job = a.add("q", "body", 5000, "REPLICATE", 3, "RETRY", 10)
        shown = a.show(job)
        assert shown["state"] == b"queued" and shown["repl"] == 3
        assert sorted(shown["nodes-delivered"]) == all_ids  # 3 copies before the reply
        assert shown["nodes-confirmed"] == []
        for other in (b, c):
            copy = other.show(job)
            assert copy is not None, f"no copy on {other} when ADDJOB replied"
            assert copy["state"] == b"active"
            assert sorted(copy["nodes-delivered"]) == all_ids
            for field in ("queue", "body", "repl", "retry", "ctime", "delay", "nacks",
                          "additional-deliveries"):
                assert copy[field] == shown[field], field
            assert abs(copy["ttl"] - shown["ttl"]) <= 1
            assert copy["next-requeue-within"] > 8000  # requeued only after RETRY
        assert [n.call("QLEN", "q") for n in nodes] == [1, 0, 0]
        assert states(nodes, job) == ["queued", "active", "active"]

        job = a.add("q", "default", 5000)
        assert a.show(job)["repl"] == 3
        assert len(holders(nodes, job)) == 3

        registered = [n.registered() for n in nodes]
        assert a.error("ADDJOB", "q", "x", 5000, "REPLICATE", 100) == NOREPL_REACH
        assert a.error("ADDJOB", "q", "x", 5000, "REPLICATE", 4) == NOREPL_REACH
        assert a.error("ADDJOB", "q", "x", 5000, "RETRY", 0) == RETRY0
        assert a.error("ADDJOB", "q", "x", 5000, "REPLICATE", 2, "RETRY", 0) == RETRY0
        assert [n.registered() for n in nodes] == registered  # nothing created
        at_most_once = a.add("q", "once", 5000, "REPLICATE", 1, "RETRY", 0)
        assert holders(nodes, at_most_once) == [a]

        # ASYNC: the ID at once, the job queued already, the copies come later
        job = a.add("q", "async", 5000, "REPLICATE", 3, "ASYNC")
        shown = a.show(job)
        assert shown["state"] == b"queued"
        assert sorted(shown["nodes-delivered"]) == all_ids
        wait_for(lambda: states(nodes, job) == ["queued", "active", "active"], 5, 0.02,
                 "the asynchronous copies")
    finally:
        for member in members:
            member.close()


def test_peer_that_never_confirms_times_out_and_leaves_no_copy(cluster):
    """A peer that ignores REPLJOB (its queue paused in input) keeps the ADDJOB waiting:
    -NOREPL Timeout after the ADDJOB timeout, and the copy the other peer took is
    deleted (DELJOB). A job whose TTL ends first gets the `expired?` NOREPL."""
    a, b, c = nodes = cluster(3)
    assert c.call("PAUSE", "q", "in") == b"in"  # c only, no BCAST
    waiting = RawClient(a.proc.port)
    try:
        start = time.monotonic()
        waiting.send("ADDJOB", "q", "body", 1500, "REPLICATE", 3)
        # meanwhile: b confirmed its copy, the job waits on a
        job = wait_for(lambda: b.jobs_in("q"), 5, 0.01, "b's copy")[0]
        assert a.state(job) == "wait-repl" and b.state(job) == "active"
        assert c.show(job) is None and a.call("QLEN", "q") == 0
        shown = a.show(job)
        assert a.id.encode() in shown["nodes-confirmed"]
        assert b.id.encode() in shown["nodes-confirmed"]
        reply = waiting.read()
        elapsed = time.monotonic() - start
        assert reply == NOREPL_TIMEOUT.encode() and isinstance(reply, Error)
        assert 1.4 <= elapsed <= 1.5 + SLACK, elapsed
    finally:
        waiting.close()
    wait_gone(nodes, job)
    for node in nodes:
        wait_for(lambda node=node: node.registered() == 0, 5, 0.02, "no job left")

    # TTL 1 s, ADDJOB timeout 15 s: the job expires while waiting
    reply, elapsed = timed(a.call, "ADDJOB", "q", "short", 15000, "REPLICATE", 3, "TTL", 1)
    assert reply == NOREPL_EXPIRED.encode() and isinstance(reply, Error)
    assert elapsed <= 1 + SLACK, elapsed  # whole-second expiry, as Disque: 0 to 1 s
    for node in nodes:
        wait_for(lambda node=node: node.registered() == 0, 5, 0.02, "no job left")


def test_stopped_peer_gives_norepl(cluster):
    """REPLICATE 3 on 3 nodes with one stopped: NOREPL, bounded by the ADDJOB timeout,
    no copy left. Right after the stop Disque still counts the node as reachable (it
    is not PFAIL yet), so the error is the Timeout one; disq may already see the link
    down and say `Not enough reachable nodes`: both are accepted here. Once the node
    is PFAIL both say `Not enough reachable nodes`, at once. REPLICATE 2 still works."""
    a, b, c = cluster(3)
    assert c.proc.stop() == 0  # SIGTERM
    c.close()
    reply, elapsed = timed(a.call, "ADDJOB", "q", "body", 500, "REPLICATE", 3)
    assert isinstance(reply, Error) and reply.decode() in (NOREPL_TIMEOUT, NOREPL_REACH)
    assert elapsed <= 0.5 + SLACK, elapsed
    for node in (a, b):
        wait_for(lambda node=node: node.registered() == 0, 5, 0.02, "no job left")

    wait_for(lambda: cluster_nodes(a.proc)[c.id].flags in (("fail?",), ("fail",)), 10, 0.05,
             "a to flag the stopped node")
    reply, elapsed = timed(a.call, "ADDJOB", "q", "body", 5000, "REPLICATE", 3)
    assert reply == NOREPL_REACH.encode() and isinstance(reply, Error)
    assert elapsed < 0.5, elapsed
    assert a.registered() == 0 and b.registered() == 0
    job = a.add("q", "body", 5000, "REPLICATE", 2)
    assert states([a, b], job) == ["queued", "active"]


def test_replicate_4_of_5_tries_other_nodes(cluster):
    """REPLICATE 4 on 5 nodes still succeeds when a peer does not confirm (its queue
    paused in input: one more node is tried every 50 ms) and when one node is down."""
    nodes = cluster(5)
    a, b, c, d, e = nodes
    assert d.call("PAUSE", "q", "in") == b"in"
    tried_d = 0
    for i in range(8):
        job = a.add("q", f"job-{i}", 5000, "REPLICATE", 4)
        shown = a.show(job)
        delivered = set(shown["nodes-delivered"])
        if d.id.encode() in delivered:
            tried_d += 1
            assert len(delivered) == 5  # d, and one more node instead
        assert d.show(job) is None
        assert states(nodes, job).count("active") == 3 and shown["state"] == b"queued"
    assert tried_d > 0  # 8 draws of 3 targets among 4 peers, each 3/4 likely to pick d
    assert d.call("PAUSE", "q", "none") == b"none"

    e.proc.kill()
    e.close()
    live = nodes[:4]
    job = a.add("q", "one down", 5000, "REPLICATE", 4)
    assert states(live, job) == ["queued", "active", "active", "active"]
    assert a.error("ADDJOB", "q", "x", 500, "REPLICATE", 5) in (NOREPL_TIMEOUT, NOREPL_REACH)


def test_waiting_addjob_completes_when_killed_peer_restarts(cluster):
    """02-jobs-replication: kill a node, ADDJOB REPLICATE <all nodes> with a long
    timeout, restart the node: the ADDJOB succeeds (REPLJOB is sent again until it
    confirms). The killed node is not PFAIL yet (node timeout 3 s, as in Disque's
    suite), so it still counts as reachable."""
    a, b, c = cluster(3, timeout=3000)
    c.proc.kill()
    c.close()
    waiting = RawClient(a.proc.port)
    try:
        waiting.send("ADDJOB", "q", "body", 30000, "REPLICATE", 3)
        c.restart()
        reply = waiting.read()
        assert isinstance(reply, Status) and ID_RE.match(reply), reply
        assert states([a, b, c], bytes(reply)) == ["queued", "active", "active"]
    finally:
        waiting.close()


# -- requeue -------------------------------------------------------------------------------
def test_killed_origin_job_is_requeued_elsewhere(cluster):
    """03-jobs-queueing: kill -9 the node the job was added on; another holder requeues
    it after RETRY and GETJOB there returns it, its requeue counted."""
    nodes = cluster(3)
    a, b, c = nodes
    start = time.monotonic()
    job = a.add("q", "payload", 5000, "REPLICATE", 3, "RETRY", 1)
    a.proc.kill()
    a.close()
    survivors = [b, c]
    assert states(survivors, job) == ["active", "active"]
    node = one_queued(survivors, job, hold=0.5)
    assert time.monotonic() - start >= 0.7  # RETRY 1 s, minus the +/-250 ms spread
    reply = node.call("GETJOB", "NOHANG", "WITHCOUNTERS", "FROM", "q")
    assert len(reply) == 1
    queue, got, body = reply[0][:3]
    assert (queue, got, body) == (b"q", job, b"payload")
    nacks, deliveries = counters(reply[0])
    assert nacks == 0 and deliveries >= 1
    other = c if node is b else b
    wait_for(lambda: other.show(job)["additional-deliveries"] >= 1, 5, 0.02,
             "the requeue counted on the other holder")
    assert other.call("ACKJOB", job) == 1
    # the GC cannot confirm with the dead origin: the copies stay acked, never requeued
    wait_for(lambda: states(survivors, job) == ["acked", "acked"], 5, 0.02, "acked copies")


def test_requeue_counters_working_and_nack(cluster):
    """03/11/12: a job taken and not acked comes back after RETRY on exactly one node,
    additional-deliveries counted on every holder; NACK puts it back at once, nacks
    counted everywhere; WORKING returns RETRY and postpones the requeue on the other
    holders too."""
    nodes = cluster(3)
    a, b, c = nodes
    job = a.add("q", "work", 5000, "REPLICATE", 3, "RETRY", 1)
    reply = a.call("GETJOB", "NOHANG", "WITHCOUNTERS", "FROM", "q")
    assert reply[0][1] == job and counters(reply[0]) == (0, 0)
    assert states(nodes, job) == ["active", "active", "active"]

    node = one_queued(nodes, job)  # requeued after RETRY, one queued copy, stable
    wait_for(lambda: all(n.show(job)["additional-deliveries"] >= 1 for n in nodes), 5, 0.02,
             "additional-deliveries on every holder")
    reply = node.call("GETJOB", "NOHANG", "WITHCOUNTERS", "FROM", "q")
    assert reply[0][1] == job
    nacks, deliveries = counters(reply[0])
    assert nacks == 0 and deliveries >= 1

    assert node.call("NACK", job) == 1
    assert node.state(job) == "queued"
    wait_for(lambda: all(n.show(job)["nacks"] == 1 for n in nodes), 5, 0.02,
             "nacks counted on every holder")
    assert [n for n in nodes if n.state(job) == "queued"] == [node]
    reply = node.call("GETJOB", "NOHANG", "WITHCOUNTERS", "FROM", "q")
    assert reply[0][1] == job and counters(reply[0])[0] == 1
    assert node.call("ACKJOB", job) == 1
    wait_gone(nodes, job)

    # WORKING: RETRY 2; the origin takes the job and keeps saying it works on it
    job = a.add("q", "long work", 5000, "REPLICATE", 3, "RETRY", 2)
    assert a.call("GETJOB", "NOHANG", "FROM", "q")[0][1] == job
    before = b.show(job)["next-requeue-within"]  # about 2000 +/- 250
    wait_for(lambda: b.show(job)["next-requeue-within"] < before - 1200, 5, 0.02,
             "1.2 s to pass")
    lowered = b.show(job)["next-requeue-within"]
    assert a.call("WORKING", job) == 2
    wait_for(lambda: b.show(job)["next-requeue-within"] > lowered + 500, 5, 0.02,
             "WORKING to postpone the requeue on b")
    wait_for(lambda: c.show(job)["next-requeue-within"] > 1500, 5, 0.02,
             "WORKING to postpone the requeue on c")
    assert b.call("WORKING", job) == 2  # from a replica too
    # 3 x 1 s > RETRY: without the WORKINGs the job would be queued again by now
    for _ in range(3):
        assert_stays(lambda: not queued_on(nodes, job), 1.0, "requeued despite WORKING")
        assert a.call("WORKING", job) == 2
    assert a.call("ACKJOB", job) == 1
    wait_gone(nodes, job)


def test_unconsumed_job_stays_queued_on_origin_only_and_ttl_ends_everywhere(cluster):
    """03-jobs-queueing: nobody takes a RETRY 1 job: the other holders' requeue attempts
    (WILLQUEUE) are answered by the origin (QUEUED), so the origin's stays the only
    queued copy. 04-ttl: a TTL 2 job disappears from every node when its TTL ends."""
    nodes = cluster(3)
    a = nodes[0]
    start = time.monotonic()
    job = a.add("q", "idle", 5000, "REPLICATE", 3, "RETRY", 1)
    short = a.add("q", "short", 5000, "REPLICATE", 3, "TTL", 2)
    assert states(nodes, short) == ["queued", "active", "active"]
    assert all(n.show(short)["ttl"] <= 2 for n in nodes)
    gone_at = None
    while time.monotonic() - start < 3.0:  # 3 requeue attempts by each replica
        assert states(nodes, job) == ["queued", "active", "active"]
        if gone_at is None and not holders(nodes, short):
            gone_at = time.monotonic() - start
        time.sleep(0.05)
    # whole-second expiry, as Disque: a TTL 2 job lives between 1 and 2 seconds
    assert gone_at is not None and 0.9 <= gone_at <= 3.0, gone_at
    assert all(n.show(job)["additional-deliveries"] == 0 for n in nodes)
    assert a.call("QLEN", "q") == 1


def test_concurrent_queued_copies_leave_one(cluster):
    """Two holders with the job queued at once (ENQUEUE on a replica while the origin
    has it queued): on the replica's QUEUED the origin dequeues its copy when the
    replica wins the per-job node order (Disque's compareNodeIDsByJob), so one copy
    stays queued. The other holder postpones its requeue and counts the delivery."""
    nodes = cluster(3)
    a = nodes[0]
    for attempt in range(20):  # a job for which a replica beats the origin (2 in 3)
        job = a.add("q", f"race-{attempt}", 5000, "REPLICATE", 3, "RETRY", 5)
        winners = [n for n in nodes[1:] if sender_wins(n.id, a.id, job)]
        if winners:
            break
        assert a.call("FASTACK", job) == 1
    winner = winners[0]
    bystander = next(n for n in nodes[1:] if n is not winner)
    assert states(nodes, job).count("queued") == 1 and a.state(job) == "queued"
    assert winner.call("ENQUEUE", job) == 1
    assert one_queued(nodes, job, hold=0.5) is winner
    wait_for(lambda: all(n.show(job)["additional-deliveries"] == 1 for n in nodes), 5,
             0.02, "the ENQUEUE counted as a delivery on every holder")
    assert bystander.show(job)["next-requeue-within"] > 4000
    assert a.call("FASTACK", job) == 1
    wait_gone(nodes, job)


# -- ACKs ------------------------------------------------------------------------------------
def test_acks_delete_every_copy(cluster):
    """05-acks: ACKJOB on the origin, on another holder, on a node that never saw the job
    (dummy ACK); FASTACK on the origin, a holder, a stranger: every copy disappears, in
    the first GC round (GC retries only start 1 s later), and an acked job is never
    requeued."""
    nodes = cluster(5)
    gc_round = 0.5  # s: a few bus messages on loopback take milliseconds
    a = nodes[0]

    def new_job(body: str) -> tuple[bytes, list[Member], list[Member]]:
        job = a.add("q", body, 5000, "REPLICATE", 3, "RETRY", 1)
        have = holders(nodes, job)
        assert len(have) == 3 and a in have
        return job, [n for n in have if n is not a], [n for n in nodes if n not in have]

    done = []
    for command in ("ACKJOB", "FASTACK"):
        job, others, strangers = new_job(f"{command} on the origin")
        assert a.call(command, job) == 1
        wait_gone(nodes, job, gc_round)
        done.append(job)

        job, others, strangers = new_job(f"{command} on a holder")
        assert others[0].call(command, job) == 1
        wait_gone(nodes, job, gc_round)
        done.append(job)

        job, others, strangers = new_job(f"{command} on a stranger")
        assert strangers[0].call(command, job) == 0  # not known there
        wait_gone(nodes, job, gc_round)  # the dummy ACK included
        done.append(job)

    # RETRY 1: a copy that survived anywhere would be queued again by now
    assert_stays(lambda: all(not holders(nodes, j) for j in done), 2.0,
                 "an acked job came back")
    for node in nodes:
        assert node.call("QLEN", "q") == 0
        assert node.registered() == 0


def test_ack_waits_for_a_dead_holder(cluster):
    """05-acks: with the origin down, an ACK on another holder marks every live copy
    acked but cannot collect them; once the origin is back, they all go."""
    nodes = cluster(3)
    a, b, c = nodes
    job = a.add("q", "body", 5000, "REPLICATE", 3, "RETRY", 1)
    a.proc.kill()
    a.close()
    assert b.call("ACKJOB", job) == 1
    wait_for(lambda: states([b, c], job) == ["acked", "acked"], 5, 0.02, "acked copies")
    assert_stays(lambda: states([b, c], job) == ["acked", "acked"], 1.5,
                 "acked copies collected while a holder is down")
    a.restart()
    wait_gone(nodes, job, timeout=15)


# -- PAUSE BCAST -------------------------------------------------------------------------------
def test_pause_bcast_reaches_every_node(cluster):
    nodes = cluster(3)
    a, b, c = nodes

    def pause_everywhere(state: bytes) -> bool:
        return all(n.c.qstat("q")["pause"] == state for n in nodes)

    assert a.call("PAUSE", "q", "in", "bcast") == b"in"
    wait_for(lambda: pause_everywhere(b"in"), 5, 0.02, "pause in on every node")
    for node in nodes:
        assert node.error("ADDJOB", "q", "x", 5000) == PAUSED
    assert a.call("PAUSE", "q", "all", "bcast") == b"all"
    wait_for(lambda: pause_everywhere(b"all"), 5, 0.02, "pause all on every node")
    assert c.call("PAUSE", "q", "out", "bcast") == b"out"  # flags set exactly, not added
    wait_for(lambda: pause_everywhere(b"out"), 5, 0.02, "pause out on every node")
    assert b.call("PAUSE", "q", "none", "bcast") == b"none"
    wait_for(lambda: pause_everywhere(b"none"), 5, 0.02, "no pause on any node")
    job = c.add("q", "again", 5000, "REPLICATE", 3)
    assert states(nodes, job).count("active") == 2


# -- clients ----------------------------------------------------------------------------------
def test_pipelined_replicated_addjobs_answer_in_order(cluster):
    """200 ADDJOB REPLICATE 3 in one write, then QLEN and PING: 200 IDs in request
    order, then the QLEN and PONG replies."""
    nodes = cluster(3)
    a = nodes[0]
    count = 200
    payload = b"".join(RawClient.encode("ADDJOB", "q", f"job-{i}", 5000, "REPLICATE", 3)
                       for i in range(count))
    payload += RawClient.encode("QLEN", "q") + RawClient.encode("PING")
    with RawClient(a.proc.port, timeout=30) as pipe:
        pipe.send_raw(payload)
        replies = [pipe.read() for _ in range(count + 2)]
        assert pipe.pending(0.1) == b""
    ids = replies[:count]
    for reply in ids:
        assert isinstance(reply, Status) and ID_RE.match(reply), reply
    assert len(set(ids)) == count
    qlen, pong = replies[count:]
    assert isinstance(qlen, int) and 0 <= qlen <= count
    assert pong == b"PONG" and isinstance(pong, Status)
    for i, job in enumerate(ids):  # the i-th reply is the i-th request's job
        shown = a.show(job)
        assert shown["body"] == f"job-{i}".encode() and shown["state"] == b"queued"
        assert len(shown["nodes-delivered"]) == 3
    assert a.call("QLEN", "q") == count
    for node in nodes[1:]:
        assert node.registered() == count  # every ID came after its copies existed
        assert node.call("QLEN", "q") == 0


def test_client_gone_while_addjob_waits(cluster):
    """A client that disconnects while its ADDJOB waits for copies (timeout 0: forever)
    leaves no job behind: Disque deletes it from the cluster."""
    nodes = cluster(3)
    a, b, c = nodes
    assert c.call("PAUSE", "q", "in") == b"in"  # c never confirms
    waiting = RawClient(a.proc.port)
    waiting.send("ADDJOB", "q", "body", 0, "REPLICATE", 3, "RETRY", 1)
    job = wait_for(lambda: b.jobs_in("q"), 5, 0.01, "b's copy")[0]
    assert a.state(job) == "wait-repl" and b.state(job) == "active"
    assert waiting.pending(0.2) == b""  # still waiting
    waiting.close()
    wait_gone(nodes, job)
    # RETRY 1: a copy left anywhere would be queued again within this window
    assert_stays(lambda: not holders(nodes, job), 2.0, "the abandoned job came back")
    for node in nodes:
        assert node.registered() == 0 and node.call("QLEN", "q") == 0
    assert a.call("GETJOB", "NOHANG", "FROM", "q") is NULL_ARRAY
