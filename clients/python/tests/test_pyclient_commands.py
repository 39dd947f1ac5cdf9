"""Every method of Client and AsyncClient against one real node (each test runs with
both clients), and the typed errors."""

from __future__ import annotations

import os
import re
import signal
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from disq_client import (
    AuthenticationError,
    BadJobIdError,
    BatchError,
    Client,
    DisqConnectionError,
    DisqTimeoutError,
    Hello,
    Job,
    LeavingError,
    NoJobError,
    NoReplicationError,
    PausedError,
    QueueFullError,
    ResponseError,
    TooLateError,
    json_body,
    msgpack_body,
)
from disq_client import commands as cmds
from nodes_at import addr
from support import DisqProcess, call, free_port, wait_for

ID_RE = re.compile(r"^D-[0-9a-f]{8}-[A-Za-z0-9+/]{24}-[0-9a-f]{4}$")
Connect = Callable[..., Any]


def test_a_pipeline_whose_replies_span_many_reads(node: DisqProcess, connect: Connect) -> None:
    """3,000 jobs in one ADDJOBS: its reply (~130 KiB) arrives in reads larger than
    protocol.FEED_PIECE, fed to hiredis piece by piece: every ID, in order."""
    c = connect(addr(node))
    bodies = [f"job-{i}" for i in range(3000)]
    ids = c.add_jobs("big", bodies, batch_size=3000)
    jobs = c.get_jobs("big", count=3000, nohang=True)
    assert [j.id for j in jobs] == ids
    assert [j.body for j in jobs] == [b.encode() for b in bodies]


def test_add_get_ack(node: DisqProcess, connect: Connect) -> None:
    c = connect(addr(node))
    job_id = c.add_job("q", "hello")
    assert ID_RE.match(job_id)
    assert job_id[2:10] == call(node, "CLUSTER", "MYID")[:8].decode()  # type: ignore[index]
    assert c.qlen("q") == 1
    [job] = c.get_jobs("q")
    assert job == Job(job_id, "q", b"hello")
    assert job.text() == "hello" and job.node_prefix == job_id[2:10]
    assert c.ack(job_id) == 1
    assert c.ack(job_id) == 0  # already acknowledged (and collected)
    assert c.qlen("q") == 0


def test_add_job_options(node: DisqProcess, connect: Connect) -> None:
    c = connect(addr(node))
    job_id = c.add_job("q", b"x", timeout_ms=0, replicate=1, delay_ms=30_000, retry_ms=6001,
                       ttl_ms=3_600_000, maxlen=10)
    info = c.show(job_id)
    assert info is not None
    # RETRY is whole seconds on the wire: 6.001 s rounded up, never early
    assert (info.queue, info.state, info.repl, info.delay_ms, info.retry_ms) == (
        "q", "active", 1, 30_000, 7000)
    assert 3_590_000 <= info.ttl_ms <= 3_600_000 and info.body == b"x"
    assert c.qlen("q") == 0  # delayed
    at_most_once = c.add_job("q", b"y", retry_ms=0, async_=True)
    assert int(at_most_once[-1], 16) % 2 == 0  # RETRY 0 shows in the ID
    assert c.show(at_most_once).retry_ms == 0


def test_add_job_extensions(node: DisqProcess, connect: Connect) -> None:
    """disq's PRIORITY, GROUP, AT and DELAY-MS: sent through the spec, shown by SHOW,
    QPEEK and GETJOB with counters; a plain job's fields stay None."""
    c = connect(addr(node))
    at = datetime.now(UTC) + timedelta(hours=1)
    scheduled = c.add_job("q", b"x", at=at, priority=7, group="tenant-1")
    info = c.show(scheduled)
    assert info is not None
    assert (info.priority, info.group, info.state) == (7, "tenant-1", "active")
    assert info.due_ms == cmds.unix_ms(at) and info.due_ms >= at.timestamp() * 1000
    # a delay of whole seconds goes as Disque's DELAY, any other as DELAY-MS
    soon = c.add_job("q", b"y", delay=timedelta(hours=1, milliseconds=1))
    assert c.show(soon).due_ms >= time.time() * 1000 + 3_500_000  # type: ignore[union-attr]
    plain = c.show(c.add_job("q", b"y", delay_ms=3_600_000))
    assert plain is not None and plain.due_ms is None and plain.delay_ms == 3_600_000
    ready = c.add_job("q", b"z", priority=0, at=0)  # a due time in the past: now
    [peeked] = c.qpeek("q", 1)
    assert (peeked.id, peeked.priority, peeked.group) == (ready, 0, None)
    [job] = c.get_jobs("q", with_counters=True)
    assert (job.id, job.nacks, job.priority, job.group) == (ready, 0, 0, None)
    plain = c.add_job("q", b"p")
    assert c.show(plain).priority is None  # type: ignore[union-attr]
    [job] = c.get_jobs("q", with_counters=True)
    assert job == Job(plain, "q", b"p", 0, 0)
    with pytest.raises(ResponseError, match="PRIORITY must be between 0 and 255"):
        c.add_job("q", b"x", priority=256)
    with pytest.raises(ResponseError, match="DELAY and AT are mutually exclusive"):
        c.add_job("q", b"x", delay_ms=1000, at=at)


def test_set_job(node: DisqProcess, connect: Connect) -> None:
    """JOBSET through the spec: a new priority reorders the queue, `at` (a datetime or
    Unix ms) and `delay_ms` move the due time; errors are typed."""
    c = connect(addr(node))
    first, second = c.add_job("q", b"1"), c.add_job("q", b"2")
    assert c.set_job(second, priority=0) is None
    assert [j.id for j in c.qpeek("q", 2)] == [second, first]
    at = datetime.now(UTC) + timedelta(hours=1)
    c.set_job(first, at=at)
    info = c.show(first)
    assert info is not None and (info.state, info.due_ms) == ("active", cmds.unix_ms(at))
    assert c.qlen("q") == 1
    c.set_job(first, delay_ms=3_600_000, priority=9)
    info = c.show(first)
    assert info is not None and info.priority == 9
    assert info.due_ms is not None and info.due_ms >= time.time() * 1000 + 3_500_000
    c.set_job(first, at=0)  # a due time in the past: now
    assert c.qlen("q") == 2
    with pytest.raises(NoJobError):
        c.set_job(first[:-4] + "0000", priority=1)
    with pytest.raises(ResponseError, match="DELAY-MS and AT are mutually exclusive"):
        c.set_job(first, at=at, delay_ms=1)
    with pytest.raises(ResponseError, match="JOBSET needs PRIORITY, AT or DELAY-MS"):
        c.set_job(first)


def test_get_jobs_options(node: DisqProcess, connect: Connect) -> None:
    c = connect(addr(node))
    assert c.get_jobs("q", nohang=True) == []
    assert c.get_jobs("q", timeout_ms=50) == []  # TIMEOUT passed: nothing
    assert c.get_job("q", nohang=True) is None
    ids = c.add_jobs("q", [b"1", b"2", b"3"])
    other = c.add_job("q2", b"4")
    jobs = c.get_jobs("q", "q2", count=10, with_counters=True)
    assert sorted(j.id for j in jobs) == sorted(ids + [other])
    assert all(j.nacks == 0 and j.additional_deliveries == 0 for j in jobs)
    assert c.nack(ids[0]) == 1
    again = c.get_job("q", with_counters=True)
    assert again is not None and (again.id, again.nacks) == (ids[0], 1)
    assert c.get_job("q", nohang=True) is None  # no counters asked: plain jobs
    assert c.ack(*ids, other) == 4


def test_job_lifecycle_commands(node: DisqProcess, connect: Connect) -> None:
    c = connect(addr(node))
    a, b = c.add_jobs("q", [b"a", b"b"], retry_ms=10_000)
    assert c.dequeue(a) == 1 and c.qlen("q") == 1
    assert c.enqueue(a) == 1 and c.qlen("q") == 2
    [job] = c.get_jobs("q")
    assert c.working(job.id) == 10_000  # WORKING answers the job's RETRY (in ms)
    assert c.show(job.id).state == "active"
    assert c.fast_ack(job.id) == 1
    assert c.show(job.id) is None
    other = b if job.id == a else a
    assert c.del_job(other) == 1 and c.qlen("q") == 0
    with pytest.raises(NoJobError):
        c.working(other)


def test_queue_commands(node: DisqProcess, connect: Connect) -> None:
    c = connect(addr(node))
    ids = c.add_jobs("q", [b"1", b"2", b"3"])
    assert [j.id for j in c.qpeek("q", 2)] == ids[:2]
    assert [j.id for j in c.qpeek("q", -1)] == ids[2:]
    assert c.qpeek("none", 5) == []
    stat = c.qstat("q")
    assert stat is not None
    assert (stat.name, stat.len, stat.jobs_in, stat.blocked, stat.pause) == ("q", 3, 3, 0,
                                                                            "none")
    assert c.qstat("none") is None
    assert c.pause("q", "in") == "in"
    assert c.pause("q") == "in"  # no flag: the state
    with pytest.raises(PausedError):
        c.add_job("q", b"4")
    assert c.pause("q", "in", "out") == "all"
    assert c.get_jobs("q", nohang=True) == []
    assert c.pause("q", "none", bcast=True) == "none"
    assert c.qlen("q") == 3


def test_scans_follow_every_page(node: DisqProcess, connect: Connect) -> None:
    c = connect(addr(node))
    for i in range(30):
        c.add_job(f"q{i}", b"x")
    many = c.add_jobs("big", [b"y"] * 250)
    assert sorted(c.qscan(count=3)) == sorted([f"q{i}" for i in range(30)] + ["big"])
    assert sorted(c.qscan(minlen=2)) == ["big"]
    assert sorted(c.jscan(queue="big", count=7)) == sorted(many)
    infos = list(c.jscan_info(queue="big", states=["queued"]))
    assert sorted(i.id for i in infos) == sorted(many)
    assert list(c.jscan(states=["active"])) == []


def test_server_commands(node: DisqProcess, connect: Connect) -> None:
    c = connect(addr(node))
    assert c.ping() == "PONG"
    hello = c.hello()
    myid = call(node, "CLUSTER", "MYID").decode()  # type: ignore[union-attr]
    assert isinstance(hello, Hello) and (hello.version, hello.node_id) == (1, myid)
    assert [(n.id, n.host, n.port, n.priority) for n in hello.nodes] == [
        (myid, "127.0.0.1", node.port, 1)]
    assert c.current_node == ("127.0.0.1", node.port) and c.current_node_id == myid
    c.add_job("q", b"x")
    info = c.info()
    assert info["jobs"]["registered_jobs"] == 1
    assert info["server"]["tcp_port"] == node.port
    assert set(c.info("queues")) == {"queues"}
    assert c.execute_command("QLEN", "q") == 1


def test_bodies(node: DisqProcess, connect: Connect) -> None:
    c = connect(addr(node))
    value = {"name": "é", "n": [1, 2.5, None]}
    c.add_job("q", json_body(value))
    c.add_job("q", msgpack_body(value))
    c.add_job("q", "é")
    j1, j2, j3 = c.get_jobs("q", count=3)
    assert j1.json() == value and j2.msgpack() == value
    assert (j3.body, j3.text()) == ("é".encode(), "é")
    with pytest.raises(TypeError):
        c.add_job("q", {"not": "bytes"})


def calls(node: DisqProcess, command: str) -> int:
    """How many times the node ran `command` (INFO commandstats)."""
    text = call(node, "INFO", "commandstats")
    assert isinstance(text, bytes)
    found = re.search(rb"cmdstat_%s:calls=(\d+)" % command.encode(), text)
    return int(found.group(1)) if found else 0


def test_add_jobs_pipeline(node: DisqProcess, connect: Connect) -> None:
    """One ADDJOBS a batch (disq's batch of ADDJOBs): the IDs in order, each job's
    error in its place."""
    c = connect(addr(node))
    before = calls(node, "addjobs"), calls(node, "addjob")
    ids = c.add_jobs("q", (b"%d" % i for i in range(2500)), batch_size=1000)
    assert len(ids) == len(set(ids)) == 2500 and all(ID_RE.match(i) for i in ids)
    assert c.qlen("q") == 2500
    assert [j.body for j in c.qpeek("q", 3)] == [b"0", b"1", b"2"]  # in order
    with pytest.raises(BatchError) as caught:
        c.add_jobs("q2", [b"a", b"b", b"c"], maxlen=2, batch_size=2)
    results = caught.value.results
    assert [type(r) for r in results] == [str, str, QueueFullError]
    assert c.qlen("q2") == 2
    assert (calls(node, "addjobs"), calls(node, "addjob")) == (before[0] + 5, before[1])


def test_add_jobs_on_a_server_without_addjobs(tmp_path: Path, connect: Connect) -> None:
    """A server that does not know ADDJOBS (Disque; here a node that renamed it away)
    gets pipelined ADDJOBs from the first refused batch on: the same IDs and errors."""
    node = DisqProcess(tmp_path, config_text='rename-command ADDJOBS ""\n')
    node.start()
    try:
        c = connect(addr(node))
        ids = c.add_jobs("q", [b"a", b"b", b"c"], batch_size=2, dedup=["k1", "k2", "k1"])
        assert ids[0] == ids[2] != ids[1] and c.qlen("q") == 2
        with pytest.raises(BatchError) as caught:
            c.add_jobs("q", [b"d", b"e"], maxlen=3)
        assert [type(r) for r in caught.value.results] == [str, QueueFullError]
        assert (calls(node, "addjobs"), calls(node, "addjob")) == (0, 5)
    finally:
        node.stop()


def test_add_with_dedup_keys(node: DisqProcess, connect: Connect) -> None:
    """disq's DEDUP extension: a key adds its job once."""
    c = connect(addr(node))
    first = c.add_job("q", "a", dedup="key-1")
    assert c.add_job("q", "b", dedup=b"key-1") == first
    ids = c.add_jobs("q", [b"x", b"y", b"z"], dedup=["key-1", "key-2", "key-2"])
    assert ids[0] == first and ids[1] == ids[2] != first
    assert c.qlen("q") == 2


def test_typed_errors(node: DisqProcess, connect: Connect) -> None:
    c = connect(addr(node))
    with pytest.raises(NoReplicationError, match="NOREPL Not enough reachable nodes"):
        c.add_job("q", b"x", replicate=2)
    c.add_job("q", b"x")
    with pytest.raises(QueueFullError, match="MAXLEN"):
        c.add_job("q", b"x", maxlen=1)
    with pytest.raises(BadJobIdError):
        c.ack("not-an-id")
    with pytest.raises(BadJobIdError):
        c.show("D-12345678-xxx")
    with pytest.raises(NoJobError):
        c.working("D-00000000-" + "A" * 24 + "-05a1")
    with pytest.raises(ResponseError, match="syntax error") as caught:
        c.execute_command("GETJOB", "COUNT", "1")
    assert type(caught.value) is ResponseError and caught.value.code == "ERR"
    with pytest.raises(ValueError):
        c.get_jobs()


def test_too_late(node: DisqProcess, connect: Connect) -> None:
    c = connect(addr(node))
    job_id = c.add_job("q", b"x", ttl_ms=2000, retry_ms=1000)

    def too_late() -> bool:
        try:
            c.working(job_id)
        except TooLateError:
            return True
        return False
    wait_for(too_late, timeout=5, interval=0.1, message="WORKING to be refused")


def test_leaving_node_with_nowhere_else_to_go(node: DisqProcess, connect: Connect) -> None:
    c = connect(addr(node), retries=2)
    assert call(node, "CLUSTER", "LEAVING", "yes") == b"OK"
    try:
        with pytest.raises(LeavingError):
            c.get_jobs("q", timeout_ms=100)
        assert c.hello().nodes[0].priority == 100
    finally:
        call(node, "CLUSTER", "LEAVING", "no")


def test_auth(start_cluster: Callable[..., list[DisqProcess]], connect: Connect) -> None:
    [node] = start_cluster(1, "--requirepass", "s3cret")
    with pytest.raises(AuthenticationError, match="NOAUTH"):
        connect(addr(node)).ping()
    with pytest.raises(AuthenticationError):
        connect(addr(node), password="wrong").ping()
    c = connect(addr(node), password="s3cret")
    assert c.ping() == "PONG" and c.add_job("q", b"x")


def test_timeouts(node: DisqProcess, connect: Connect) -> None:
    c = connect(addr(node), timeout_ms=200, retries=0)
    assert c.get_jobs("q", timeout_ms=400) == []  # GETJOB's TIMEOUT adds to the client's
    os.kill(node.pid, signal.SIGSTOP)  # a node that does not answer
    try:
        with pytest.raises(DisqTimeoutError):
            c.ping()
    finally:
        os.kill(node.pid, signal.SIGCONT)
    assert c.ping() == "PONG"  # on a new connection


def test_close_wakes_a_blocked_consumer(node: DisqProcess) -> None:
    c = Client(addr(node))
    got: list[BaseException] = []

    def consume() -> None:
        try:
            c.get_jobs("q")  # blocks for ever
        except DisqConnectionError as exc:
            got.append(exc)
    consumer = threading.Thread(target=consume)
    consumer.start()
    wait_for(lambda: b"blocked_clients:1" in call(node, "INFO", "clients"),  # type: ignore[operator]
             message="GETJOB to block")
    c.close()
    consumer.join(5)
    assert not consumer.is_alive() and len(got) == 1
    assert c.ping() == "PONG"  # usable again


def test_no_node_answers(connect: Connect) -> None:
    c = connect(f"127.0.0.1:{free_port()}", connect_timeout_ms=500)
    with pytest.raises(DisqConnectionError, match="no node answered"):
        c.ping()
