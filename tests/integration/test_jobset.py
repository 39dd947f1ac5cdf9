"""JOBSET (a disq extension) against real servers: its options and their
errors, a new priority reordering a queue, a queued job moved into the future, the
change made from a node that does not hold the job, an acked job, the AOF."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable

import jobutil
import pytest
from jobutil import NULL_BULK, RawClient, Status, assert_error, fake_id
from support import DisqProcess, form_cluster, wait_for
from test_job_fields import AOF, consume, now_ms, show

shared_disq = jobutil.shared_disq
node = jobutil.node
c = jobutil.c

OK = Status(b"OK")


# -- options and their errors ------------------------------------------------------------------

@pytest.mark.parametrize(("options", "error"), [
    ((), "ERR JOBSET needs PRIORITY, AT or DELAY-MS"),
    (("PRIORITY", 256), "ERR PRIORITY must be between 0 and 255"),
    (("PRIORITY", -1), "ERR PRIORITY must be between 0 and 255"),
    (("PRIORITY", "high"), "ERR PRIORITY must be between 0 and 255"),
    (("DELAY-MS", -1), "ERR DELAY-MS time must be a non negative number"),
    (("AT", -1), "ERR AT must be a Unix time in milliseconds"),
    (("AT", 1, "DELAY-MS", 1), "ERR DELAY-MS and AT are mutually exclusive"),
    (("PRIORITY", 1, "GROUP", "g"), "ERR syntax error"),
    (("PRIORITY",), "ERR syntax error"),
    (("DELAY-MS", 61_000),
     "ERR The specified AT / DELAY-MS is beyond the job's TTL. Job not changed since it "
     "would never be delivered"),
    (("AT", "{beyond_ttl}", "PRIORITY", 1),
     "ERR The specified AT / DELAY-MS is beyond the job's TTL. Job not changed since it "
     "would never be delivered"),
])
def test_bad_input_is_refused_and_nothing_changes(c: RawClient, options: tuple,
                                                  error: str) -> None:
    job_id = c.add("q", "kept", "PRIORITY", 5, "TTL", 60)
    before = show(c, job_id)
    args = [str(now_ms() + 61_000) if a == "{beyond_ttl}" else a for a in options]
    assert_error(c, error, "JOBSET", job_id, *args)
    after = show(c, job_id)
    for field in ("state", "priority", "group", "due-ms"):
        assert after[field] == before[field]
    assert c.call("QLEN", "q") == 1
    assert c.call("GETJOB", "NOHANG", "FROM", "q")[0][1] == job_id  # still serving


def test_bad_and_unknown_ids(c: RawClient) -> None:
    assert_error(c, "BADID Invalid Job ID format.", "JOBSET", "nope", "PRIORITY", 1)
    assert_error(c, "NOJOB Job not known in the context of this node.",
                 "JOBSET", fake_id(), "PRIORITY", 1)


def test_each_option(c: RawClient) -> None:
    plain = c.add("q", "plain", "RETRY", 30)
    assert len(c.call("SHOW", plain)) == 30
    assert c.call("JOBSET", plain, "priority", 3) == OK
    info = show(c, plain)
    assert (info["priority"], info["group"], info["due-ms"]) == (3, NULL_BULK, 0)
    assert info["state"] == b"queued"
    at = now_ms() + 600_000
    assert c.call("JOBSET", plain, "AT", at) == OK
    info = show(c, plain)
    assert (info["priority"], info["due-ms"], info["state"]) == (3, at, b"active")
    assert 595_000 < info["next-requeue-within"] <= 600_000  # queued at its due time
    start = now_ms()
    assert c.call("JOBSET", plain, "DELAY-MS", 300_000, "PRIORITY", 9) == OK
    info = show(c, plain)
    assert info["priority"] == 9 and start + 300_001 <= info["due-ms"] <= now_ms() + 300_001
    grouped = c.add("q", "g", "GROUP", "tenant", "DELAY", 100)
    assert c.call("JOBSET", grouped, "AT", 1) == OK  # a due time in the past: now
    info = show(c, grouped)
    assert info["group"] == b"tenant" and info["state"] == b"queued"
    assert c.call("QLEN", "q") == 1


# -- the queue order and the due time --------------------------------------------------------------

def test_a_new_priority_reorders_the_queue(c: RawClient) -> None:
    ids = [c.add("q", f"job{i}") for i in range(3)]
    assert c.call("JOBSET", ids[2], "PRIORITY", 0) == OK
    assert c.call("JOBSET", ids[0], "PRIORITY", 255) == OK
    assert [entry[1] for entry in c.call("QPEEK", "q", 3)] == [ids[2], ids[1], ids[0]]
    assert [c.call("GETJOB", "NOHANG", "FROM", "q")[0][1] for _ in range(3)] == [
        ids[2], ids[1], ids[0]]


def test_a_queued_job_moved_into_the_future_is_not_delivered_before(
        node: DisqProcess, c: RawClient) -> None:
    moved = c.add("q", "moved", "RETRY", 60)
    c.add("q", "other", "RETRY", 60)
    due = now_ms() + 1500
    assert c.call("JOBSET", moved, "AT", due) == OK
    assert c.call("QLEN", "q") == 1
    assert show(c, moved)["state"] == b"active"
    got = consume(node.port, 2)
    assert [entry[2] for _, entry in got] == [b"other", b"moved"]
    received, entry = got[1]
    assert entry[-4:-2] == [b"due-ms", due]  # (then its attributes: "attrs", [])
    assert received >= due, f"delivered {due - received} ms early"


# -- a cluster ----------------------------------------------------------------------------------

def holders(nodes: list[DisqProcess], job_id: bytes) -> list[DisqProcess]:
    out = []
    for n in nodes:
        with RawClient(n.port) as client:
            if client.call("SHOW", job_id) is not NULL_BULK:
                out.append(n)
    return out


def test_jobset_from_a_node_that_does_not_hold_the_job(
        start_node: Callable[..., DisqProcess]) -> None:
    nodes = form_cluster([start_node("--cluster-node-timeout", "1000") for _ in range(3)])
    with RawClient(nodes[1].port) as c:
        alone = c.add("q", "alone", "REPLICATE", 1, "RETRY", 30)
        copied = c.add("q", "copied", "REPLICATE", 2, "RETRY", 30)
    [elsewhere] = [n for n in nodes if n not in holders(nodes, copied)]
    due = now_ms() + 600_000
    with RawClient(nodes[0].port) as c:
        assert c.call("JOBSET", alone, "PRIORITY", 2, "AT", due) == OK
        assert_error(c, "NOJOB Job not known in the context of this node.",
                     "JOBSET", fake_id(), "PRIORITY", 1)
    with RawClient(nodes[1].port) as c:
        info = show(c, alone)
        assert (info["priority"], info["state"]) == (2, b"active")
        # on this node's clock (the same machine's here): late by the estimate of the
        # asking node's offset, within its uncertainty, never early
        assert due <= info["due-ms"] <= due + 50
        assert c.call("QLEN", "q") == 1  # the other one
    with RawClient(elsewhere.port) as c:
        assert c.call("JOBSET", copied, "PRIORITY", 7) == OK
    for n in holders(nodes, copied):  # the one asked, and the other told by it
        with RawClient(n.port) as c:
            wait_for(lambda c=c: show(c, copied).get("priority") == 7, 5, 0.02,
                     "the change on every holder")


def test_an_acked_job_is_not_changed(start_node: Callable[..., DisqProcess]) -> None:
    """Acked on a node whose ACK cannot be collected (the other holder is down): JOBSET
    there, and from a node without the job, is refused."""
    nodes = form_cluster([start_node("--cluster-node-timeout", "1000") for _ in range(3)])
    with RawClient(nodes[0].port) as c:
        job_id = c.add("q", "x", "REPLICATE", 2)
    [holder, other] = holders(nodes, job_id)
    [asker] = [n for n in nodes if n not in (holder, other)]
    other.kill()
    with RawClient(holder.port) as c:
        assert c.call("ACKJOB", job_id) == 1
        assert show(c, job_id)["state"] == b"acked"
        error = "ERR The job is already acknowledged: JOBSET can not change it"
        assert_error(c, error, "JOBSET", job_id, "PRIORITY", 1)
        assert "priority" not in show(c, job_id)
    with RawClient(asker.port) as c:
        assert_error(c, error, "JOBSET", job_id, "PRIORITY", 1)
        assert c.call("PING") == Status(b"PONG")


# -- the AOF --------------------------------------------------------------------------------

def test_the_change_survives_a_restart(start_node: Callable[..., DisqProcess]) -> None:
    node = start_node(*AOF, name="n")
    at = now_ms() + 3_600_000
    with RawClient(node.port) as c:
        moved = c.add("q", "moved", "RETRY", 1)
        plain = c.add("q", "plain", "RETRY", 1)
        assert c.call("JOBSET", moved, "PRIORITY", 4, "AT", at) == OK
    records = (node.dir / "disque.aof").read_bytes()
    assert records.count(b"*3\r\n$7\r\nLOADJOB\r\n") == 1  # the changed job, extended
    assert records.count(b"*2\r\n$7\r\nLOADJOB\r\n") == 2  # before the change, and plain
    node.stop()
    node = start_node(*AOF, name="n")
    with RawClient(node.port) as c:
        info = show(c, moved)
        assert (info["priority"], info["group"], info["due-ms"]) == (4, NULL_BULK, at)
        assert info["next-requeue-within"] > 3_500_000  # not before its due time
        assert "priority" not in show(c, plain)
    result = subprocess.run([sys.executable, "-m", "disq.aof.check", str(node.dir / "disque.aof")],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0 and "AOF is valid" in result.stdout, result
