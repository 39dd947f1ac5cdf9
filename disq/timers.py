"""One timer structure for every job: delays, retries (requeue), TTLs, ACK GC.

Jobs are bucketed by their `awake` millisecond; a heap orders the distinct
milliseconds. Moving a job to a new time appends it to the new bucket and leaves a
stale reference behind, which is skipped when its bucket fires (the job's `awake` no
longer matches). There is one asyncio timer handle for the whole node, armed for the
earliest bucket: never one loop timer per job.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable

from .gcfree import untrack
from .job import DELETED, Job


class JobTimers:
    __slots__ = ("_heap", "_buckets", "_count")

    def __init__(self) -> None:
        self._heap: list[int] = []
        self._buckets: dict[int, list[Job]] = {}
        self._count = 0  # references held, live or stale

    def schedule(self, job: Job, when_ms: int) -> bool:
        """Set the job's awake time. True if `when_ms` is now the earliest deadline
        (the caller must re-arm its loop timer)."""
        job.awake = when_ms
        if when_ms == 0:
            return False
        bucket = self._buckets.get(when_ms)
        if bucket is None:
            bucket = [job]
            untrack(bucket)  # holds only jobs: no cycle possible (see gcfree.py)
            self._buckets[when_ms] = bucket
            heapq.heappush(self._heap, when_ms)
            self._count += 1
            return self._heap[0] == when_ms
        bucket.append(job)
        self._count += 1
        return False

    def next_deadline(self) -> int | None:
        return self._heap[0] if self._heap else None

    def run_due(self, now_ms: int, process: Callable[[Job, int], None], limit: int) -> int:
        """Call `process(job, now)` for up to `limit` jobs whose awake time has come.
        Returns how many were processed."""
        heap, buckets = self._heap, self._buckets
        done = 0
        while heap and heap[0] <= now_ms and done < limit:
            # Detach the bucket first: `process` may schedule jobs anywhere, even here.
            when = heapq.heappop(heap)
            bucket = buckets.pop(when)
            self._count -= len(bucket)
            for i, job in enumerate(bucket):
                if done >= limit:
                    for rest in bucket[i:]:
                        if rest.awake == when:
                            self.schedule(rest, when)
                    break
                if job.awake != when or job.state == DELETED:
                    continue  # stale: the job moved or is gone
                job.awake = 0
                done += 1
                process(job, now_ms)
        return done

    def __len__(self) -> int:
        return self._count

    def clear(self) -> None:
        self._heap.clear()
        self._buckets.clear()
        self._count = 0
