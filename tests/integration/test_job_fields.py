"""The ADDJOB options DELAY-MS, AT, PRIORITY and GROUP against real servers:
their errors, the fields in SHOW / QPEEK / JSCAN / GETJOB WITHCOUNTERS (and nothing new
for plain jobs), delivery never before the due time, the AOF, a cluster's copies."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

import jobutil
import pytest
from jobutil import NULL_BULK, RawClient, Status, assert_error
from support import DisqProcess, form_cluster, wait_for

shared_disq = jobutil.shared_disq
node = jobutil.node
c = jobutil.c

AOF = ("--appendonly", "yes")
DISQUE_SHOW_FIELDS = [
    b"id", b"queue", b"state", b"repl", b"ttl", b"ctime", b"delay", b"retry", b"nacks",
    b"additional-deliveries", b"nodes-delivered", b"nodes-confirmed",
    b"next-requeue-within", b"next-awake-within", b"body"]


# How late a replica may place a peer's due time: the uncertainty of its estimate of
# that peer's clock (PING/PONG round trips; one machine here, so the true offset is 0).
LATE_MAX_MS = 500


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def show(c: RawClient, job_id: bytes) -> dict[str, Any]:
    """SHOW as a dict, checking the layout: Disque's 15 fields in Disque's order, then
    priority, group and due-ms for a job that uses them."""
    reply = c.call("SHOW", job_id)
    assert isinstance(reply, list), reply
    names = reply[::2]
    assert names[:15] == DISQUE_SHOW_FIELDS
    assert names[15:] in ([], [b"priority", b"group", b"due-ms"])
    return {name.decode(): value for name, value in zip(names, reply[1::2], strict=True)}


def raw_reply(port: int, *args: Any) -> bytes:
    """The reply's bytes as sent (one reply that fits in one read once complete)."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(RawClient.encode(*args))
        sock.shutdown(socket.SHUT_WR)
        data = b""
        while chunk := sock.recv(1 << 16):
            data += chunk
    return data


# -- options and their errors ------------------------------------------------------------------

@pytest.mark.parametrize(("options", "error"), [
    (("DELAY-MS", -1), "ERR DELAY-MS time must be a non negative number"),
    (("DELAY-MS", "soon"), "ERR DELAY-MS time must be a non negative number"),
    (("AT", -1), "ERR AT must be a Unix time in milliseconds"),
    (("PRIORITY", 256), "ERR PRIORITY must be between 0 and 255"),
    (("PRIORITY", -1), "ERR PRIORITY must be between 0 and 255"),
    (("PRIORITY", "high"), "ERR PRIORITY must be between 0 and 255"),
    (("GROUP", "g" * 257), "ERR GROUP must be 1 to 256 bytes"),
    (("GROUP", ""), "ERR GROUP must be 1 to 256 bytes"),
    (("DELAY", 1, "AT", 1), "ERR DELAY and AT are mutually exclusive"),
    (("DELAY", 0, "DELAY-MS", 1), "ERR DELAY and DELAY-MS are mutually exclusive"),
    (("AT", 1, "DELAY-MS", 1), "ERR DELAY-MS and AT are mutually exclusive"),
    (("DELAY-MS", 10_000, "TTL", 10),
     "ERR The specified DELAY-MS is beyond the TTL. Job refused since would never be "
     "delivered"),
    (("AT", "{beyond_ttl}", "TTL", 60),
     "ERR The specified AT is beyond the TTL. Job refused since would never be delivered"),
    (("PRIORITY",), "ERR syntax error"),
])
def test_bad_options_are_refused_and_nothing_changes(c: RawClient, options: tuple,
                                                     error: str) -> None:
    kept = c.add("q", "kept", "PRIORITY", 5)
    args = [str(now_ms() + 61_000) if a == "{beyond_ttl}" else a for a in options]
    assert_error(c, error, "ADDJOB", "q", "x", 0, *args)
    assert c.info_field("registered_jobs") == "1" and c.call("QLEN", "q") == 1
    assert c.call("GETJOB", "NOHANG", "FROM", "q")[0][1] == kept  # still serving


def test_every_option_is_taken(c: RawClient) -> None:
    start = now_ms()
    at = start + 600_000
    scheduled = c.add("q", "at", "AT", at, "PRIORITY", 0, "GROUP", "tenant-1", "RETRY", 30)
    info = show(c, scheduled)
    assert (info["priority"], info["group"], info["due-ms"]) == (0, b"tenant-1", at)
    assert info["state"] == b"active" and info["delay"] == 0
    assert 595_000 < info["next-requeue-within"] <= 600_000  # queued at its due time
    delayed = c.add("q", "ms", "delay-ms", 250_000, "priority", 255)
    info = show(c, delayed)
    assert (info["priority"], info["group"]) == (255, NULL_BULK)
    assert start + 250_001 <= info["due-ms"] <= now_ms() + 250_001  # (clock.ms_after)
    past = c.add("q", "past", "AT", 1, "GROUP", "g")  # a due time in the past: now
    info = show(c, past)
    assert info["state"] == b"queued" and info["priority"] == 128
    assert start <= info["due-ms"] <= now_ms()
    assert c.call("QLEN", "q") == 1


# -- the replies: new fields for jobs that use them, nothing new for the others ----------------

def test_plain_jobs_replies_are_unchanged(node: DisqProcess, c: RawClient) -> None:
    plain = c.add("q", "body", "RETRY", 30)
    assert len(c.call("SHOW", plain)) == 30
    assert raw_reply(node.port, "QPEEK", "q", 1) == (
        b"*1\r\n*3\r\n$1\r\nq\r\n$40\r\n%s\r\n$4\r\nbody\r\n" % plain)
    [item] = c.call("JSCAN", "0", "BUSYLOOP", "REPLY", "ALL")[1]
    assert item[::2] == DISQUE_SHOW_FIELDS
    assert raw_reply(node.port, "GETJOB", "WITHCOUNTERS", "FROM", "q") == (
        b"*1\r\n*7\r\n$1\r\nq\r\n$40\r\n%s\r\n$4\r\nbody\r\n$5\r\nnacks\r\n:0\r\n"
        b"$21\r\nadditional-deliveries\r\n:0\r\n" % plain)


def test_extended_jobs_show_priority_group_and_due(node: DisqProcess, c: RawClient) -> None:
    job_id = c.add("q", "body", "PRIORITY", 7, "GROUP", "g1", "AT", 5)
    info = show(c, job_id)
    due = info["due-ms"]
    assert (info["priority"], info["group"]) == (7, b"g1") and due > 5
    ext = b"$8\r\npriority\r\n:7\r\n$5\r\ngroup\r\n$2\r\ng1\r\n$6\r\ndue-ms\r\n:%d\r\n" % due
    assert raw_reply(node.port, "QPEEK", "q", 1) == (
        b"*1\r\n*9\r\n$1\r\nq\r\n$40\r\n%s\r\n$4\r\nbody\r\n%s" % (job_id, ext))
    [item] = c.call("JSCAN", "0", "BUSYLOOP", "REPLY", "ALL")[1]
    assert item[::2] == [*DISQUE_SHOW_FIELDS, b"priority", b"group", b"due-ms"]
    assert item[31::2] == [7, b"g1", due]
    assert raw_reply(node.port, "GETJOB", "WITHCOUNTERS", "FROM", "q") == (  # (attrs: none)
        b"*1\r\n*15\r\n$1\r\nq\r\n$40\r\n%s\r\n$4\r\nbody\r\n$5\r\nnacks\r\n:0\r\n"
        b"$21\r\nadditional-deliveries\r\n:0\r\n%s$5\r\nattrs\r\n*0\r\n" % (job_id, ext))
    no_group = c.add("q", "body", "PRIORITY", 1)
    assert c.call("QPEEK", "q", 1) == [[b"q", no_group, b"body", b"priority", 1, b"group",
                                         NULL_BULK, b"due-ms", 0]]


# -- never early ----------------------------------------------------------------------------

def consume(port: int, count: int, timeout: float = 20) -> list[tuple[int, list[Any]]]:
    """(wall-clock ms at receipt, entry) of `count` jobs from blocked GETJOB
    WITHCOUNTERS calls on queue q (each entry ends with due-ms)."""
    got: list[tuple[int, list[Any]]] = []
    deadline = time.monotonic() + timeout
    with RawClient(port) as consumer:
        while len(got) < count:
            assert time.monotonic() < deadline, f"{len(got)} of {count} jobs delivered"
            reply = consumer.call("GETJOB", "TIMEOUT", 1000, "COUNT", 100, "WITHCOUNTERS",
                                  "FROM", "q")
            received = now_ms()  # after the reply arrived: at or after its delivery
            if isinstance(reply, list):
                got += [(received, entry) for entry in reply]
    return got


def test_scheduled_jobs_are_never_delivered_early(node: DisqProcess, c: RawClient) -> None:
    """Jobs due over the next ~1.5 s, by AT and by DELAY-MS, every one taken by a blocked
    consumer: none is received before its due time (the server's clock is this one)."""
    start = now_ms() + 300
    ats = [start + i * 7 for i in range(150)]
    c.send_raw(b"".join(RawClient.encode("ADDJOB", "q", f"at{i}", 0, "AT", at, "RETRY", 60)
                        for i, at in enumerate(ats)))
    sent = now_ms()
    c.send_raw(b"".join(RawClient.encode("ADDJOB", "q", f"ms{i}", 0, "DELAY-MS", 200 + i * 9,
                                         "RETRY", 60) for i in range(150)))
    for _ in range(300):
        assert isinstance(c.read(), Status)
    got = consume(node.port, 300)
    assert len({entry[1] for _, entry in got}) == 300
    for received, entry in got:
        body, due = entry[2].decode(), entry[-3]
        assert entry[-4] == b"due-ms" and entry[-2:] == [b"attrs", []]
        if body.startswith("at"):
            assert due == ats[int(body[2:])]
        else:
            assert due >= sent + 200 + int(body[2:]) * 9
        assert received >= due, f"{body} delivered {due - received} ms early"


# -- the AOF --------------------------------------------------------------------------------

def test_the_fields_survive_a_restart(start_node: Callable[..., DisqProcess]) -> None:
    node = start_node(*AOF, name="n")
    at = now_ms() + 3_600_000
    with RawClient(node.port) as c:
        scheduled = c.add("q", "at", "AT", at, "PRIORITY", 3, "GROUP", "g", "RETRY", 1)
        queued = c.add("q", "now", "PRIORITY", 200, "RETRY", 1)
        plain = c.add("q", "plain", "RETRY", 1)
    records = (node.dir / "disque.aof").read_bytes()
    assert records.count(b"*3\r\n$7\r\nLOADJOB\r\n") == 2  # the extended jobs only
    assert records.count(b"*2\r\n$7\r\nLOADJOB\r\n") == 1
    node.stop()
    node = start_node(*AOF, name="n")
    with RawClient(node.port) as c:
        info = show(c, scheduled)
        assert (info["priority"], info["group"], info["due-ms"]) == (3, b"g", at)
        assert info["next-requeue-within"] > 3_500_000  # not before its due time
        info = show(c, queued)
        assert (info["priority"], info["group"], info["due-ms"]) == (200, NULL_BULK, 0)
        assert "priority" not in show(c, plain)
        wait_for(lambda: c.call("QLEN", "q") == 2, 10, 0.05, "the requeue after RETRY")
        assert show(c, scheduled)["state"] == b"active"
    result = subprocess.run([sys.executable, "-m", "disq.aof.check", str(node.dir / "disque.aof")],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0 and "AOF is valid (3 records)" in result.stdout, result


# -- a cluster ------------------------------------------------------------------------------

def test_a_copy_keeps_the_fields_and_is_requeued_not_before_the_due_time(
        start_node: Callable[..., DisqProcess]) -> None:
    nodes = form_cluster([start_node("--cluster-node-timeout", "1000") for _ in range(3)])
    origin, replicas = nodes[0], nodes[1:]
    due = now_ms() + 2500
    with RawClient(origin.port) as c:
        job_id = c.add("q", "scheduled", "AT", due, "PRIORITY", 9, "GROUP", "g",
                       "REPLICATE", 3, "RETRY", 1)
    for replica in replicas:
        with RawClient(replica.port) as c:
            info = show(c, job_id)
            assert (info["priority"], info["group"]) == (9, b"g")
            # on this node's clock (the same machine's here): late by the estimate of
            # the origin's offset, within its uncertainty (a few ms on a quiet machine;
            # the round trips of a loaded one widen it), never early
            assert due <= info["due-ms"] <= due + LATE_MAX_MS, info["due-ms"] - due
            assert info["state"] == b"active"
            # requeued here after RETRY, counted from the due time (+/- 250 ms)
            assert info["next-requeue-within"] >= due + 750 - now_ms()
    origin.kill()
    assert now_ms() < due, "the origin must die before the due time for this test"
    [(received, entry)] = consume(replicas[0].port, 1)
    assert entry[1] == job_id and entry[-8:-3] == [b"priority", 9, b"group", b"g", b"due-ms"]
    assert due <= entry[-3] <= due + LATE_MAX_MS  # this node's clock: never early
    assert received >= due
