"""Queues: jobs ordered by creation time, blocked consumers, pause flags, stats.

`SortedJobs` is a list of sorted blocks (the idea behind sortedcontainers): adding,
removing and popping are O(log n) bisects plus a memmove inside one block of at most
`_MAX_BLOCK` pointers. New jobs carry the largest ctime, so the common ADDJOB case is
an append to the last block. Each job costs one pointer here.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections import deque
from collections.abc import Iterator
from operator import attrgetter
from typing import Protocol

from .gcfree import untrack
from .job import Job

_LOAD = 512
_MAX_BLOCK = 2 * _LOAD
_ctime = attrgetter("ctime")

PAUSED_IN = 1
PAUSED_OUT = 2
PAUSED_ALL = PAUSED_IN | PAUSED_OUT
PAUSE_NAMES = {0: b"none", PAUSED_IN: b"in", PAUSED_OUT: b"out", PAUSED_ALL: b"all"}


class SortedJobs:
    """Jobs ordered by `ctime` (ties: insertion order). Identity-based removal."""

    __slots__ = ("_blocks", "_maxes", "_len")

    def __init__(self) -> None:
        self._blocks: list[list[Job]] = []
        self._maxes: list[int] = []  # ctime of the last job of each block
        self._len = 0

    def __len__(self) -> int:
        return self._len

    def add(self, job: Job) -> None:
        key = job.ctime
        blocks, maxes = self._blocks, self._maxes
        self._len += 1
        if not blocks:
            block = [job]
            untrack(block)  # holds only jobs: no cycle possible (see gcfree.py)
            blocks.append(block)
            maxes.append(key)
            return
        if key >= maxes[-1]:
            i = len(blocks) - 1
            block = blocks[i]
            block.append(job)
            maxes[i] = key
        else:
            i = bisect_right(maxes, key)
            block = blocks[i]
            block.insert(bisect_right(block, key, key=_ctime), job)
        if len(block) > _MAX_BLOCK:
            half = len(block) >> 1
            upper = block[half:]
            untrack(upper)
            blocks.insert(i + 1, upper)
            del block[half:]
            maxes.insert(i, block[-1].ctime)

    def remove(self, job: Job) -> bool:
        """Remove this very job object; False if it is not here."""
        key = job.ctime
        blocks, maxes = self._blocks, self._maxes
        i = bisect_left(maxes, key)
        while i < len(blocks):
            block = blocks[i]
            j = bisect_left(block, key, key=_ctime)
            while j < len(block) and block[j].ctime == key:
                if block[j] is job:
                    del block[j]
                    self._after_delete(i)
                    return True
                j += 1
            if j < len(block):
                return False
            i += 1
        return False

    def _after_delete(self, i: int) -> None:
        self._len -= 1
        block = self._blocks[i]
        if block:
            self._maxes[i] = block[-1].ctime
        else:
            del self._blocks[i]
            del self._maxes[i]

    def pop_first(self) -> Job | None:
        if not self._len:
            return None
        job = self._blocks[0].pop(0)
        self._after_delete(0)
        return job

    def first(self) -> Job | None:
        return self._blocks[0][0] if self._len else None

    def head(self, count: int) -> list[Job]:
        out: list[Job] = []
        for block in self._blocks:
            out.extend(block[: count - len(out)])
            if len(out) >= count:
                break
        return out

    def tail(self, count: int) -> list[Job]:
        """The `count` newest jobs, newest first."""
        out: list[Job] = []
        if count <= 0:
            return out  # block[-0:] would be the whole block
        for block in reversed(self._blocks):
            need = count - len(out)
            out.extend(reversed(block[-need:]))
            if len(out) >= count:
                break
        return out

    def __iter__(self) -> Iterator[Job]:
        for block in self._blocks:
            yield from block

    def clear(self) -> None:
        self._blocks.clear()
        self._maxes.clear()
        self._len = 0


class Waiter(Protocol):
    """A consumer blocked in GETJOB (the server's client object implements this)."""

    def serve_job(self, job: Job) -> None: ...

    def wait_left_ms(self) -> int | None:
        """How long it still waits, in ms; None: without a timeout."""


class Queue:
    __slots__ = (
        "name", "jobs", "waiters", "ctime", "atime", "flags", "jobs_in", "jobs_out",
        # federation state (used by replication/federation)
        "needjobs_bcast_time", "needjobs_asked_time", "needjobs_bcast_attempt",
        "needjobs_adhoc_attempt", "needjobs_responders", "import_second",
        "imported_prev", "imported_curr", "import_time",
        "remote_wanted",  # other nodes asked for jobs of this queue (federation)
    )

    def __init__(self, name: bytes, now_ms: int) -> None:
        self.name = name
        self.jobs = SortedJobs()
        self.waiters: deque[Waiter] = deque()
        self.ctime = now_ms
        self.atime = now_ms
        self.flags = 0
        self.jobs_in = 0
        self.jobs_out = 0
        self.needjobs_bcast_time = 0
        # when a NEEDJOBS for consumers blocked here went out, 0 once they are gone
        self.needjobs_asked_time = 0
        self.needjobs_bcast_attempt = 0
        self.needjobs_adhoc_attempt = 0
        self.needjobs_responders: dict[str, int] | None = None
        self.import_second = 0  # the second `imported_curr` counts
        self.imported_prev = 0
        self.imported_curr = 0
        self.import_time = 0
        self.remote_wanted = False

    def __len__(self) -> int:
        return len(self.jobs)

    def note_import(self, now_ms: int) -> None:
        """Count one job imported by federation (per-second buckets)."""
        second = now_ms // 1000
        if second != self.import_second:
            self.imported_prev = self.imported_curr if second == self.import_second + 1 else 0
            self.imported_curr = 0
            self.import_second = second
        self.imported_curr += 1
        self.import_time = now_ms

    def import_rate_at(self, now_ms: int) -> int:
        """Jobs imported per second: this second's and the previous one's count, the
        larger, as long as the last import is under 5 s old (Disque's window)."""
        if not self.import_time or now_ms - self.import_time > 5000:
            return 0
        second = now_ms // 1000
        if second == self.import_second:
            return max(self.imported_curr, self.imported_prev)
        if second == self.import_second + 1:
            return self.imported_curr
        return 1  # imported within 5 s, but not in the last two seconds

    @property
    def pause_name(self) -> bytes:
        return PAUSE_NAMES[self.flags & PAUSED_ALL]
