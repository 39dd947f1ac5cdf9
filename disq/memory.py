"""maxmemory for the jobs a node holds: the 75% and 95% marks in job bytes, and
eviction above 95% (Disque's freeMemoryIfNeeded). A part of `Node` (disq/node.py),
which counts `job_bytes` as jobs come and go. The results the node keeps (results.py)
count in `job_bytes` too, so every mark, -OOM and used_memory see them; above the 95%
mark the oldest results go first, before any job."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Final

from mypy_extensions import trait

from .config import Config
from .job import ACKED, ACTIVE, DELIVERED, Job
from .results import Ends
from .scantable import ScanTable

if TYPE_CHECKING:
    from .node import Stats

# Memory per job beyond its body, as measured with 1M queued jobs (bench/RESULTS.md):
# what used_memory counts per job, so it falls when jobs go (RSS never does).
JOB_FOOTPRINT: Final = 416
NO_MEMORY_LIMIT: Final = 1 << 62  # the memory marks without maxmemory
EVICT_TIME_LIMIT_S: Final = 0.002  # eviction per command, as Disque's freeMemoryIfNeeded
EVICT_GIVE_UP: Final = 1000  # jobs in a row that may not be evicted: stop looking


@trait  # a base of several (mypyc compiles traits, not multiple inheritance)
class MemoryBounds:
    """Node's memory marks and eviction (a mixin: the state is set in Node.__init__)."""

    config: Config
    jobs: ScanTable[bytes, Job]
    stats: Stats
    job_bytes: int
    warn_bytes: int
    full_bytes: int
    may_evict: bool
    ends: Ends

    # Node's own methods, which these call (a trait declares them: Node and
    # JobOperations define them).
    def unregister(self, job: Job) -> None:
        raise NotImplementedError

    def drop_results_to(self, target_job_bytes: int) -> None:
        raise NotImplementedError

    # -- memory ----------------------------------------------------------------------
    def set_memory_limit(self, maxmemory: int, base: int, may_evict: bool) -> None:
        """maxmemory (0: none), of which the node without jobs takes `base`, as marks
        in job bytes; `may_evict`: acknowledged jobs may go to make room."""
        if maxmemory:
            self.warn_bytes = maxmemory // 100 * 75 - base
            self.full_bytes = maxmemory // 100 * 95 - base
        else:
            self.warn_bytes = self.full_bytes = NO_MEMORY_LIMIT
        self.may_evict = may_evict

    @property
    def memory_level(self) -> int:
        """Disque's memory warning level, always current: 0 normal, 1 above 75% of
        maxmemory (new jobs go to other nodes, copies are refused), 2 above 95%."""
        used = self.job_bytes
        return 2 if used > self.full_bytes else 1 if used > self.warn_bytes else 0

    def make_room(self, size: int) -> bool:
        """Whether `size` more job bytes fit under the 95% mark, after evicting what
        may go (Disque's freeMemoryIfNeeded)."""
        target = self.full_bytes - size
        if self.job_bytes <= target:
            return True
        if self.ends.bytes:
            self.drop_results_to(target)
            if self.job_bytes <= target:
                return True
        return self.may_evict and self.evict(target)

    def evict(self, target_job_bytes: int) -> bool:
        """Disque's eviction above 95% of maxmemory (freeMemoryIfNeeded): drop, on this
        node only, the jobs that may go without breaking a promise: acknowledged jobs
        (their ACK may be lost: a copy elsewhere may be delivered again) and
        at-most-once jobs already delivered. Random samples of the job table until
        `job_bytes` is at most the target, for at most 2 ms or until 1000 jobs in a
        row could not go. True if the target was reached. Each round looks at
        maxmemory-samples jobs."""
        deadline = time.monotonic() + EVICT_TIME_LIMIT_S
        not_freed = 0
        while self.job_bytes > target_job_bytes:
            if not self.jobs:
                return False
            for job in self.jobs.random_sample(self.config.maxmemory_samples):
                state = job.state
                if state == ACKED or (job.retry == 0 and job.flags & DELIVERED
                                      and state == ACTIVE):
                    self.unregister(job)
                    self.stats.jobs_evicted += 1
                    not_freed = 0
                else:
                    not_freed += 1
            if not_freed > EVICT_GIVE_UP or time.monotonic() > deadline:
                return self.job_bytes <= target_job_bytes
        return True
