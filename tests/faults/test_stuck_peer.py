"""Peers that misbehave on the bus: one that accepts its connections and never reads
them (netproxy's `stuck`): the other nodes keep answering, keep replicating among
themselves, drop the stuck link instead of queueing for it without end, and take the
peer back once it reads; one whose SYNs are dropped; one that is slow."""

from __future__ import annotations

import socket
import time
from pathlib import Path

import pytest
import redis
from jepsen import Config, FaultCluster, _call
from netproxy import SLOW, STUCK
from support import assert_stays, cluster_nodes, myid, wait_for

BODY = b"x" * (1 << 20)
JOBS = 40  # 40 MB of REPLJOB for the stuck peer: far more than TCP buffers hold
ANSWER_S = 2.0  # a command must be answered within this, whatever the bus does


def timed(node, *args):
    started = time.monotonic()
    reply = _call(node, *args)
    assert time.monotonic() - started < ANSWER_S, f"{args[0]} took too long"
    return reply


@pytest.mark.timeout(60)
def test_stuck_peer(tmp_path: Path) -> None:
    cluster = FaultCluster(tmp_path, Config(nodes=3, aof=False, node_timeout=1000))
    try:
        a, b, c = cluster.nodes
        a_id, b_id, c_id = cluster.ids
        dialed = cluster.net.connections_from(a_id, c.port)
        cluster.net.isolate(c_id, cluster.ids, STUCK)
        added = 0
        for _ in range(JOBS):  # queued for B and C at once: C's copies go nowhere
            try:
                reply = timed(a, "ADDJOB", "big", BODY, 0, "REPLICATE", 3, "ASYNC")
            except redis.exceptions.ResponseError as exc:
                # a loaded machine: A flagged C failing (its node timeout passed) before
                # the last adds, which then have too few reachable nodes for 3 copies
                assert "NOREPL" in str(exc), exc
                assert {"fail?", "fail"} & set(cluster_nodes(a)[c_id].flags), exc
                break
            assert reply.startswith(b"D-")
            added += 1
        assert added >= 8, added  # 8 MB and more: beyond what TCP buffers hold
        # A gives up the link it cannot write to (after the node timeout), so what it
        # queued for C is dropped rather than kept, and reconnects (in vain, for now).
        wait_for(lambda: cluster.net.connections_from(a_id, c.port) > dialed, 15, 0.1,
                 "A to drop its link to the stuck peer and dial again")
        wait_for(lambda: {"fail?", "fail"} & set(cluster_nodes(a)[c_id].flags), 10, 0.1,
                 "A to flag the stuck peer as failing")
        # Meanwhile A answers, and replicates to the peer that reads.
        assert timed(a, "PING") == b"PONG"
        job = timed(a, "ADDJOB", "small", "hello", 1500, "REPLICATE", 2)
        assert job.startswith(b"D-")
        assert timed(b, "SHOW", job)
        cluster.net.heal()
        cluster.wait_formed(20)
        job = timed(a, "ADDJOB", "small", "again", 1500, "REPLICATE", 3)
        assert timed(c, "SHOW", job)
    finally:
        cluster.close()


def _unanswering_listener(port: int) -> list[socket.socket]:
    """A listener on 127.0.0.1:port whose accept queue is full: the kernel drops the
    SYNs of any further connection, so a dial there hangs, as behind a firewall that
    drops packets. Returns the sockets to close."""
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", port))
    listener.listen(0)
    held = [listener]
    for _ in range(8):  # never accepted: they fill the queue
        filler = socket.socket()
        filler.settimeout(0.3)
        held.append(filler)
        try:
            filler.connect(("127.0.0.1", port))
        except TimeoutError:
            return held  # this SYN was dropped: the queue is full
    raise AssertionError("could not fill the accept queue")


@pytest.mark.timeout(60)
def test_hanging_dial_is_given_up(make_cluster) -> None:
    """A dial whose SYNs get no answer is given up after the node timeout and made
    again, so a node that comes back is reached within a few seconds, not after the
    kernel's SYN retries (up to two minutes)."""
    a, c = make_cluster(2)
    c_id = myid(c)
    c.kill()
    held = _unanswering_listener(c.port + 10000)
    try:
        wait_for(lambda: "fail?" in cluster_nodes(a)[c_id].flags, 10, 0.05, "C PFAIL")
        # No event shows a dial hanging: give A time to start one, and for the
        # kernel's SYN retries to back off beyond the bound checked below.
        time.sleep(12)
    finally:
        for sock in held:
            sock.close()
    c.start()
    wait_for(lambda: not cluster_nodes(a)[c_id].flags and
             cluster_nodes(a)[c_id].link == "connected", 5, 0.05, "A to reach C again")


@pytest.mark.timeout(60)
def test_slow_peer(tmp_path: Path) -> None:
    """A peer 0.2 s away each way (netproxy's `slow`): it stays a member, gets its
    copies, and the node talking to it answers its clients meanwhile."""
    cluster = FaultCluster(tmp_path, Config(nodes=3, aof=False, node_timeout=3000))
    try:
        a, _, c = cluster.nodes
        c_id = cluster.ids[2]
        cluster.net.isolate(c_id, cluster.ids, SLOW)
        jobs = [timed(a, "ADDJOB", "slow", f"j{n}", 0, "REPLICATE", 3, "ASYNC")
                for n in range(20)]
        assert timed(a, "PING") == b"PONG"
        job = _call(a, "ADDJOB", "slow", "sync", 5000, "REPLICATE", 3)
        assert job.startswith(b"D-")
        for job in jobs:
            wait_for(lambda job=job: _call(c, "SHOW", job), 10, 0.05, "a copy on C")
        assert_stays(lambda: not cluster_nodes(a)[c_id].flags, 2.0,
                     "a slow peer must not be flagged failing")
    finally:
        cluster.close()
