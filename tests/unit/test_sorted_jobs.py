"""disq.queue.SortedJobs against a plain sorted list, through random operations."""

from __future__ import annotations

import bisect
import random

import pytest

from disq.job import QUEUED, Job
from disq.queue import _MAX_BLOCK, SortedJobs


def make_job(n: int, ctime: int) -> Job:
    return Job(b"D-00000000-%024d-05a1" % n, b"q", b"body", QUEUED, ctime, 0, 0, 1, 1)


class Reference:
    """Jobs ordered by (ctime, insertion order), kept with bisect."""

    def __init__(self) -> None:
        self.keys: list[tuple[int, int]] = []
        self.by_key: dict[tuple[int, int], Job] = {}
        self.key_of: dict[int, tuple[int, int]] = {}
        self.seq = 0

    def add(self, job: Job) -> None:
        self.seq += 1
        key = (job.ctime, self.seq)
        bisect.insort(self.keys, key)
        self.by_key[key] = job
        self.key_of[id(job)] = key

    def remove(self, job: Job) -> bool:
        key = self.key_of.pop(id(job), None)
        if key is None:
            return False
        del self.keys[bisect.bisect_left(self.keys, key)]
        del self.by_key[key]
        return True

    def pop_first(self) -> Job | None:
        if not self.keys:
            return None
        job = self.by_key[self.keys[0]]
        self.remove(job)
        return job

    def jobs(self) -> list[Job]:
        return [self.by_key[k] for k in self.keys]


def check_invariants(sj: SortedJobs, ref: Reference) -> None:
    expected = ref.jobs()
    assert len(sj) == len(expected)
    got = list(sj)
    assert len(got) == len(expected)
    assert all(a is b for a, b in zip(got, expected, strict=True))
    assert sj.first() is (expected[0] if expected else None)
    blocks, maxes = sj._blocks, sj._maxes
    assert len(blocks) == len(maxes)
    for block, high in zip(blocks, maxes, strict=True):
        assert block, "empty block left behind"
        assert len(block) <= _MAX_BLOCK
        assert block[-1].ctime == high
    assert maxes == sorted(maxes)


def test_empty() -> None:
    sj = SortedJobs()
    assert len(sj) == 0
    assert sj.pop_first() is None
    assert sj.first() is None
    assert sj.head(5) == [] and sj.tail(5) == []
    assert list(sj) == []
    assert sj.remove(make_job(1, 1)) is False


def test_ties_keep_insertion_order() -> None:
    sj, ref = SortedJobs(), Reference()
    jobs = [make_job(i, 100 if i % 2 else 50) for i in range(10)]
    for job in jobs:
        sj.add(job)
        ref.add(job)
    check_invariants(sj, ref)
    assert [j.ctime for j in sj] == [50] * 5 + [100] * 5


def test_remove_is_by_identity() -> None:
    sj = SortedJobs()
    a, b = make_job(1, 10), make_job(2, 10)
    sj.add(a)
    sj.add(b)
    twin = make_job(1, 10)  # same ID and ctime, different object
    assert sj.remove(twin) is False
    assert sj.remove(b) is True
    assert sj.remove(b) is False
    assert list(sj) == [a]


def test_head_and_tail() -> None:
    sj, ref = SortedJobs(), Reference()
    rng = random.Random(7)
    for i in range(3000):
        job = make_job(i, rng.randrange(10_000))
        sj.add(job)
        ref.add(job)
    expected = ref.jobs()
    for k in (0, 1, 2, 511, 1023, 1024, 1025, 2999, 3000, 5000):
        assert sj.head(k) == expected[:k]
        assert sj.tail(k) == expected[::-1][:k]


@pytest.mark.parametrize("seed", range(6))
def test_random_operations(seed: int) -> None:
    rng = random.Random(seed)
    sj, ref = SortedJobs(), Reference()
    live: list[Job] = []
    gone: list[Job] = []
    clock = 1_000
    n = 0
    # grow well past two blocks, then shrink, then mix
    phases = [(4000, 0.9), (3000, 0.2), (3000, 0.55)]
    for steps, p_add in phases:
        for _ in range(steps):
            if rng.random() < p_add or not live:
                n += 1
                if rng.random() < 0.7:
                    clock += rng.randrange(3)  # mostly increasing, with ties
                    ctime = clock
                else:
                    ctime = rng.randrange(clock + 1)  # an old job coming back
                job = make_job(n, ctime)
                sj.add(job)
                ref.add(job)
                live.append(job)
            else:
                op = rng.random()
                if op < 0.4:
                    job = sj.pop_first()
                    assert job is ref.pop_first()
                    live.remove(job)
                    gone.append(job)
                elif op < 0.9:
                    job = live.pop(rng.randrange(len(live)))
                    assert sj.remove(job) is True
                    assert ref.remove(job) is True
                    gone.append(job)
                elif gone:
                    assert sj.remove(rng.choice(gone)) is False
            if rng.random() < 0.01:
                check_invariants(sj, ref)
        check_invariants(sj, ref)
        assert len(sj._blocks) >= (2 if len(sj) > _MAX_BLOCK else 0)
    while live:
        job = sj.pop_first()
        assert job is ref.pop_first()
        live.remove(job)
    check_invariants(sj, ref)
    assert sj._blocks == [] and sj._maxes == []


def test_blocks_split_and_merge_back() -> None:
    sj, ref = SortedJobs(), Reference()
    jobs = [make_job(i, i) for i in range(5000)]
    for job in jobs:
        sj.add(job)
        ref.add(job)
    assert len(sj._blocks) >= 5000 // _MAX_BLOCK
    check_invariants(sj, ref)
    # insert into the middle of full blocks: they split
    for i in range(2000):
        job = make_job(10_000 + i, 2500)
        sj.add(job)
        ref.add(job)
    check_invariants(sj, ref)
    for job in jobs[::2]:
        assert sj.remove(job)
        ref.remove(job)
    check_invariants(sj, ref)


def test_clear() -> None:
    sj = SortedJobs()
    for i in range(3000):
        sj.add(make_job(i, i))
    sj.clear()
    assert len(sj) == 0 and list(sj) == [] and sj.pop_first() is None
    sj.add(make_job(1, 5))
    assert len(sj) == 1
