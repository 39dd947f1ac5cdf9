"""The delivery order within one priority level of a PriorityJobs (queue.py): its
groups take turns, a round-robin over the ring of groups; forwards lazily (QPEEK,
GETJOB's order), backwards for QPEEK's negative counts."""

from __future__ import annotations

import heapq
from bisect import insort
from collections import deque
from collections.abc import Iterator
from typing import TYPE_CHECKING

from .job import Job

if TYPE_CHECKING:
    from .queue import Level


def turns(level: Level) -> Iterator[Job]:
    """A level's jobs in delivery order: the first job of each group in ring order,
    then the second of each group that has one, and so on. Lazy: the first k jobs
    cost O(k) whatever the number of groups."""
    if len(level) == 1:
        yield from next(iter(level.values()))
        return
    turns: deque[Iterator[Job]] = deque()
    for jobs in level.values():  # the first round, taking each group in
        group_iter = iter(jobs)
        yield next(group_iter)  # groups in a level are never empty
        turns.append(group_iter)
    while turns:
        group_iter = turns.popleft()
        job = next(group_iter, None)
        if job is not None:
            yield job
            turns.append(group_iter)


def turns_reversed(level: Level, count: int) -> list[Job]:
    """The last `count` jobs of `turns(level)`, the last first. Round r serves the
    groups holding at least r jobs, in ring order; so backwards, the groups join the
    rounds largest first, each giving its jobs from its newest. O(g log g) for g
    groups, plus the jobs returned."""
    if count <= 0:
        return []
    if len(level) == 1:
        return next(iter(level.values())).tail(count)
    groups = list(level.values())
    largest = [(-len(jobs), index) for index, jobs in enumerate(groups)]
    heapq.heapify(largest)
    out: list[Job] = []
    active: list[tuple[int, Iterator[Job]]] = []  # (-ring index, newest-first jobs)
    for round_no in range(-largest[0][0], 0, -1):
        while largest and -largest[0][0] >= round_no:
            index = heapq.heappop(largest)[1]
            insort(active, (-index, reversed(groups[index])), key=_first)
        for _, newest_first in active:  # the round backwards: the ring's last first
            out.append(next(newest_first))
            if len(out) >= count:
                return out
    return out


def _first(item: tuple[int, Iterator[Job]]) -> int:
    return item[0]
