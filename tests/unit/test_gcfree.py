"""The job store stays out of the cycle collector (disq/gcfree.py)."""

from __future__ import annotations

import gc

import pytest

from disq.config import Config
from disq.gcfree import untrack
from disq.job import DEFAULT_PRIORITY, QUEUED, Job, JobExt
from disq.node import Node
from disq.queue import PriorityJobs, Queue
from disq.requests import AddJob


def test_jobs_and_their_containers_are_not_tracked():
    node = Node(Config(), "a" * 40)
    jobs = [node.admission.add_job(AddJob(b"q", b"body %d" % i)) for i in range(3000)]
    assert not any(gc.is_tracked(job) for job in jobs)
    queue = node.queues.get(b"q")
    assert queue is not None and len(queue.jobs) == 3000
    assert not any(gc.is_tracked(block) for block in queue.jobs._blocks)
    assert not any(gc.is_tracked(bucket) for bucket in node.timers._buckets.values())


def test_a_queue_with_a_group_per_user_adds_no_tracked_object_per_group():
    queue = Queue(b"q", 0)
    for i in range(2000):
        job = Job(b"D-%036d" % i, b"q", b"body", QUEUED, i, 0, 0, 1, 1)
        job.ext = JobExt(group=b"user%d" % i)
        queue.jobs_for(job).add(job)
    assert type(queue.jobs) is PriorityJobs
    groups = list(queue.jobs._levels[DEFAULT_PRIORITY].values())
    assert len(groups) == 2000
    assert not any(gc.is_tracked(x) for g in groups for x in (g, g._blocks, g._maxes))
    assert not any(gc.is_tracked(block) for g in groups for block in g._blocks)


def test_the_collector_still_frees_other_cycles():
    class Cyclic:
        pass

    a, b = Cyclic(), Cyclic()
    a.other, b.other = b, a
    assert gc.is_tracked(a)
    del a, b
    assert gc.collect() >= 2


def test_the_c_untrack_matches_the_collector_api():
    """disq._gcfree (built by `make`; ctypes stands in without a compiler)."""
    native = pytest.importorskip("disq._gcfree")
    items: list[object] = [1]
    assert gc.is_tracked(items)
    native.untrack(items)
    assert not gc.is_tracked(items)
    native.untrack(items)  # twice: nothing happens
    native.untrack(5)  # not a container: nothing happens
    assert untrack is native.untrack  # what the job store uses
