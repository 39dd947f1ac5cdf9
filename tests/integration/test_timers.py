"""Job timers on a single node: TTL expiry, RETRY requeue, DELAY, at-most-once jobs.

Requeue times carry a random error of a few hundred ms, so "not requeued" is checked
against a control job created at the same moment: once the control job has been
requeued, the other one would have been too.
"""

from __future__ import annotations

import time

import jobutil
from jobutil import NULL_ARRAY, RawClient
from support import wait_for

shared_disq = jobutil.shared_disq
node = jobutil.node
c = jobutil.c


def state(c: RawClient, job_id: bytes) -> bytes | None:
    job = c.show(job_id)
    return None if job is None else job["state"]


# -- TTL ---------------------------------------------------------------------------------

def test_ttl_expiry_queued_job(c: RawClient) -> None:
    start = time.monotonic()
    job_id = c.add("q", "x", "TTL", 1)
    keep = c.add("q", "y", "TTL", 60)
    assert state(c, job_id) == b"queued"
    wait_for(lambda: c.show(job_id) is None, timeout=2.5, message="job to expire")
    # As in Disque the expiry is whole seconds (unixtime + TTL): TTL 1 lives 0 to 1 s.
    assert time.monotonic() - start <= 2.0
    assert c.call("QLEN", "q") == 1
    assert [e[1] for e in c.call("QPEEK", "q", 10)] == [keep]
    assert c.info_field("registered_jobs") == "1"


def test_ttl_expiry_active_and_delayed_jobs(c: RawClient) -> None:
    fetched = c.add("q", "x", "TTL", 1)
    assert c.call("GETJOB", "FROM", "q")[0][1] == fetched
    delayed = c.add("q", "y", "TTL", 2, "DELAY", 1, "RETRY", 0)
    at_most_once = c.add("q", "z", "TTL", 1, "RETRY", 0)
    wait_for(lambda: c.show(fetched) is None and c.show(at_most_once) is None,
             timeout=2.5, message="jobs to expire")
    wait_for(lambda: c.show(delayed) is None, timeout=3, message="delayed job to expire")
    assert c.info_field("registered_jobs") == "0"
    assert c.call("QLEN", "q") == 0


def test_ttl_expiry_many_jobs(c: RawClient) -> None:
    n = 3000
    c.send_raw(b"".join(RawClient.encode("ADDJOB", f"q{i % 7}", "x", 0, "TTL", 1)
                        for i in range(n)))
    for _ in range(n):
        c.read()
    assert c.info_field("registered_jobs") == str(n)
    wait_for(lambda: c.info_field("registered_jobs") == "0", timeout=3,
             message="all jobs to expire")
    assert sum(c.call("QLEN", f"q{i}") for i in range(7)) == 0


# -- RETRY -------------------------------------------------------------------------------

def test_retry_requeues_unacked_job(c: RawClient) -> None:
    start = time.monotonic()
    job_id = c.add("q", "x", "RETRY", 1)
    assert c.call("GETJOB", "FROM", "q")[0][1] == job_id
    assert state(c, job_id) == b"active"
    wait_for(lambda: state(c, job_id) == b"queued", timeout=2.5, message="requeue")
    # requeued RETRY seconds (+/- a little) after it was queued
    assert time.monotonic() - start >= 0.6
    job = c.show(job_id)
    assert (job["additional-deliveries"], job["nacks"]) == (1, 0)
    assert c.call("QLEN", "q") == 1
    got = c.call("GETJOB", "WITHCOUNTERS", "FROM", "q")
    assert got == [[b"q", job_id, b"x", b"nacks", 0, b"additional-deliveries", 1]]
    stat = c.qstat("q")
    assert (stat["jobs-in"], stat["jobs-out"]) == (2, 2)


def test_retry_requeue_wakes_blocked_consumer(node, c: RawClient) -> None:
    job_id = c.add("q", "x", "RETRY", 1)
    c.call("GETJOB", "FROM", "q")
    with RawClient(node.port) as consumer:
        consumer.send("GETJOB", "WITHCOUNTERS", "TIMEOUT", 5000, "FROM", "q")
        got = consumer.read()
    assert got == [[b"q", job_id, b"x", b"nacks", 0, b"additional-deliveries", 1]]


def test_requeue_applies_only_to_unacked_retry_jobs(c: RawClient) -> None:
    """One control job (RETRY 1, delivered, not acked) paces the check of the others,
    all created at the same moment."""
    once = c.add("q", "once", "RETRY", 0)
    assert int(once[-4:], 16) % 2 == 0  # at-most-once: even TTL field in the ID
    acked = c.add("q", "acked", "RETRY", 1)
    control = c.add("q", "control", "RETRY", 1)
    assert len(c.call("GETJOB", "COUNT", 3, "FROM", "q")) == 3
    assert c.call("ACKJOB", acked) == 1
    dequeued = c.add("q", "dequeued", "RETRY", 1)
    assert c.call("DEQUEUE", dequeued) == 1
    idle = c.add("q", "idle", "RETRY", 1)
    wait_for(lambda: state(c, control) == b"queued", timeout=2.5, message="control requeue")
    assert c.show(control)["additional-deliveries"] == 1
    # RETRY 0, delivered: never queued again
    job = c.show(once)
    assert job["state"] == b"active"
    assert job["next-requeue-within"] is jobutil.NULL_BULK
    assert job["additional-deliveries"] == 0
    # acknowledged: gone for good
    assert c.show(acked) is None
    # DEQUEUE'd (active, never delivered) jobs are requeued like delivered ones
    wait_for(lambda: state(c, dequeued) == b"queued", timeout=1.5, message="dequeued requeue")
    assert c.show(dequeued)["additional-deliveries"] == 1
    # still queued: stays queued once, not counted as another delivery
    job = c.show(idle)
    assert job["state"] == b"queued" and job["additional-deliveries"] == 0
    assert sorted(e[1] for e in c.call("QPEEK", "q", 10)) == sorted([control, dequeued, idle])


def test_working_postpones_requeue(c: RawClient) -> None:
    worked = c.add("q", "worked", "RETRY", 1)
    control = c.add("q", "control", "RETRY", 1)
    c.call("GETJOB", "COUNT", 2, "FROM", "q")
    wait_for(lambda: c.show(worked)["next-requeue-within"] < 500, timeout=2,
             message="requeue time to approach")
    assert c.call("WORKING", worked) == 1
    wait_for(lambda: state(c, control) == b"queued", timeout=2.5, message="control requeue")
    assert state(c, worked) == b"active"
    wait_for(lambda: state(c, worked) == b"queued", timeout=2.5, message="postponed requeue")
    assert c.show(worked)["additional-deliveries"] == 1


# -- DELAY -------------------------------------------------------------------------------

def test_delay_queues_after_delay(c: RawClient) -> None:
    start = time.monotonic()
    job_id = c.add("q", "x", "DELAY", 1, "RETRY", 5)
    assert c.call("QLEN", "q") == 0
    assert state(c, job_id) == b"active"
    assert c.call("GETJOB", "NOHANG", "FROM", "q") is NULL_ARRAY
    wait_for(lambda: c.call("QLEN", "q") == 1, timeout=2.5, message="delayed job queued")
    assert time.monotonic() - start >= 0.9
    job = c.show(job_id)
    assert job["state"] == b"queued"
    assert job["additional-deliveries"] == 0  # the first queueing is not a redelivery
    assert 4000 <= job["next-requeue-within"] <= 5300


def test_delay_serves_blocked_consumer(node, c: RawClient) -> None:
    with RawClient(node.port) as consumer:
        consumer.send("GETJOB", "TIMEOUT", 5000, "FROM", "q")
        wait_for(lambda: c.info_field("blocked_clients") == "1", message="blocked")
        start = time.monotonic()
        job_id = c.add("q", "x", "DELAY", 1)
        assert consumer.pending(0.2) == b""  # not yet
        got = consumer.read()
        assert got == [[b"q", job_id, b"x"]]
        assert time.monotonic() - start >= 0.9


def test_delay_with_retry_zero(c: RawClient) -> None:
    job_id = c.add("q", "x", "DELAY", 1, "RETRY", 0)
    wait_for(lambda: state(c, job_id) == b"queued", timeout=2.5, message="queued")
    assert c.show(job_id)["next-requeue-within"] is jobutil.NULL_BULK


def test_delay_paused_in_postpones_retry_jobs_only(c: RawClient) -> None:
    retrying = c.add("q", "retrying", "DELAY", 1, "RETRY", 1)
    once = c.add("q", "once", "DELAY", 1, "RETRY", 0)
    assert c.call("PAUSE", "q", "in") == b"in"
    # at-most-once delayed jobs are queued anyway
    wait_for(lambda: state(c, once) == b"queued", timeout=2.5, message="RETRY 0 queued")
    assert state(c, retrying) == b"active"
    assert c.call("PAUSE", "q", "none") == b"none"
    wait_for(lambda: state(c, retrying) == b"queued", timeout=2.5, message="postponed job")
    assert c.call("QLEN", "q") == 2
