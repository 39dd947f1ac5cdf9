"""Queues: jobs in delivery order, blocked consumers, pause flags, stats.

The delivery order: the most urgent priority first (0 .. 255, a plain job
is DEFAULT_PRIORITY); within a priority, the groups take turns (round-robin; the jobs
without a group form one group); within a group, creation time (`ctime`), Disque's
order. A queue of plain jobs has one priority and one group, so its order is Disque's.

`SortedJobs` is a list of sorted blocks (the idea behind sortedcontainers): adding,
removing and popping are O(log n) bisects plus a memmove inside one block of at most
`_MAX_BLOCK` pointers. New jobs carry the largest ctime, so the common ADDJOB case is
an append to the last block. Each job costs one pointer here. A queue keeps its jobs
in one `SortedJobs` until it gets a job with a priority or a group (`Queue.jobs_for`):
then in a `PriorityJobs`, a `SortedJobs` per (priority, group), so a Disque workload
pays nothing for the extensions.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right, insort
from collections import OrderedDict, deque
from collections.abc import Iterator
from itertools import chain, islice
from operator import attrgetter
from typing import TYPE_CHECKING, Final, Protocol

from .gcfree import untrack
from .job import DEFAULT_PRIORITY, Job, job_priority
from .ratelimit import RateLimiter
from .turns import turns, turns_reversed

if TYPE_CHECKING:
    from .concurrency import ConcurrencyCap
    from .errors import DisqError
    from .grouplimits import GroupLimits
    from .queue_federation import QueueFederation
    from .where import Condition

_LOAD: Final = 512
_MAX_BLOCK: Final = 2 * _LOAD
_ctime: Final = attrgetter("ctime")

PAUSED_IN: Final = 1
PAUSED_OUT: Final = 2
PAUSED_ALL: Final = PAUSED_IN | PAUSED_OUT
PAUSE_NAMES: Final = {0: b"none", PAUSED_IN: b"in", PAUSED_OUT: b"out", PAUSED_ALL: b"all"}
NO_PRIORITY: Final = 256  # less urgent than any: no job queued
# Queue.ready: why Consumers.serve_ready looks at a queue (0: it is not marked)
READY: Final = 1  # its parked consumers may be served (a token came, OUT unpaused, a hold over)
READY_QUEUED: Final = 2  # jobs were queued: after the serve, what Node._into_queue does next
READY_REQUEUED: Final = 4  # one of them had been queued here before (a NACK, a RETRY)
READY_EXT: Final = 8  # one had a priority or a group: the peers may hear the queue's best


class SortedJobs:
    """Jobs ordered by `ctime` (ties: insertion order). Identity-based removal."""

    __slots__ = ("_blocks", "_maxes", "_len")

    def __init__(self) -> None:
        self._blocks: list[list[Job]] = []
        self._maxes: list[int] = []  # ctime of the last job of each block
        self._len = 0
        # Only jobs and ints below: no cycle possible (see gcfree.py). A queue with a
        # group per user has one of these per group.
        untrack(self)
        untrack(self._blocks)
        untrack(self._maxes)

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

    def __reversed__(self) -> Iterator[Job]:
        for block in reversed(self._blocks):
            yield from reversed(block)

    def clear(self) -> None:
        self._blocks.clear()
        self._maxes.clear()
        self._len = 0


# One priority level of a PriorityJobs: its groups' jobs, in turn order (the group to
# serve next first). OrderedDict: move_to_end, removal and first item are all O(1).
Level = OrderedDict[bytes | None, SortedJobs]


class PriorityJobs:
    """Jobs in delivery order: by priority (lower first), then the groups of that
    priority in turn, then ctime within a group. Same interface as SortedJobs.

    The turns of a priority's groups are a ring: a group joins it at the back when it
    gets a job while empty, goes to the back when served, and leaves it when emptied.
    Adding, popping and removing cost O(log n) in the group's SortedJobs plus O(1)
    here (the list of non-empty priorities has at most 256 entries); nothing scans
    the groups, however many there are. A job's priority and group must not change
    while it is queued (they locate it for `remove`).

    A group at its GROUP-CONCURRENCY or GROUP-RATE (grouplimits.py) is *parked*: its
    jobs, at every priority, leave the turns (`park`, O(priorities)) and stay counted,
    listed and removable; the next pop goes on to the other groups'; `unpark` puts it
    back in the turns (at the back of each ring)."""

    __slots__ = ("_levels", "_order", "_len", "_parked")

    def __init__(self) -> None:
        self._levels: dict[int, Level] = {}  # only non-empty levels
        self._order: list[int] = []  # their priorities, ascending
        self._len = 0  # parked jobs included
        # group -> priority -> its jobs there, out of the turns; None: none parked yet
        self._parked: dict[bytes, dict[int, SortedJobs]] | None = None

    @classmethod
    def adopting(cls, plain: SortedJobs) -> PriorityJobs:
        """A PriorityJobs holding the jobs of `plain` (plain jobs, the default priority
        and no group), which it keeps as that group's SortedJobs: O(1)."""
        self = cls()
        if plain:
            self._levels[DEFAULT_PRIORITY] = OrderedDict(((None, plain),))
            self._order.append(DEFAULT_PRIORITY)
            self._len = len(plain)
        return self

    def __len__(self) -> int:
        return self._len

    def add(self, job: Job) -> None:
        ext = job.ext
        priority, group = (DEFAULT_PRIORITY, None) if ext is None else (ext.priority, ext.group)
        parked = self._parked
        if parked is not None and group is not None and group in parked:
            by_priority = parked[group]
            jobs = by_priority.get(priority)
            if jobs is None:
                by_priority[priority] = jobs = SortedJobs()
            jobs.add(job)
            self._len += 1
            return
        level = self._levels.get(priority)
        if level is None:
            self._levels[priority] = level = OrderedDict()
            insort(self._order, priority)
        jobs = level.get(group)
        if jobs is None:
            level[group] = jobs = SortedJobs()
        jobs.add(job)
        self._len += 1

    def remove(self, job: Job) -> bool:
        """Remove this very job object; False if it is not here."""
        ext = job.ext
        priority, group = (DEFAULT_PRIORITY, None) if ext is None else (ext.priority, ext.group)
        level = self._levels.get(priority)
        jobs = level.get(group) if level is not None else None
        if jobs is None:
            return group is not None and self._remove_parked(job, priority, group)
        if not jobs.remove(job):
            return False
        if not jobs:
            assert level is not None
            self._drop_group(priority, level, group)
        self._len -= 1
        return True

    def _remove_parked(self, job: Job, priority: int, group: bytes) -> bool:
        by_priority = self._parked.get(group) if self._parked is not None else None
        jobs = by_priority.get(priority) if by_priority is not None else None
        if jobs is None or not jobs.remove(job):
            return False
        if not jobs:
            assert by_priority is not None and self._parked is not None
            del by_priority[priority]
            if not by_priority:
                del self._parked[group]
        self._len -= 1
        return True

    def park(self, group: bytes) -> None:
        """`group`'s jobs out of the turns until `unpark`."""
        parked = self._parked
        if parked is None:
            self._parked = parked = {}
        by_priority = parked.get(group)
        if by_priority is None:
            parked[group] = by_priority = {}
        for priority in list(self._order):
            level = self._levels[priority]
            jobs = level.get(group)
            if jobs is not None:
                by_priority[priority] = jobs
                self._drop_group(priority, level, group)
        if not by_priority:
            del parked[group]

    def unpark(self, group: bytes) -> bool:
        """`group`'s jobs back in the turns, each priority's at the back of its ring.
        False if it had none parked."""
        parked = self._parked
        by_priority = parked.pop(group, None) if parked is not None else None
        if by_priority is None:
            return False
        for priority, jobs in by_priority.items():
            level = self._levels.get(priority)
            if level is None:
                self._levels[priority] = level = OrderedDict()
                insort(self._order, priority)
            level[group] = jobs
        return True

    def pop_admitted(self, limits: GroupLimits, now_ms: int) -> Job | None:
        """`pop_first`, skipping the groups `limits` holds back now: each one met is
        parked (the next GETJOB does not meet it again) until `limits` brings it back.
        Jobs without a group are not held back."""
        order = self._order
        while order:
            level = self._levels[order[0]]
            group = next(iter(level))
            if group is not None and not limits.admits(group, now_ms):
                self.park(group)
                continue
            job = self.pop_first()
            if job is not None and group is not None:
                limits.started(group, job)
            return job
        return None

    def _drop_group(self, priority: int, level: Level, group: bytes | None) -> None:
        del level[group]
        if not level:
            del self._levels[priority]
            del self._order[bisect_left(self._order, priority)]

    def pop_first(self) -> Job | None:
        if not self._order:  # (parked groups' jobs only, if any)
            return None
        priority = self._order[0]
        level = self._levels[priority]
        group, jobs = next(iter(level.items()))
        job = jobs.pop_first()
        if not jobs:
            self._drop_group(priority, level, group)
        elif len(level) > 1:
            level.move_to_end(group)  # its turn is over
        self._len -= 1
        return job

    def first(self) -> Job | None:
        """The next job to be delivered (None: none, or only parked groups')."""
        if not self._order:
            return None
        return next(iter(self._levels[self._order[0]].values())).first()

    def head(self, count: int) -> list[Job]:
        """The next `count` jobs to be delivered, in that order."""
        return list(islice(self, max(count, 0)))

    def tail(self, count: int) -> list[Job]:
        """The last `count` jobs to be delivered, the last first (the parked groups'
        after all the others: `__iter__`)."""
        out = self._parked_tail(count)
        for priority in reversed(self._order):
            if len(out) >= count:
                break
            out.extend(turns_reversed(self._levels[priority], count - len(out)))
        return out

    def __iter__(self) -> Iterator[Job]:
        """All the jobs in delivery order; the parked groups' last, each group's by
        priority, then age."""
        levels = self._levels
        rounds = chain.from_iterable(turns(levels[p]) for p in self._order)
        return rounds if self._parked is None else chain(rounds, self._parked_jobs())

    def _parked_tail(self, count: int) -> list[Job]:
        """The last `count` of `_parked_jobs`, the last first: O(parked groups) plus
        the jobs returned."""
        out: list[Job] = []
        for by_priority in reversed(list((self._parked or {}).values())):
            for priority in sorted(by_priority, reverse=True):
                if len(out) >= count:
                    return out
                out.extend(by_priority[priority].tail(count - len(out)))
        return out

    def _parked_jobs(self) -> Iterator[Job]:
        for by_priority in (self._parked or {}).values():
            for priority in sorted(by_priority):
                yield from by_priority[priority]

    def clear(self) -> None:
        self._levels.clear()
        self._order.clear()
        self._parked = None
        self._len = 0


class Waiter(Protocol):
    """A consumer blocked in GETJOB (a RESP client, an HTTP long poll); `where`: its
    GETJOB's WHERE conditions (None: any job), constant while it waits."""

    where: list[Condition] | None

    def serve_job(self, job: Job) -> None:
        """Its job (one): it takes it and leaves every queue it waits on
        (`Consumers.unblock`) before returning."""

    def give_up(self, error: DisqError | None) -> None:
        """The wait ends without a job (`Consumers.end_waits`): None, as at its timeout;
        else that error. It leaves every queue it waits on."""

    def wait_left_ms(self) -> int | None:
        """How long it still waits, in ms; None: without a timeout."""


class Queue:
    __slots__ = (
        "name", "jobs", "waiters", "ctime", "atime", "flags", "jobs_in", "jobs_out",
        # What the core's own paths read of federation, kept here so that ADDJOB and
        # GETJOB test a field of the queue and go no further when it says nothing:
        # other nodes asked for jobs of this queue (push them what is queued), the
        # most urgent priority the peers said they have queued, when this node's
        # consumers stop waiting for those, and what this node told the peers of its own
        "remote_wanted", "remote_best", "hold_until", "told_best",
        "federation",  # QueueFederation once federation asks or imports for it, or None
        "limiter",  # the RateLimiter of a queue with a RATE policy, or None
        "cap",  # the ConcurrencyCap of a queue with a CONCURRENCY policy, or None
        "groups",  # the GroupLimits of a queue with GROUP-CONCURRENCY / GROUP-RATE, or None
        "ready",  # READY...: in Node.consumers.ready, its consumers to be served
    )

    def __init__(self, name: bytes, now_ms: int) -> None:
        self.name = name
        self.jobs: SortedJobs | PriorityJobs = SortedJobs()
        self.waiters: deque[Waiter] = deque()
        self.ctime = now_ms
        self.atime = now_ms
        self.flags = 0
        self.jobs_in = 0
        self.jobs_out = 0
        self.remote_wanted = False
        self.remote_best = NO_PRIORITY
        self.hold_until = 0
        self.told_best = NO_PRIORITY
        self.federation: QueueFederation | None = None
        self.limiter: RateLimiter | None = None
        self.cap: ConcurrencyCap | None = None
        self.groups: GroupLimits | None = None
        self.ready = 0

    def __len__(self) -> int:
        return len(self.jobs)

    def jobs_for(self, job: Job) -> SortedJobs | PriorityJobs:
        """Where to add `job`, a job with `ext` (the caller checked): a queue keeps
        plain order (SortedJobs) until it gets a job with a priority or a group."""
        jobs = self.jobs
        ext = job.ext
        if type(jobs) is SortedJobs and ext is not None and (
                ext.priority != DEFAULT_PRIORITY or ext.group is not None):
            self.jobs = jobs = PriorityJobs.adopting(jobs)
        return jobs

    def best_priority(self) -> int:
        """The most urgent priority queued here, NO_PRIORITY if none."""
        head = self.jobs.first()
        return NO_PRIORITY if head is None else job_priority(head)

    def forget_peer_best(self) -> None:
        if self.federation is not None:
            self.federation.peer_best = None
        self.remote_best = NO_PRIORITY
        self.hold_until = 0

    def clear_jobs(self) -> None:
        self.jobs = SortedJobs()

    def compact(self) -> None:
        """An empty queue goes back to the plain structure (its jobs had priorities
        or groups; the next ones may not)."""
        if not self.jobs and type(self.jobs) is not SortedJobs:
            self.jobs = SortedJobs()

    def import_rate_at(self, now_ms: int) -> int:
        """Jobs federation imported per second lately (QueueFederation.import_rate_at);
        0 for a queue it never touched."""
        federation = self.federation
        return 0 if federation is None else federation.import_rate_at(now_ms)

    @property
    def pause_name(self) -> bytes:
        return PAUSE_NAMES[self.flags & PAUSED_ALL]
