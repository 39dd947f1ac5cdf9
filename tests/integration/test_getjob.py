"""GETJOB on a single node: options, reply shapes, errors, blocking consumers."""

from __future__ import annotations

import time

import jobutil
import pytest
from jobutil import NULL_ARRAY, RawClient, Status, assert_error
from support import wait_for

shared_disq = jobutil.shared_disq
node = jobutil.node
c = jobutil.c


def blocked(client: RawClient) -> int:
    return int(client.info_field("blocked_clients"))


def assert_job_entry(entry: list, queue: bytes, job_id: bytes, body: bytes) -> None:
    assert entry == [queue, job_id, body]
    assert all(type(item) is bytes for item in entry), entry  # bulk strings, no status


# -- non-blocking ------------------------------------------------------------------------

def test_nohang_empty_is_null_array(c: RawClient) -> None:
    assert c.call("GETJOB", "NOHANG", "FROM", "q") is NULL_ARRAY
    c.add("other", "x")
    assert c.call("GETJOB", "NOHANG", "FROM", "q") is NULL_ARRAY
    assert c.call("QLEN", "other") == 1


def test_empty_getjob_creates_the_queues_it_names(c: RawClient) -> None:
    """As Disque (needJobsForQueueName): a GETJOB that finds nothing creates every
    queue it names, NOHANG included, so QSTAT then describes them."""
    assert c.call("QSTAT", "fresh1") is NULL_ARRAY
    assert c.call("GETJOB", "NOHANG", "FROM", "fresh1", "fresh2") is NULL_ARRAY
    for name in (b"fresh1", b"fresh2"):
        stat = c.call("QSTAT", name)
        assert stat[:4] == [b"name", name, b"len", 0]


def test_nohang_wire_format(node) -> None:
    with node.connect() as sock:
        sock.sendall(b"GETJOB NOHANG FROM q\r\n")
        data = b""
        while not data.endswith(b"\r\n"):
            data += sock.recv(100)
    assert data == b"*-1\r\n"


def test_nohang_null_in_redis_py(r) -> None:
    assert r.execute_command("GETJOB", "NOHANG", "FROM", "q") is None


def test_single_job_shape(c: RawClient) -> None:
    job_id = c.add("q", "hello")
    got = c.call("GETJOB", "FROM", "q")
    assert isinstance(got, list) and len(got) == 1
    assert_job_entry(got[0], b"q", job_id, b"hello")


def test_fifo_order(c: RawClient) -> None:
    ids = [c.add("q", f"b{i}") for i in range(5)]
    got = [c.call("GETJOB", "NOHANG", "FROM", "q")[0][1] for _ in range(5)]
    assert got == ids
    assert c.call("GETJOB", "NOHANG", "FROM", "q") is NULL_ARRAY


def test_fetched_job_is_active_not_deleted(c: RawClient) -> None:
    job_id = c.add("q", "x")
    c.call("GETJOB", "FROM", "q")
    job = c.show(job_id)
    assert job["state"] == b"active"
    assert c.call("QLEN", "q") == 0


def test_count(c: RawClient) -> None:
    ids = [c.add("q", f"b{i}") for i in range(5)]
    got = c.call("GETJOB", "COUNT", 3, "FROM", "q")
    assert [e[1] for e in got] == ids[:3]
    assert [e[2] for e in got] == [b"b0", b"b1", b"b2"]
    got = c.call("GETJOB", "COUNT", 10, "FROM", "q")
    assert [e[1] for e in got] == ids[3:]
    assert c.call("GETJOB", "NOHANG", "COUNT", 10, "FROM", "q") is NULL_ARRAY


def test_count_large_queue(c: RawClient) -> None:
    c.send_raw(b"".join(RawClient.encode("ADDJOB", "q", str(i), 0) for i in range(2500)))
    ids = [c.read() for _ in range(2500)]
    got = c.call("GETJOB", "COUNT", 1000, "FROM", "q")
    assert [e[1] for e in got] == ids[:1000]
    got = c.call("GETJOB", "COUNT", 5000, "FROM", "q")
    assert [e[1] for e in got] == ids[1000:]
    assert c.call("QLEN", "q") == 0


def test_withcounters(c: RawClient) -> None:
    job_id = c.add("q", "body")
    got = c.call("GETJOB", "WITHCOUNTERS", "FROM", "q")
    assert got == [[b"q", job_id, b"body", b"nacks", 0, b"additional-deliveries", 0]]
    entry = got[0]
    assert [type(x) for x in entry] == [bytes, bytes, bytes, bytes, int, bytes, int]
    assert c.call("NACK", job_id) == 1
    assert c.call("NACK", job_id) == 0  # already queued
    got = c.call("GETJOB", "WITHCOUNTERS", "FROM", "q")
    assert got == [[b"q", job_id, b"body", b"nacks", 1, b"additional-deliveries", 0]]
    assert c.call("ENQUEUE", job_id) == 1
    got = c.call("GETJOB", "WITHCOUNTERS", "COUNT", 5, "FROM", "q")
    assert got == [[b"q", job_id, b"body", b"nacks", 1, b"additional-deliveries", 1]]


def test_withcounters_count(c: RawClient) -> None:
    a, b = c.add("q", "a"), c.add("q", "b")
    got = c.call("GETJOB", "COUNT", 2, "WITHCOUNTERS", "FROM", "q")
    assert [len(e) for e in got] == [7, 7]
    assert [e[1] for e in got] == [a, b]


def test_from_several_queues_round_robin(c: RawClient) -> None:
    a = [c.add("q1", f"a{i}") for i in range(3)]
    b = [c.add("q2", "b0")]
    cc = [c.add("q3", f"c{i}") for i in range(2)]
    got = c.call("GETJOB", "COUNT", 4, "FROM", "q1", "q2", "q3")
    assert [e[1] for e in got] == [a[0], b[0], cc[0], a[1]]
    assert [e[0] for e in got] == [b"q1", b"q2", b"q3", b"q1"]
    got = c.call("GETJOB", "COUNT", 10, "FROM", "q1", "q2", "q3")
    # every round starts again from the first queue: q1, then (q2 empty) q3
    assert [e[1] for e in got] == [a[2], cc[1]]


def test_from_several_queues_one_job_each_round(c: RawClient) -> None:
    a = [c.add("q1", f"a{i}") for i in range(3)]
    b = [c.add("q2", f"b{i}") for i in range(3)]
    got = c.call("GETJOB", "COUNT", 6, "FROM", "q1", "q2")
    assert [e[1] for e in got] == [a[0], b[0], a[1], b[1], a[2], b[2]]


def test_from_skips_missing_and_empty_queues(c: RawClient) -> None:
    job_id = c.add("q2", "x")
    got = c.call("GETJOB", "NOHANG", "FROM", "missing", "q2", "also-missing")
    assert got == [[b"q2", job_id, b"x"]]


def test_count_one_takes_first_queue_with_jobs(c: RawClient) -> None:
    c.add("q1", "a")
    b = c.add("q2", "b")
    c.call("GETJOB", "FROM", "q1")
    assert c.call("GETJOB", "FROM", "q1", "q2")[0][1] == b


def test_same_queue_twice(c: RawClient) -> None:
    ids = [c.add("q", str(i)) for i in range(3)]
    got = c.call("GETJOB", "COUNT", 2, "FROM", "q", "q")
    assert [e[1] for e in got] == ids[:2]


def test_options_after_from_are_queue_names(c: RawClient) -> None:
    j1 = c.add("COUNT", "in a queue named COUNT")
    got = c.call("GETJOB", "FROM", "COUNT")
    assert got == [[b"COUNT", j1, b"in a queue named COUNT"]]
    j2 = c.add("NOHANG", "x")
    got = c.call("GETJOB", "FROM", "q", "NOHANG")
    assert got == [[b"NOHANG", j2, b"x"]]
    # FROM FROM: a queue called FROM
    j3 = c.add("FROM", "y")
    assert c.call("GETJOB", "FROM", "FROM") == [[b"FROM", j3, b"y"]]
    # TIMEOUT after FROM is a queue name: no error, and NOHANG before FROM still works
    assert c.call("GETJOB", "NOHANG", "FROM", "q", "TIMEOUT", "abc") is NULL_ARRAY


def test_options_case_insensitive(c: RawClient) -> None:
    job_id = c.add("q", "x")
    got = c.call("getjob", "nohang", "WithCounters", "count", 2, "timeout", 10, "from", "q")
    assert got == [[b"q", job_id, b"x", b"nacks", 0, b"additional-deliveries", 0]]


def test_paused_out_queue_skipped(c: RawClient) -> None:
    c.add("q1", "a")
    b = c.add("q2", "b")
    assert c.call("PAUSE", "q1", "out") == b"out"
    assert c.call("GETJOB", "NOHANG", "FROM", "q1") is NULL_ARRAY
    assert c.call("GETJOB", "NOHANG", "COUNT", 5, "FROM", "q1", "q2") == [[b"q2", b, b"b"]]
    assert c.call("QLEN", "q1") == 1
    c.call("PAUSE", "q1", "in")  # only IN now: consumers may fetch again
    assert len(c.call("GETJOB", "NOHANG", "FROM", "q1")) == 1


# -- errors ------------------------------------------------------------------------------

@pytest.mark.parametrize("args", [
    ("q",), ("NOHANG",), ("COUNT", 1), ("TIMEOUT", 10), ("WITHCOUNTERS",), ("FROM",),
    ("NOHANG", "FROM"), ("BOGUS", "FROM", "q"), ("COUNT",), ("TIMEOUT",),
    ("NOHANG", "q", "FROM", "q"),
])
def test_syntax_errors(c: RawClient, args: tuple) -> None:
    c.add("q", "x")
    assert_error(c, "ERR syntax error", "GETJOB", *args)
    assert c.call("QLEN", "q") == 1


def test_arity(c: RawClient) -> None:
    assert_error(c, "ERR wrong number of arguments for 'getjob' command", "GETJOB")


COUNT_ERR = "ERR COUNT must be a number greater than zero"


@pytest.mark.parametrize("count", ["0", "-1", "abc", "1.5", "FROM"])
def test_count_errors(c: RawClient, count: str) -> None:
    c.add("q", "x")
    assert_error(c, COUNT_ERR, "GETJOB", "COUNT", count, "FROM", "q")
    assert c.call("QLEN", "q") == 1


@pytest.mark.parametrize(("timeout", "message"), [
    ("abc", "ERR timeout is not an integer or out of range"),
    ("FROM", "ERR timeout is not an integer or out of range"),
    ("1.5", "ERR timeout is not an integer or out of range"),
    ("-1", "ERR timeout is negative"),
])
def test_timeout_errors(c: RawClient, timeout: str, message: str) -> None:
    c.add("q", "x")
    assert_error(c, message, "GETJOB", "TIMEOUT", timeout, "FROM", "q")
    assert c.call("QLEN", "q") == 1


# -- blocking ----------------------------------------------------------------------------

def test_timeout_returns_null_after_timeout(c: RawClient) -> None:
    start = time.monotonic()
    assert c.call("GETJOB", "TIMEOUT", 300, "FROM", "q") is NULL_ARRAY
    took = time.monotonic() - start
    assert 0.25 <= took < 2.0, took
    assert blocked(c) == 0


def test_timeout_with_jobs_available_returns_at_once(c: RawClient) -> None:
    job_id = c.add("q", "x")
    start = time.monotonic()
    assert c.call("GETJOB", "TIMEOUT", 5000, "FROM", "q")[0][1] == job_id
    assert time.monotonic() - start < 1.0


def test_blocked_client_woken_by_addjob(node, c: RawClient) -> None:
    with RawClient(node.port) as consumer:
        consumer.send("GETJOB", "FROM", "q")
        wait_for(lambda: blocked(c) == 1, message="consumer blocked")
        assert c.qstat("q")["blocked"] == 1
        job_id = c.add("q", "wake up")
        got = consumer.read()
        assert_job_entry(got[0], b"q", job_id, b"wake up")
        assert len(got) == 1
        assert consumer.call("PING") == b"PONG"
    assert c.show(job_id)["state"] == b"active"
    assert c.call("QLEN", "q") == 0
    assert blocked(c) == 0
    assert c.qstat("q")["blocked"] == 0


def test_blocked_client_gets_exactly_one_job_even_with_count(node, c: RawClient) -> None:
    with RawClient(node.port) as consumer:
        consumer.send("GETJOB", "COUNT", 10, "FROM", "q")
        wait_for(lambda: blocked(c) == 1, message="consumer blocked")
        # three jobs in one write: the consumer still gets one
        c.send_raw(b"".join(RawClient.encode("ADDJOB", "q", f"j{i}", 0) for i in range(3)))
        ids = [c.read() for _ in range(3)]
        got = consumer.read()
        assert len(got) == 1
        assert got[0][1] == ids[0]
        assert c.call("QLEN", "q") == 2
        assert consumer.pending(0.05) == b""


def test_blocked_withcounters_reply(node, c: RawClient) -> None:
    with RawClient(node.port) as consumer:
        consumer.send("GETJOB", "WITHCOUNTERS", "COUNT", 3, "FROM", "q")
        wait_for(lambda: blocked(c) == 1, message="consumer blocked")
        job_id = c.add("q", "x")
        assert consumer.read() == [[b"q", job_id, b"x", b"nacks", 0,
                                    b"additional-deliveries", 0]]


def test_blocked_on_several_queues(node, c: RawClient) -> None:
    with RawClient(node.port) as consumer:
        consumer.send("GETJOB", "FROM", "q1", "q2", "q3")
        wait_for(lambda: blocked(c) == 1, message="consumer blocked")
        assert [c.qstat(q)["blocked"] for q in ("q1", "q2", "q3")] == [1, 1, 1]
        job_id = c.add("q2", "x")
        assert consumer.read() == [[b"q2", job_id, b"x"]]
        assert [c.qstat(q)["blocked"] for q in ("q1", "q2", "q3")] == [0, 0, 0]
        c.add("q1", "y")
        assert c.call("QLEN", "q1") == 1
        assert consumer.pending(0.05) == b""


def test_blocked_clients_served_in_arrival_order(node, c: RawClient) -> None:
    consumers = [RawClient(node.port) for _ in range(4)]
    try:
        for i, consumer in enumerate(consumers):
            consumer.send("GETJOB", "FROM", "q")
            wait_for(lambda i=i: blocked(c) == i + 1, message=f"consumer {i} blocked")
        assert c.qstat("q")["blocked"] == 4
        ids = [c.add("q", f"j{i}") for i in range(4)]
        for consumer, job_id in zip(consumers, ids, strict=True):
            assert consumer.read()[0][1] == job_id
    finally:
        for consumer in consumers:
            consumer.close()


def test_blocked_clients_order_with_batch(node, c: RawClient) -> None:
    consumers = [RawClient(node.port) for _ in range(3)]
    try:
        for i, consumer in enumerate(consumers):
            consumer.send("GETJOB", "COUNT", 5, "FROM", "q")
            wait_for(lambda i=i: blocked(c) == i + 1, message=f"consumer {i} blocked")
        c.send_raw(b"".join(RawClient.encode("ADDJOB", "q", f"j{i}", 0) for i in range(5)))
        ids = [c.read() for _ in range(5)]
        assert [consumer.read() for consumer in consumers] == [
            [[b"q", ids[i], f"j{i}".encode()]] for i in range(3)]
        assert c.call("QLEN", "q") == 2
    finally:
        for consumer in consumers:
            consumer.close()


def test_a_blocked_consumer_is_served_after_the_command_that_queued_its_job(
        node, c: RawClient) -> None:
    """Not inside it: a NACK of two jobs, the less urgent first, gives the consumer
    the more urgent one (served once the NACK is done, as Disque serves after the
    command); the next request of the same read sees the job it left queued."""
    low = c.call("ADDJOB", "q", "low", 0, "PRIORITY", 200)
    high = c.call("ADDJOB", "q", "high", 0, "PRIORITY", 1)
    assert [entry[1] for entry in c.call("GETJOB", "COUNT", 2, "FROM", "q")] == [high, low]
    with RawClient(node.port) as consumer:
        consumer.send("GETJOB", "FROM", "q")
        wait_for(lambda: blocked(c) == 1, message="the consumer blocked")
        c.send_raw(RawClient.encode("NACK", low, high) + RawClient.encode("QLEN", "q"))
        assert [c.read(), c.read()] == [2, 1]
        assert consumer.read()[0][1] == high


def test_blocked_timeout_then_job_stays_queued(node, c: RawClient) -> None:
    with RawClient(node.port) as consumer:
        start = time.monotonic()
        consumer.send("GETJOB", "TIMEOUT", 200, "FROM", "q")
        assert consumer.read() is NULL_ARRAY
        assert time.monotonic() - start >= 0.15
        wait_for(lambda: blocked(c) == 0, message="consumer unblocked")
        c.add("q", "x")
        assert c.call("QLEN", "q") == 1


def test_disconnected_blocked_client_is_forgotten(node, c: RawClient) -> None:
    consumer = RawClient(node.port)
    consumer.send("GETJOB", "FROM", "q")
    wait_for(lambda: blocked(c) == 1, message="consumer blocked")
    consumer.close()
    wait_for(lambda: blocked(c) == 0, message="consumer gone")
    assert c.qstat("q")["blocked"] == 0
    job_id = c.add("q", "x")
    assert c.call("QLEN", "q") == 1
    assert c.show(job_id)["state"] == b"queued"


def test_blocked_on_paused_out_served_when_unpaused(node, c: RawClient) -> None:
    c.add("q", "early")  # a job is there, but the queue is paused out
    assert c.call("PAUSE", "q", "out") == b"out"
    with RawClient(node.port) as consumer:
        consumer.send("GETJOB", "FROM", "q")
        wait_for(lambda: blocked(c) == 1, message="consumer blocked")
        c.add("q", "late")  # does not wake it either
        assert consumer.pending(0.1) == b""
        assert c.call("QLEN", "q") == 2
        assert c.call("PAUSE", "q", "none") == b"none"
        got = consumer.read()
        assert len(got) == 1 and got[0][2] == b"early"
        assert c.call("QLEN", "q") == 1
    wait_for(lambda: blocked(c) == 0, message="consumer unblocked")


def test_blocked_on_paused_out_unpaused_to_in(node, c: RawClient) -> None:
    c.call("PAUSE", "q", "out")
    c.add("q", "x")
    with RawClient(node.port) as consumer:
        consumer.send("GETJOB", "FROM", "q")
        wait_for(lambda: blocked(c) == 1, message="consumer blocked")
        assert c.call("PAUSE", "q", "in") == b"in"  # OUT cleared, IN set
        assert consumer.read()[0][2] == b"x"


def test_pipelined_commands_wait_for_blocking_getjob(node, c: RawClient) -> None:
    with RawClient(node.port) as consumer:
        consumer.send_raw(RawClient.encode("GETJOB", "FROM", "q")
                          + RawClient.encode("PING")
                          + RawClient.encode("QLEN", "q")
                          + b"PING inline\r\n")  # Redis picks the format per request
        wait_for(lambda: blocked(c) == 1, message="consumer blocked")
        assert consumer.pending(0.1) == b""
        # both ADDJOBs in one write: the consumer's queued requests run after them
        c.send_raw(RawClient.encode("ADDJOB", "q", "a", 0) + RawClient.encode("ADDJOB", "q", "b", 0))
        assert isinstance(c.read(), Status) and isinstance(c.read(), Status)
        first = consumer.read()
        assert len(first) == 1 and first[0][2] == b"a"
        assert consumer.read() == b"PONG"
        assert consumer.read() == 1  # run after the GETJOB: one job left
        assert consumer.read() == b"inline"


def test_pipelined_after_timed_out_getjob(node) -> None:
    with RawClient(node.port) as consumer:
        consumer.send_raw(RawClient.encode("GETJOB", "TIMEOUT", 100, "FROM", "q")
                          + RawClient.encode("ADDJOB", "q", "x", 0)
                          + RawClient.encode("GETJOB", "FROM", "q"))
        assert consumer.read() is NULL_ARRAY
        job_id = consumer.read()
        assert isinstance(job_id, Status)
        assert consumer.read() == [[b"q", job_id, b"x"]]


def test_blocking_getjob_creates_queue(node, c: RawClient) -> None:
    assert c.qstat("newq") is None
    with RawClient(node.port) as consumer:
        consumer.send("GETJOB", "FROM", "newq")
        wait_for(lambda: blocked(c) == 1, message="consumer blocked")
        stat = c.qstat("newq")
        assert stat is not None and stat["blocked"] == 1 and stat["len"] == 0


def test_jobs_out_counts_blocked_delivery(node, c: RawClient) -> None:
    with RawClient(node.port) as consumer:
        consumer.send("GETJOB", "FROM", "q")
        wait_for(lambda: blocked(c) == 1, message="consumer blocked")
        c.add("q", "x")
        consumer.read()
    stat = c.qstat("q")
    assert (stat["jobs-in"], stat["jobs-out"]) == (1, 1)
