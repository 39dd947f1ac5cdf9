"""GROUP-CONCURRENCY and GROUP-RATE's sans-IO part (grouplimits.py) with the parking of
queue.PriorityJobs: a group held back leaves the turns, the others are served, and it
comes back when a job of it ends, its token comes or the limits change; and the
policy fields' parsing and wire form (policies.py, queue_requests.py)."""

from __future__ import annotations

import pytest

from disq.errors import DisqError
from disq.grouplimits import GroupLimits
from disq.job import ACKED, ACTIVE, DEFAULT_PRIORITY, QUEUED, Job, JobExt
from disq.policies import QueueDefaults, QueuePolicy
from disq.queue import PriorityJobs
from disq.queue_requests import QPolicySet, check_defaults
from disq.requests import AddJob

_count = 0


def make_job(group: bytes | None, ctime: int, priority: int = DEFAULT_PRIORITY) -> Job:
    global _count
    _count += 1
    job = Job(b"D-00000000-%024d-05a1" % _count, b"q", b"body", QUEUED, ctime, 0, 0, 60, 1)
    job.ext = JobExt(priority, group)
    return job


def deliver(jobs: PriorityJobs, limits: GroupLimits, now: int = 0) -> Job | None:
    """What Consumers.take does with a grouped queue: the woken groups back, then the
    next admitted job, marked active as a delivery marks it."""
    limits.wake(jobs, now)
    job = jobs.pop_admitted(limits, now)
    if job is not None:
        job.state = ACTIVE
    return job


def group_of(job: Job | None) -> bytes | None:
    assert job is not None and job.ext is not None
    return job.ext.group


def filled(*groups: tuple[bytes, int]) -> PriorityJobs:
    jobs = PriorityJobs()
    ctime = 0
    for group, count in groups:
        for _ in range(count):
            ctime += 1
            jobs.add(make_job(group, ctime))
    return jobs


def test_a_group_at_its_cap_is_parked_and_the_others_are_served() -> None:
    jobs = filled((b"a", 3), (b"b", 3))
    limits = GroupLimits(1, 0.0, now_ms=0)
    first = deliver(jobs, limits)
    assert group_of(first) == b"a"
    assert [group_of(deliver(jobs, limits)) for _ in range(1)] == [b"b"]
    assert deliver(jobs, limits) is None  # both at their cap: parked, nothing scanned again
    assert len(jobs) == 4 and limits.cap_parked == {b"a", b"b"}
    assert jobs.first() is None  # nothing deliverable; the jobs stay listed
    assert sorted(group_of(j) for j in jobs) == [b"a", b"a", b"b", b"b"]
    assert first is not None
    first.state = ACKED  # an end: its group comes back at once
    assert limits.job_ended(jobs, first)
    assert group_of(deliver(jobs, limits)) == b"a"
    assert deliver(jobs, limits) is None


def test_jobs_without_a_group_are_not_limited() -> None:
    jobs = filled((b"a", 2))
    for ctime in (10, 11):
        job = make_job(None, ctime)
        job.ext = None
        jobs.add(job)
    limits = GroupLimits(1, 0.0, now_ms=0)
    got = [deliver(jobs, limits) for _ in range(4)]
    assert [j is not None and j.ext is None for j in got] == [False, True, True, False]
    assert got[3] is None


def test_a_parked_group_takes_new_jobs_and_gives_them_up_on_remove() -> None:
    jobs = filled((b"a", 1), (b"b", 1))
    limits = GroupLimits(1, 0.0, now_ms=0)
    running = deliver(jobs, limits)
    jobs.add(make_job(b"a", 5, priority=7))  # parked or not, a job of a is added
    assert group_of(deliver(jobs, limits)) == b"b"
    assert deliver(jobs, limits) is None
    late = make_job(b"a", 6)
    jobs.add(late)  # into the parked group
    assert len(jobs) == 2 and jobs.first() is None
    assert jobs.remove(late) and len(jobs) == 1
    assert not jobs.remove(late)
    assert running is not None
    running.state = ACKED
    assert limits.refresh(jobs, 0)  # the cron finds the end too
    back = deliver(jobs, limits)
    assert back is not None and back.ext is not None and back.ext.priority == 7
    assert len(jobs) == 0


def test_a_requeued_run_ends_it_and_the_others_nodes_runs_count() -> None:
    jobs = filled((b"a", 3))
    limits = GroupLimits(2, 0.0, now_ms=0)
    first = deliver(jobs, limits)
    assert first is not None and deliver(jobs, limits) is not None
    assert deliver(jobs, limits) is None
    first.nacks += 1  # delivered again since: that run ended (a NACK)
    first.state = QUEUED
    assert limits.refresh(jobs, 0)
    assert deliver(jobs, limits) is not None
    limits.elsewhere = {b"a": 1}  # another node runs one: 2 here would be 3
    limits.refresh(jobs, 0)
    jobs.add(make_job(b"a", 50))
    assert deliver(jobs, limits) is None
    limits.elsewhere = {b"a": 2}
    assert not limits.refresh(jobs, 0)
    assert limits.running_here() == 2


def test_group_rate_parks_until_the_next_token() -> None:
    jobs = filled((b"a", 3), (b"b", 1))
    limits = GroupLimits(0, 2.0, now_ms=0)  # 2 a second per group: a token each 500 ms
    assert [group_of(deliver(jobs, limits, 0)) for _ in range(2)] == [b"a", b"b"]
    assert deliver(jobs, limits, 0) is None
    wake = limits.next_wake_ms()
    assert wake is not None and 400 < wake <= 501
    assert deliver(jobs, limits, wake - 1) is None
    assert group_of(deliver(jobs, limits, wake)) == b"a"
    assert deliver(jobs, limits, wake) is None


def test_limits_changed_or_gone_release_every_parked_group() -> None:
    jobs = filled((b"a", 2), (b"b", 2))
    limits = GroupLimits(1, 0.0, now_ms=0)
    assert deliver(jobs, limits) and deliver(jobs, limits)
    assert deliver(jobs, limits) is None
    limits.set_limits(2, 0.0, jobs)
    assert not limits.cap_parked
    assert {group_of(deliver(jobs, limits)) for _ in range(2)} == {b"a", b"b"}
    limits.release(jobs)
    assert jobs.pop_first() is None and len(jobs) == 0


def test_tail_and_iteration_list_the_parked_jobs_last() -> None:
    jobs = filled((b"a", 2), (b"b", 2))
    limits = GroupLimits(1, 0.0, now_ms=0)
    deliver(jobs, limits)  # a1 runs: a parked at the next meeting
    deliver(jobs, limits)  # b1
    deliver(jobs, limits)  # nothing: both parked
    names = [j.ctime for j in jobs]
    assert sorted(names) == [2, 4] and len(jobs.tail(10)) == 2
    assert [j.ctime for j in jobs.tail(10)] == list(reversed(names))


# -- the policy fields ------------------------------------------------------------------------
def test_the_new_fields_parse_with_their_bounds() -> None:
    request = QPolicySet.parse([b"QPOLICY", b"q", b"SET", b"RETRY", b"0", b"TTL", b"60",
                                b"REPLICATE", b"1", b"MAXLEN", b"9", b"GROUP-CONCURRENCY",
                                b"3", b"GROUP-RATE", b"2.5"])
    assert (request.retry, request.ttl, request.replicate, request.maxlen,
            request.group_concurrency, request.group_rate) == (0, 60, 1, 9, 3, 2.5)
    for args in ([b"TTL", b"0"], [b"RETRY", b"-1"], [b"REPLICATE", b"65536"],
                 [b"MAXLEN", b"4294967296"], [b"GROUP-CONCURRENCY", b"1000001"],
                 [b"GROUP-RATE", b"0"], [b"TTL", b"1.5"], [b"MAXLEN"]):
        with pytest.raises(DisqError):
            QPolicySet.parse([b"QPOLICY", b"q", b"SET", *args])


def test_defaults_that_every_addjob_would_refuse_are_refused() -> None:
    check_defaults(0, 0, 1)
    check_defaults(30, 60, 0)
    check_defaults(-1, 5, 0)
    for retry, ttl, replicate in ((0, 0, 0), (0, 0, 2), (61, 60, 0)):
        with pytest.raises(DisqError):
            check_defaults(retry, ttl, replicate)


def test_defaults_fill_only_what_the_addjob_does_not_give() -> None:
    defaults = QueueDefaults(retry=5, ttl=60, replicate=2, maxlen=10)
    plain = AddJob(b"q", b"x")
    defaults.apply(plain)
    assert (plain.retry, plain.ttl, plain.repl, plain.maxlen) == (5, 60, 2, 10)
    own = AddJob(b"q", b"x", repl=1, retry=0, ttl=86400, maxlen=3)
    defaults.apply(own)
    assert (own.retry, own.ttl, own.repl, own.maxlen) == (0, 86400, 1, 3)


def test_the_wire_form_carries_the_new_fields_and_refuses_bad_ones() -> None:
    policy = QueuePolicy(b"q", defaults=QueueDefaults(0, 60, 1, 9), group_concurrency=3,
                         group_rate=2.5, version=7, origin="n")
    wire = policy.to_wire()
    assert len(wire) == 17
    back = QueuePolicy.from_wire(wire)
    assert back is not None and back.defaults is not None
    assert (back.defaults.retry, back.defaults.ttl, back.defaults.replicate,
            back.defaults.maxlen, back.group_concurrency, back.group_rate) == (
        0, 60, 1, 9, 3, 2.5)
    assert len(QueuePolicy(b"q", rate=1.0).to_wire()) == 9  # as older nodes read it
    only_groups = QueuePolicy.from_wire(QueuePolicy(b"q", group_rate=1.0).to_wire())
    assert only_groups is not None and only_groups.defaults is None
    for index, bad in ((11, -2), (12, -1), (13, 65536), (14, 2**32), (15, -1), (16, 1),
                       (16, -1.0), (12, "60")):
        broken = list(wire)
        broken[index] = bad
        assert QueuePolicy.from_wire(broken) is None, (index, bad)
    assert QueuePolicy.from_wire(wire[:12]) is None


def test_a_peers_group_counts_are_checked_whole() -> None:
    from disq.replication.failures import _group_counts
    assert _group_counts([[b"a", 2], [b"b", 1]]) == {b"a": 2, b"b": 1}
    assert _group_counts([]) == {}
    for bad in (None, [[b"a"]], [[b"a", 0]], [[b"", 1]], [[b"a" * 257, 1]], [["a", 1]],
                [[b"a", 2**32]], [[b"a", 1.0]], [[b"x", 1]] * 10_001):
        assert _group_counts(bad) is None, bad


def test_the_tail_of_many_parked_jobs_is_read_from_its_end() -> None:
    jobs = filled((b"a", 3), (b"b", 3))
    jobs.add(make_job(b"a", 100, priority=5))
    limits = GroupLimits(1, 0.0, now_ms=0)
    while deliver(jobs, limits) is not None:
        pass
    everything = list(jobs)
    assert len(everything) == 5 and jobs.first() is None
    for count in range(7):
        assert jobs.tail(count) == list(reversed(everything))[:count]
