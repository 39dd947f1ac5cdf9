"""A producer never waits for ever: an ADDJOB without a timeout waiting for its copies
whose target is flagged failing goes on with another node, or answers -NOREPL as soon
as the flag is known; one with a timeout waits it out for a target that comes back (as
Disque's suite checks); POST /jobs without `timeout_ms` waits a finite default."""

from __future__ import annotations

import os
import signal
import socket
from collections.abc import Callable

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry
from support import (
    DisqProcess,
    assert_stays,
    cluster_nodes,
    form_cluster,
    free_port,
    myid,
    raw_command,
    wait_for,
)
from test_http import Http

from disq.server.http.jsonio import DEFAULT_ADD_TIMEOUT_MS


def patient_client(node: DisqProcess) -> redis.Redis:
    """A client that waits long for a reply (a deadline, not a measure) and never sends
    the command again (redis-py retries after a timeout: its retry would meet a cluster
    that knows the node failing, and get -NOREPL at once)."""
    return node.client(socket_timeout=30, retry=Retry(NoBackoff(), 0))


def jobs_held(node: DisqProcess) -> list[bytes]:
    client = node.client()
    try:
        return client.execute_command("JSCAN", 0, "COUNT", 1000, "BUSYLOOP")[1]
    finally:
        client.close()


def flagged_failing(node: DisqProcess, other_id: str) -> bool:
    return any(line.id == other_id and ("fail" in line.flags or "fail?" in line.flags)
               for line in cluster_nodes(node).values())


def answered(sock: socket.socket) -> bool:
    sock.setblocking(False)
    try:
        return bool(sock.recv(1, socket.MSG_PEEK))
    except BlockingIOError:
        return False
    finally:
        sock.setblocking(True)


@pytest.mark.timeout(90)
def test_a_target_flagged_failing_makes_the_addjob_norepl(
        start_node: Callable[..., DisqProcess]) -> None:
    timeout_ms = 0
    a, b, c = form_cluster([start_node("--cluster-node-timeout", "1000") for _ in range(3)])
    os.kill(c.pid, signal.SIGSTOP)
    try:
        client = patient_client(a)
        try:
            with pytest.raises(redis.exceptions.ResponseError, match="^NOREPL"):
                client.execute_command("ADDJOB", "q", "x", timeout_ms, "REPLICATE", 3)
        finally:
            client.close()
        for node in (a, b):  # nothing added: the copies are deleted
            wait_for(lambda node=node: jobs_held(node) == [], 5, 0.05, "no job left")
    finally:
        os.kill(c.pid, signal.SIGCONT)


@pytest.mark.timeout(120)
def test_an_addjob_with_a_timeout_waits_for_a_target_that_comes_back(
        start_node: Callable[..., DisqProcess]) -> None:
    a, b, c = form_cluster([start_node("--cluster-node-timeout", "1000") for _ in range(3)])
    c_id = myid(c)
    os.kill(c.pid, signal.SIGSTOP)
    sock = socket.create_connection((a.host, a.port), timeout=10)
    try:
        try:
            # sent while c is reachable: the ADDJOB is waiting when c gets flagged
            sock.sendall(b"ADDJOB q x 60000 REPLICATE 3\r\n")
            wait_for(lambda: flagged_failing(a, c_id), 30, 0.05, "c flagged failing")
            assert_stays(lambda: not answered(sock), 1.0, "the ADDJOB waits while c fails")
        finally:
            os.kill(c.pid, signal.SIGCONT)
        # (a deadline, not a measure: the copy reaches c once it is back)
        assert raw_command(sock, b"", timeout=50).startswith(b"+D-"), "the job's ID"
    finally:
        sock.close()


@pytest.mark.timeout(90)
def test_another_node_takes_the_failing_targets_place(
        start_node: Callable[..., DisqProcess]) -> None:
    nodes = form_cluster([start_node("--cluster-node-timeout", "1000") for _ in range(4)])
    a, stopped = nodes[0], nodes[3]
    os.kill(stopped.pid, signal.SIGSTOP)
    try:
        client = patient_client(a)
        try:
            for n in range(3):  # whichever targets were drawn, the ADDJOB succeeds
                job = client.execute_command("ADDJOB", "q", f"x{n}", 0, "REPLICATE", 3)
                assert job.startswith(b"D-")
        finally:
            client.close()
    finally:
        os.kill(stopped.pid, signal.SIGCONT)


@pytest.mark.timeout(90)
def test_http_add_has_a_finite_default_timeout(start_node: Callable[..., DisqProcess]) -> None:
    """A target that takes no copy and is not failing (its queue paused in input): the
    ADDJOB would wait for ever with timeout 0; over HTTP it answers 503 after the
    default timeout."""
    port = free_port()
    a, _, c = form_cluster([start_node("--cluster-node-timeout", "1000", "--http-port",
                                       str(port))] +
                           [start_node("--cluster-node-timeout", "1000") for _ in range(2)])
    paused = c.client()
    try:
        paused.execute_command("PAUSE", "q", "in")
    finally:
        paused.close()
    assert 0 < DEFAULT_ADD_TIMEOUT_MS <= 15_000
    status, problem = Http(port).post("/api/v1/queues/q/jobs", {"body": "x", "replicate": 3})
    assert status == 503 and problem["code"] == "NOREPL", problem
    wait_for(lambda: jobs_held(a) == [], 5, 0.05, "no job left")
