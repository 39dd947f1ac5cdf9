"""disq.timers.JobTimers: one bucketed heap for every job deadline."""

from __future__ import annotations

import random

from disq.job import ACTIVE, DELETED, Job
from disq.timers import JobTimers


def make_job(n: int) -> Job:
    return Job(b"D-00000000-%024d-05a1" % n, b"q", b"x", ACTIVE, n, 0, 0, 1, 1)


class Recorder:
    def __init__(self) -> None:
        self.calls: list[tuple[Job, int]] = []

    def __call__(self, job: Job, now: int) -> None:
        self.calls.append((job, now))


def test_schedule_reports_new_earliest() -> None:
    timers = JobTimers()
    a, b, c = make_job(1), make_job(2), make_job(3)
    assert timers.next_deadline() is None
    assert timers.schedule(a, 1000) is True
    assert timers.schedule(b, 2000) is False
    assert timers.schedule(c, 1000) is False  # same bucket: not a new deadline
    assert timers.schedule(c, 500) is True
    assert timers.next_deadline() == 500
    assert (a.awake, b.awake, c.awake) == (1000, 2000, 500)
    assert len(timers) == 4  # the stale reference of c at 1000 is still held


def test_schedule_zero_unschedules() -> None:
    timers = JobTimers()
    job = make_job(1)
    timers.schedule(job, 1000)
    assert timers.schedule(job, 0) is False
    assert job.awake == 0
    rec = Recorder()
    assert timers.run_due(10_000, rec, 100) == 0
    assert rec.calls == []


def test_run_due_in_time_order_and_only_due() -> None:
    timers = JobTimers()
    jobs = [make_job(i) for i in range(10)]
    whens = [5000, 1000, 3000, 3000, 9000, 2000, 7000, 1000, 4000, 6000]
    for job, when in zip(jobs, whens, strict=True):
        timers.schedule(job, when)
    rec = Recorder()
    assert timers.run_due(4000, rec, 100) == 6
    assert [j.awake for j, _ in rec.calls] == [0] * 6  # reset before process()
    got = [whens[jobs.index(j)] for j, _ in rec.calls]
    assert got == sorted(got) and set(got) <= {1000, 2000, 3000, 4000}
    assert all(now == 4000 for _, now in rec.calls)
    assert timers.next_deadline() == 5000
    rec2 = Recorder()
    assert timers.run_due(100_000, rec2, 100) == 4
    assert [whens[jobs.index(j)] for j, _ in rec2.calls] == [5000, 6000, 7000, 9000]
    assert timers.next_deadline() is None
    assert len(timers) == 0


def test_rescheduled_job_runs_once_at_new_time() -> None:
    timers = JobTimers()
    job = make_job(1)
    timers.schedule(job, 1000)
    timers.schedule(job, 3000)  # moved later: the 1000 entry is stale
    rec = Recorder()
    assert timers.run_due(2000, rec, 100) == 0
    assert timers.run_due(3000, rec, 100) == 1
    assert rec.calls == [(job, 3000)]
    timers.schedule(job, 5000)
    timers.schedule(job, 4000)  # moved earlier
    rec = Recorder()
    assert timers.run_due(10_000, rec, 100) == 1
    assert rec.calls == [(job, 10_000)]


def test_deleted_jobs_skipped() -> None:
    timers = JobTimers()
    a, b = make_job(1), make_job(2)
    timers.schedule(a, 1000)
    timers.schedule(b, 1000)
    a.state = DELETED
    rec = Recorder()
    assert timers.run_due(1000, rec, 100) == 1
    assert rec.calls == [(b, 1000)]


def test_limit_leaves_the_rest_for_later() -> None:
    timers = JobTimers()
    jobs = [make_job(i) for i in range(25)]
    for i, job in enumerate(jobs):
        timers.schedule(job, 1000 + (i // 10))  # buckets of 10 jobs
    stale = make_job(99)
    timers.schedule(stale, 1000)
    timers.schedule(stale, 50_000)
    rec = Recorder()
    assert timers.run_due(2000, rec, 7) == 7
    assert timers.next_deadline() == 1000
    assert timers.run_due(2000, rec, 7) == 7
    assert timers.run_due(2000, rec, 100) == 11
    assert [j for j, _ in rec.calls] == jobs  # each exactly once, in order
    assert timers.next_deadline() == 50_000


def test_process_may_reschedule() -> None:
    timers = JobTimers()
    jobs = [make_job(i) for i in range(5)]
    for job in jobs:
        timers.schedule(job, 1000)
    seen: list[Job] = []

    def process(job: Job, now: int) -> None:
        seen.append(job)
        if job.ctime % 2 == 0:
            timers.schedule(job, now + 500)  # later
    assert timers.run_due(1000, process, 100) == 5
    assert timers.next_deadline() == 1500
    assert timers.run_due(1500, process, 100) == 3
    assert [j.ctime for j in seen] == [0, 1, 2, 3, 4, 0, 2, 4]


def test_random_against_reference() -> None:
    rng = random.Random(3)
    timers = JobTimers()
    jobs = [make_job(i) for i in range(500)]
    expected: dict[int, int] = {}  # job index -> due time
    now = 0
    fired: list[tuple[int, int]] = []
    for _ in range(3000):
        op = rng.random()
        if op < 0.6:
            i = rng.randrange(len(jobs))
            when = now + rng.randrange(1, 2000)
            timers.schedule(jobs[i], when)
            expected[i] = when
        elif op < 0.7 and expected:
            i = rng.choice(list(expected))
            timers.schedule(jobs[i], 0)
            del expected[i]
        else:
            now += rng.randrange(0, 300)
            due = sorted((w, i) for i, w in expected.items() if w <= now)
            rec = Recorder()
            assert timers.run_due(now, rec, 10_000) == len(due)
            got = [(jobs.index(j), n) for j, n in rec.calls]
            assert sorted(i for i, _ in got) == sorted(i for _, i in due)
            due_at = {i: w for w, i in due}
            order = [due_at[i] for i, _ in got]
            assert order == sorted(order)  # earliest deadlines first
            fired.extend(got)
            for _, i in due:
                del expected[i]
            deadline = timers.next_deadline()
            if expected:
                assert deadline is not None and deadline <= min(expected.values())
    assert fired


def test_clear() -> None:
    timers = JobTimers()
    for i in range(10):
        timers.schedule(make_job(i), 1000 + i)
    timers.clear()
    assert len(timers) == 0 and timers.next_deadline() is None
    assert timers.run_due(10**9, Recorder(), 100) == 0
