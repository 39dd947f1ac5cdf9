"""disq.queue.PriorityJobs (and Queue's switch to it) against a simple reference model:
jobs by priority, the groups of a priority in turn (round-robin), ctime in a group."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from disq.job import DEFAULT_PRIORITY, QUEUED, Job, JobExt
from disq.queue import PriorityJobs, Queue, SortedJobs

_count = 0


def make_job(ctime: int, priority: int = DEFAULT_PRIORITY, group: bytes | None = None) -> Job:
    global _count
    _count += 1
    job = Job(b"D-00000000-%024d-05a1" % _count, b"q", b"body", QUEUED, ctime, 0, 0, 1, 1)
    if priority != DEFAULT_PRIORITY or group is not None:
        job.ext = JobExt(priority, group)
    return job


def key(job: Job) -> tuple[int, bytes | None]:
    ext = job.ext
    return (DEFAULT_PRIORITY, None) if ext is None else (ext.priority, ext.group)


class Reference:
    """The order stated plainly: per priority a ring (a list) of non-empty groups, each
    a list of jobs sorted by (ctime, insertion)."""

    def __init__(self) -> None:
        self.rings: dict[int, list[bytes | None]] = {}
        self.groups: dict[tuple[int, bytes | None], list[tuple[int, int, Job]]] = {}
        self.seq = 0

    def __len__(self) -> int:
        return sum(map(len, self.groups.values()))

    def add(self, job: Job) -> None:
        priority, group = key(job)
        self.seq += 1
        jobs = self.groups.setdefault((priority, group), [])
        if not jobs:
            self.rings.setdefault(priority, []).append(group)  # joins at the back
        jobs.append((job.ctime, self.seq, job))
        jobs.sort(key=lambda item: item[:2])

    def _drop_if_empty(self, priority: int, group: bytes | None) -> None:
        if not self.groups[(priority, group)]:
            del self.groups[(priority, group)]
            self.rings[priority].remove(group)
            if not self.rings[priority]:
                del self.rings[priority]

    def remove(self, job: Job) -> bool:
        priority, group = key(job)
        jobs = self.groups.get((priority, group), [])
        for i, item in enumerate(jobs):
            if item[2] is job:
                del jobs[i]
                self._drop_if_empty(priority, group)
                return True
        return False

    def pop_first(self) -> Job | None:
        if not self.rings:
            return None
        priority = min(self.rings)
        ring = self.rings[priority]
        group = ring.pop(0)
        ring.append(group)  # served: to the back
        job = self.groups[(priority, group)].pop(0)[2]
        self._drop_if_empty(priority, group)
        return job

    def order(self) -> list[Job]:
        """The delivery order: pop a copy empty."""
        copy = Reference()
        copy.rings = {p: list(r) for p, r in self.rings.items()}
        copy.groups = {k: list(v) for k, v in self.groups.items()}
        out = []
        while (job := copy.pop_first()) is not None:
            out.append(job)
        return out


def check(pj: PriorityJobs | SortedJobs, ref: Reference) -> None:
    expected = ref.order()
    assert len(pj) == len(expected)
    assert [id(j) for j in pj] == [id(j) for j in expected]
    assert pj.first() is (expected[0] if expected else None)
    for k in (0, 1, 2, 3, 7, len(expected), len(expected) + 2):
        assert [id(j) for j in pj.head(k)] == [id(j) for j in expected[:k]], k
        assert [id(j) for j in pj.tail(k)] == [id(j) for j in expected[::-1][:k]], k


PRIORITIES = st.sampled_from([0, 1, 5, DEFAULT_PRIORITY, DEFAULT_PRIORITY, 255])
GROUPS = st.sampled_from([None, None, b"a", b"b", b"c", b""])
OPS = st.lists(
    st.one_of(
        st.tuples(st.just("add"), st.integers(0, 30), PRIORITIES, GROUPS),
        st.tuples(st.just("pop")),
        st.tuples(st.just("remove"), st.integers(0, 1000)),
        st.tuples(st.just("remove-absent"), PRIORITIES, GROUPS),
    ),
    max_size=120,
)


@settings(max_examples=300, deadline=None)
@given(OPS)
def test_random_operations_against_reference(ops: list[tuple[object, ...]]) -> None:
    pj, ref = PriorityJobs(), Reference()
    held: list[Job] = []
    for op in ops:
        if op[0] == "add":
            _, ctime, priority, group = op
            job = make_job(ctime, priority, group)  # type: ignore[arg-type]
            pj.add(job)
            ref.add(job)
            held.append(job)
        elif op[0] == "pop":
            job = pj.pop_first()
            assert job is ref.pop_first()
            if job is not None:
                held.remove(job)
        elif op[0] == "remove" and held:
            job = held.pop(op[1] % len(held))  # type: ignore[operator]
            assert pj.remove(job) and ref.remove(job)
            assert not pj.remove(job)  # gone: a second removal finds nothing
        elif op[0] == "remove-absent":
            _, priority, group = op
            stranger = make_job(10, priority, group)  # type: ignore[arg-type]
            assert not pj.remove(stranger)
        check(pj, ref)
    while held:
        job = pj.pop_first()
        assert job is ref.pop_first()
        held.remove(job)  # type: ignore[arg-type]
    assert len(pj) == 0 and pj.pop_first() is None and not pj._levels and not pj._order


def test_priorities_win_then_groups_take_turns_then_ctime() -> None:
    pj = PriorityJobs()
    a1, a2, a3 = (make_job(t, 5, b"a") for t in (1, 2, 3))
    b1 = make_job(4, 5, b"b")
    urgent = make_job(100, 0, b"a")
    plain = make_job(0)
    for job in (plain, a3, a1, a2, b1, urgent):
        pj.add(job)
    assert [pj.pop_first() for _ in range(6)] == [urgent, a1, b1, a2, a3, plain]


def test_fairness_ten_groups_one_with_a_hundred_times_the_jobs() -> None:
    pj = PriorityJobs()
    ctime = 0
    for _ in range(1000):  # the big group's backlog, queued first
        ctime += 1
        pj.add(make_job(ctime, group=b"big"))
    for g in range(9):
        for _ in range(10):
            ctime += 1
            pj.add(make_job(ctime, group=b"small%d" % g))
    first = [job_group_of(pj.pop_first()) for _ in range(20)]
    assert first[:10] == [b"big"] + [b"small%d" % g for g in range(9)]
    assert first[10:] == first[:10]  # and again: one each per round
    assert len(pj) == 1090 - 20


def job_group_of(job: Job | None) -> bytes | None:
    assert job is not None
    return key(job)[1]


def test_many_groups_head_is_lazy_and_tail_exact() -> None:
    """With 20,000 one-job groups behind one big group, head(3) and tail(3) answer
    without walking every job (no assertion on time: the result is checked)."""
    pj, ref = PriorityJobs(), Reference()
    jobs = [make_job(i, 7, b"g%d" % i) for i in range(20_000)]
    big = [make_job(20_000 + i, 7, b"big") for i in range(5)]
    for job in [*big, *jobs]:
        pj.add(job)
        ref.add(job)
    assert pj.head(3) == [big[0], jobs[0], jobs[1]]
    assert pj.tail(3) == [big[4], big[3], big[2]]  # the big group's last rounds
    assert pj.tail(7) == [big[4], big[3], big[2], big[1], jobs[-1], jobs[-2], jobs[-3]]


def test_queue_switches_on_first_job_with_priority_or_group() -> None:
    queue = Queue(b"q", 0)
    plain = [make_job(t) for t in (1, 2, 3)]
    for job in plain:
        queue.jobs.add(job)
    only_due = make_job(4)
    only_due.ext = JobExt(due=123)  # a scheduled job orders as a plain one
    queue.jobs_for(only_due).add(only_due)
    assert type(queue.jobs) is SortedJobs
    before = queue.jobs
    urgent = make_job(10, priority=1)
    queue.jobs_for(urgent).add(urgent)
    assert type(queue.jobs) is PriorityJobs
    assert queue.jobs._levels[DEFAULT_PRIORITY][None] is before  # adopted, not copied
    assert list(queue.jobs) == [urgent, *plain, only_due] and len(queue) == 5
    queue.compact()
    assert type(queue.jobs) is PriorityJobs  # not empty: stays
    while queue.jobs.pop_first() is not None:
        pass
    queue.compact()
    assert type(queue.jobs) is SortedJobs and len(queue) == 0


def test_plain_jobs_in_priority_jobs_keep_sorted_jobs_order() -> None:
    rng = random.Random(18)
    pj, sj = PriorityJobs(), SortedJobs()
    jobs = [make_job(rng.randrange(50)) for _ in range(3000)]
    for job in jobs:
        pj.add(job)
        sj.add(job)
    for job in rng.sample(jobs, 500):
        assert pj.remove(job) and sj.remove(job)
    assert list(pj) == list(sj)
    assert pj.head(10) == sj.head(10) and pj.tail(10) == sj.tail(10)
    assert [pj.pop_first() for _ in range(100)] == [sj.pop_first() for _ in range(100)]


@pytest.mark.parametrize("structure", [SortedJobs, PriorityJobs])
def test_reversed_and_clear(structure: type[SortedJobs] | type[PriorityJobs]) -> None:
    jobs = structure()
    made = [make_job(t) for t in range(2500)]  # several SortedJobs blocks
    for job in made:
        jobs.add(job)
    if structure is SortedJobs:
        assert list(reversed(jobs)) == made[::-1]  # type: ignore[call-overload]
    jobs.clear()
    assert len(jobs) == 0 and list(jobs) == [] and jobs.pop_first() is None
    assert jobs.head(3) == [] and jobs.tail(3) == []
