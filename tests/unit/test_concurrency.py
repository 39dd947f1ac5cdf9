"""CONCURRENCY's sans-IO part (concurrency.py): the shares every node computes alike, and
the jobs counted as running here."""

from __future__ import annotations

from disq.concurrency import ConcurrencyCap, shares
from disq.job import ACKED, ACTIVE, Job
from disq.policies import QueuePolicy


def test_shares_add_up_to_the_limit_and_agree() -> None:
    assert shares(3, {"a": 1.0, "b": 1.0, "c": 1.0}) == {"a": 1, "b": 1, "c": 1}
    assert shares(2, {"c": 1.0, "b": 1.0, "a": 1.0}) == {"a": 1, "b": 1, "c": 0}  # ties: IDs
    assert shares(10, {"a": 3.0, "b": 1.0}) == {"a": 8, "b": 2}  # 7.5 / 2.5: one more to a
    assert shares(4, {"a": 0.0, "b": 0.0, "c": 0.0}) == {"a": 2, "b": 1, "c": 1}  # no demand
    assert shares(5, {"a": 5.0, "b": 0.0}) == {"a": 5, "b": 0}
    for limit in range(1, 20):
        demands = {"a": 0.3, "b": 1.7, "c": 2.9, "d": 0.0}
        assert sum(shares(limit, demands).values()) == limit


def job(n: int) -> Job:
    return Job(b"D-00000000-%024d-05a1" % n, b"q", b"x", ACTIVE, n, 0, 0, 60, 1)


def test_a_job_runs_until_it_ends_or_is_delivered_again() -> None:
    cap = ConcurrencyCap(2, now_ms=0, nodes=1)
    first, second = job(1), job(2)
    assert not cap.full()
    cap.started(first)
    cap.started(second)
    assert cap.full() and cap.refused == 1
    first.state = ACKED  # ended
    assert not cap.full() and list(cap.running) == [second.id]
    cap.started(first)  # (delivered again, say)
    second.nacks += 1  # requeued since: not this delivery any more
    assert cap.has_room()
    assert ConcurrencyCap(2, now_ms=0, nodes=3).share == 0  # even, rounded down


def test_a_policy_s_concurrency_travels() -> None:
    wire = QueuePolicy(b"q", concurrency=7).to_wire()
    assert len(wire) == 11 and wire[9] == -1
    policy = QueuePolicy.from_wire(wire)
    assert policy is not None and (policy.concurrency, policy.result_ttl) == (7, -1)
    assert QueuePolicy.from_wire([*wire[:10], 0]) is not None
    assert QueuePolicy.from_wire([*wire[:10], -1]) is None
