"""When jobs fail (disq's extensions) through Client and AsyncClient (each
test runs with both) against one real node: queue policies, MAXDELIVERIES and dead
letters in the typed `Job`/`JobInfo`, NACK DELAY-MS, DEADLETTER REQUEUE."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest
from disq_client import QueuePolicy, ResponseError
from nodes_at import addr
from support import DisqProcess

Connect = Callable[..., Any]


def test_queue_policy_set_get_del(node: DisqProcess, connect: Connect) -> None:
    c = connect(addr(node))
    assert c.qpolicy_get("pq") is None
    assert c.qpolicy_set("pq", max_deliveries=5, backoff=(100, 2000)) == "OK"
    policy = c.qpolicy_get("pq")
    assert policy == QueuePolicy("pq", 5, "dead:pq", (100, 2000), None)
    assert isinstance(policy, QueuePolicy)
    # the fields given replace the policy's, the others stay
    assert c.qpolicy_set("pq", rate=2.5, deadletter="graveyard") == "OK"
    assert c.qpolicy_get("pq") == QueuePolicy("pq", 5, "graveyard", (100, 2000), 2.5)
    c.qpolicy_set("pq", rate=10)
    policy = c.qpolicy_get("pq")
    assert policy is not None and policy.rate == 10.0 and isinstance(policy.rate, float)
    assert c.qpolicy_del("pq") is True
    assert c.qpolicy_del("pq") is False
    assert c.qpolicy_get("pq") is None
    # a policy with RATE alone: no limit on deliveries, no back-off
    c.qpolicy_set("slowly", rate=0.5)
    assert c.qpolicy_get("slowly") == QueuePolicy("slowly", None, "dead:slowly", None, 0.5)


@pytest.mark.parametrize(("options", "message"), [
    ({}, "QPOLICY SET needs at least one of MAXDELIVERIES, DEADLETTER, BACKOFF, RATE"),
    ({"max_deliveries": 0}, "MAXDELIVERIES must be between 1 and 65535"),
    ({"max_deliveries": 65536}, "MAXDELIVERIES must be between 1 and 65535"),
    ({"backoff": (500, 100)}, "BACKOFF needs base-ms and max-ms"),
    ({"rate": 0}, "RATE must be a number of jobs per second"),
    ({"rate": -1.5}, "RATE must be a number of jobs per second"),
    ({"rate": float("nan")}, "RATE must be a number of jobs per second"),
    ({"deadletter": "bq"}, "DEADLETTER must be another queue than the queue itself"),
])
def test_bad_policies_are_refused(node: DisqProcess, connect: Connect,
                                  options: dict[str, Any], message: str) -> None:
    c = connect(addr(node))
    c.qpolicy_set("bq", max_deliveries=3)
    with pytest.raises(ResponseError, match=message) as caught:
        c.qpolicy_set("bq", **options)
    assert caught.value.code == "ERR"
    assert c.qpolicy_get("bq") == QueuePolicy("bq", 3, "dead:bq", None, None)  # unchanged


def test_max_deliveries_makes_a_dead_letter(node: DisqProcess, connect: Connect) -> None:
    c = connect(addr(node))
    job_id = c.add_job("work", "payload", max_deliveries=3, retry_ms=60_000)
    info = c.show(job_id)
    assert info is not None
    assert (info.max_deliveries, info.dead_from, info.dead_reason) == (3, None, None)
    [peeked] = c.qpeek("work", 1)
    assert (peeked.max_deliveries, peeked.dead_from, peeked.dead_reason) == (3, None, None)
    counters = []
    for _ in range(3):
        job = c.get_job("work", timeout_ms=3000, with_counters=True)
        assert job is not None and job.id == job_id
        assert (job.max_deliveries, job.dead_from) == (3, None)
        counters.append((job.nacks, job.additional_deliveries))
        assert c.nack(job_id) == 1
    assert counters == [(0, 0), (1, 0), (2, 0)]  # the third NACK made it a dead letter
    assert c.qlen("work") == 0 and c.qlen("dead:work") == 1
    info = c.show(job_id)
    assert info is not None
    assert (info.queue, info.state, info.body, info.nacks) == ("dead:work", "queued",
                                                              b"payload", 2)
    assert (info.max_deliveries, info.dead_from, info.dead_reason) == (
        3, "work", "max-deliveries")
    [peeked] = c.qpeek("dead:work", 1)
    assert (peeked.id, peeked.dead_from, peeked.dead_reason) == (job_id, "work",
                                                                 "max-deliveries")
    [scanned] = c.jscan_info(queue="dead:work")
    assert (scanned.id, scanned.dead_from) == (job_id, "work")
    dead = c.get_job("dead:work", nohang=True, with_counters=True)
    assert dead is not None
    assert (dead.id, dead.queue, dead.body, dead.nacks) == (job_id, "dead:work", b"payload", 2)
    assert (dead.max_deliveries, dead.dead_from, dead.dead_reason) == (
        3, "work", "max-deliveries")
    assert c.ack(job_id) == 1


def test_the_queue_policy_makes_dead_letters(node: DisqProcess, connect: Connect) -> None:
    """A job without MAXDELIVERIES of its own follows the policy (max_deliveries 0),
    and goes to the policy's DEADLETTER; plain jobs of other queues show no new field."""
    c = connect(addr(node))
    c.qpolicy_set("pol", max_deliveries=1, deadletter="graveyard")
    job_id = c.add_job("pol", "a")
    job = c.get_job("pol", timeout_ms=3000, with_counters=True)
    assert job is not None and job.id == job_id
    assert (job.max_deliveries, job.dead_from, job.dead_reason) == (None, None, None)
    assert c.nack(job_id) == 1
    assert c.qlen("graveyard") == 1
    info = c.show(job_id)
    assert info is not None and info.queue == "graveyard"
    assert (info.max_deliveries, info.dead_from, info.dead_reason) == (
        0, "pol", "max-deliveries")
    plain = c.add_job("other", "p")
    info = c.show(plain)
    assert info is not None
    assert (info.priority, info.max_deliveries, info.dead_from, info.dead_reason) == (
        None, None, None, None)
    c.qpolicy_del("pol")


def test_add_jobs_with_max_deliveries(node: DisqProcess, connect: Connect) -> None:
    c = connect(addr(node))
    ids = c.add_jobs("many", [b"1", b"2"], max_deliveries=7)
    assert [c.show(job_id).max_deliveries for job_id in ids] == [7, 7]
    with pytest.raises(ResponseError, match="MAXDELIVERIES must be between 1 and 65535"):
        c.add_job("many", b"x", max_deliveries=0)


def test_nack_with_a_delay(node: DisqProcess, connect: Connect) -> None:
    c = connect(addr(node))
    job_id = c.add_job("later", "x", retry_ms=60_000)
    assert c.get_job("later", nohang=True) is not None
    nacked = time.monotonic()
    assert c.nack(job_id, delay_ms=600) == 1
    assert c.qlen("later") == 0
    info = c.show(job_id)
    assert info is not None and info.nacks == 1  # counted when NACKed
    job = c.get_job("later", timeout_ms=5000, with_counters=True)
    assert time.monotonic() - nacked >= 0.6  # never before its delay
    assert job is not None and (job.id, job.nacks) == (job_id, 1)
    assert c.nack(job_id) == 1  # no delay: queued again at once
    assert c.qlen("later") == 1
    with pytest.raises(ResponseError, match="DELAY-MS time must be a non negative number"):
        c.nack(job_id, delay_ms=-5)


def test_requeue_dead(node: DisqProcess, connect: Connect) -> None:
    c = connect(addr(node))
    ids = c.add_jobs("rq", [b"j%d" % i for i in range(5)], max_deliveries=1)
    for _ in ids:
        job = c.get_job("rq", nohang=True)
        assert job is not None
        c.nack(job.id)
    assert c.qlen("dead:rq") == 5
    assert c.requeue_dead("dead:rq", count=2) == 2
    assert (c.qlen("rq"), c.qlen("dead:rq")) == (2, 3)
    assert c.requeue_dead("dead:rq") == 3
    assert (c.qlen("rq"), c.qlen("dead:rq")) == (5, 0)
    info = c.show(ids[0])
    assert info is not None
    assert (info.queue, info.nacks, info.additional_deliveries) == ("rq", 0, 0)
    assert (info.max_deliveries, info.dead_from, info.dead_reason) == (1, None, None)
    assert c.requeue_dead("dead:rq") == 0
    with pytest.raises(ResponseError, match="'plain' is not a dead-letter queue"):
        c.requeue_dead("plain")
    with pytest.raises(ResponseError, match="COUNT must be a number greater than zero"):
        c.requeue_dead("dead:rq", count=0)
