"""The job record.

A node may hold a million of these, so the record has `__slots__`, keeps times as
plain ints (milliseconds since the epoch), and keeps `nodes_delivered` as None while
the only holder is this node (the common single-node case), else as a frozenset
shared by every job with the same holders (`holder_set`).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

from .gcfree import untrack

# States (the numbers are Disque's).
WAIT_REPL: Final = 0
ACTIVE: Final = 1
QUEUED: Final = 2
ACKED: Final = 3
DELETED: Final = 4  # disq only: removed from the node; lets stale timer entries be skipped

STATE_NAMES: Final = {WAIT_REPL: b"wait-repl", ACTIVE: b"active", QUEUED: b"queued", ACKED: b"acked"}
STATE_BY_NAME: Final = {v.decode(): k for k, v in STATE_NAMES.items()}

# Flags.
BCAST_QUEUED: Final = 1 << 0  # broadcast QUEUED the next time this job is queued
BCAST_WILLQUEUE: Final = 1 << 1  # send WILLQUEUE shortly before the requeue time
DELIVERED: Final = 1 << 2  # handed to a client at least once by this node
# disq only, never sent nor stored: waiting for a back-off before being
# queued again; the failed delivery was counted when the wait began.
BACKOFF_WAIT: Final = 1 << 3
# disq only, never sent: a copy this node was told to queue (ENQUEUE) by the node that
# placed it; that node may send the ENQUEUE again (replication/placement.py).
PLACED: Final = 1 << 4
# disq only, never sent, stored: a copy of an ADDJOB ... DEDUP whose success this node
# has not heard of (DEDUP_SETTLED): before queueing it, this node asks the job's other
# holders whether the job exists (replication/provisional.py).
PROVISIONAL: Final = 1 << 5
PROVISIONAL_RECHECK_MS: Final = 1000  # ... and asks again this long after, until settled
# what this node did: not another node's business
LOCAL_FLAGS: Final = DELIVERED | BACKOFF_WAIT | PLACED | PROVISIONAL

WILLQUEUE_ADVANCE_MS: Final = 500
# The largest body a job may have (job-max-body at most): a bus frame (cluster/
# messages.py MAX_FRAME) carries one copy of it with room to spare.
MAX_BODY: Final = 100 * 1024 * 1024


class Job:
    __slots__ = (
        "id",  # bytes, 40 chars
        "queue",  # bytes (the queue's own name object, shared) or None for dummy acks
        "body",  # bytes, None for a dummy ack
        "state",
        "flags",
        "repl",  # requested replication level
        "ctime",  # ms * 1_000_000 + counter: strictly increasing per node, the queue order
        "etime",  # ms: expiry
        "delay",  # s
        "retry",  # s
        "nacks",
        "deliveries",  # "additional deliveries"
        "qtime",  # ms: next (re)queue time, 0 = never
        "awake",  # ms: when the timer must look at this job next, 0 = never
        "nodes_delivered",  # None = only this node, else a shared frozenset of node IDs
        "nodes_confirmed",  # None or set of node IDs (mutable: a replication or GC round)
        "gc_retry",  # number of ACK GC attempts so far
        "ext",  # None (a Disque job), or the JobExt of a job using disq's extensions
    )

    def __init__(
        self,
        job_id: bytes,
        queue: bytes | None,
        body: bytes | None,
        state: int,
        ctime: int,
        etime: int,
        delay: int,
        retry: int,
        repl: int,
    ) -> None:
        self.id = job_id
        self.queue = queue
        self.body = body
        self.state = state
        self.flags = 0
        self.repl = repl
        self.ctime = ctime
        self.etime = etime
        self.delay = delay
        self.retry = retry
        self.nacks = 0
        self.deliveries = 0
        self.qtime = 0
        self.awake = 0
        self.nodes_delivered: frozenset[str] | None = None
        self.nodes_confirmed: set[str] | None = None
        self.gc_retry = 0
        self.ext: JobExt | None = None
        untrack(self)  # a job is never part of a reference cycle (see gcfree.py)

    def __repr__(self) -> str:
        return f"<Job {self.id.decode()} {STATE_NAMES.get(self.state, b'deleted').decode()}>"


DEFAULT_PRIORITY: Final = 128  # a job without PRIORITY; 0 is the most urgent, 255 the least


class JobExt:
    """What a job using disq's extensions carries beyond Disque's fields: ADDJOB
    PRIORITY / GROUP / AT / DELAY-MS and MAXDELIVERIES, and what makes it
    a dead letter. Plain jobs have none (`Job.ext` None): they pay one
    pointer, and read as priority DEFAULT_PRIORITY, no group, not due, no limit.

    A dead letter is the job itself moved to its dead-letter queue (`Job.queue`):
    `dead_from` is the queue it came from, `dead_reason` why. `generation` orders the
    moves of a job between the two across nodes: odd while it is a dead letter, it
    grows by one at each move (DEADLETTER REQUEUE makes it even again), so a node
    that missed a move takes the newer state and never goes back to an older one."""

    __slots__ = ("priority", "group", "due", "max_deliveries", "dead_from", "dead_reason",
                 "generation", "notes", "batch", "after", "parent_failed", "attrs",
                 "orderkey", "order_strict")

    def __init__(self, priority: int = DEFAULT_PRIORITY, group: bytes | None = None,
                 due: int = 0, max_deliveries: int = 0, dead_from: bytes | None = None,
                 dead_reason: bytes | None = None, generation: int = 0,
                 notes: JobNotes | None = None, batch: bytes | None = None,
                 after: tuple[bytes, ...] | None = None,
                 attrs: tuple[tuple[bytes, bytes], ...] | None = None,
                 orderkey: bytes | None = None, order_strict: bool = False) -> None:
        self.priority = priority  # 0 (most urgent) .. 255
        self.group = group  # fairness group (<= 256 bytes); None: the queue's no-group
        self.due = due  # Unix ms before which it is never delivered (0: none)
        self.max_deliveries = max_deliveries  # 0: the queue's policy, if any
        self.dead_from = dead_from  # a dead letter: the queue it came from
        self.dead_reason = dead_reason
        self.generation = generation
        self.notes = notes  # what its consumers reported: errors, progress (None: nothing)
        self.batch = batch  # ADDJOB ... BATCH: the batch it is a member of (batches.py)
        # ADDJOB ... AFTER: the parents (job or batch IDs) it waits for, while it waits
        # (None: none, or none left); `parent_failed`: one went dead (this node's view)
        self.after = after
        self.parent_failed = False
        # ADDJOB ... ATTR: (key, value) pairs, keys distinct, in the order given (None:
        # none); GETJOB ... WHERE filters on them (consumers.py)
        self.attrs = attrs
        # ADDJOB ... ORDERKEY k [STRICT]: the jobs of k in this queue are delivered one
        # at a time in their order (orderkeys.py); None: none
        self.orderkey = orderkey
        self.order_strict = order_strict
        untrack(self)  # holds only ints, bytes (tuples of them) and a JobNotes (see gcfree.py)

    @property
    def extra(self) -> bool:
        """Whether it has the dead-letter fields (they travel and show only then)."""
        return bool(self.max_deliveries or self.generation)

    def copy(self, **changes: object) -> JobExt:
        ext = JobExt(self.priority, self.group, self.due, self.max_deliveries,
                     self.dead_from, self.dead_reason, self.generation, self.notes,
                     self.batch, self.after, self.attrs, self.orderkey, self.order_strict)
        ext.parent_failed = self.parent_failed
        for name, value in changes.items():
            setattr(ext, name, value)
        return ext


# One error a consumer reported (NACK ... ERROR reason): (delivery, unix ms, reason).
# `delivery` counts as MAXDELIVERIES does: nacks + additional deliveries + 1 then.
JobError = tuple[int, int, bytes]
MAX_ERRORS: Final = 5  # a job keeps its last errors only
MAX_ERROR_LEN: Final = 1024  # bytes of one reason
MAX_PROGRESS_DATA: Final = 4096  # bytes of WORKING ... DATA
NO_PROGRESS: Final = -1
MIN_PROGRESS, MAX_PROGRESS = 0, 100
NOTE_OVERHEAD: Final = 64  # memory counted per error kept, beyond its reason

# One event of a job's history on this node (history.py): (unix ms, event, detail).
JobEvent = tuple[int, bytes, bytes]
MAX_HISTORY: Final = 16  # a job keeps its last events only
MAX_EVENT_DETAIL: Final = 128  # bytes of one event's detail (an error is cut there)
# Memory counted for a history, at its bound from the start: it grows in place, and a
# fixed amount keeps the node's job bytes right when the job goes (notes_size).
HISTORY_BYTES: Final = MAX_HISTORY * (NOTE_OVERHEAD + MAX_EVENT_DETAIL)


class JobHistory:
    """A job's lifecycle events on this node, oldest first, the last MAX_HISTORY.
    Unlike the JobNotes that hold it, it grows in place: it is this one job's log
    (each JobNotes of the job passes the same one on), never sent nor stored."""

    __slots__ = ("events",)

    def __init__(self) -> None:
        self.events: list[JobEvent] = []
        untrack(self)

    def add(self, when: int, event: bytes, detail: bytes) -> None:
        events = self.events
        if len(events) >= MAX_HISTORY:
            del events[0]
        events.append((when, event, detail[:MAX_EVENT_DETAIL]))


class JobNotes:
    """What a job's consumers reported of their work (disq extensions): the last
    MAX_ERRORS errors of NACK ... ERROR, oldest first, and the last WORKING ...
    PROGRESS / DATA; and the job's `history` here once it began (history.py). Never
    changed in place (a JobExt may be copied with it): a change is a new JobNotes
    (`with_error`, `with_progress`), which keeps the history (the one mutable part)."""

    __slots__ = ("errors", "progress", "progress_data", "history")

    def __init__(self, errors: tuple[JobError, ...] = (), progress: int = NO_PROGRESS,
                 progress_data: bytes | None = None,
                 history: JobHistory | None = None) -> None:
        self.errors = errors
        self.progress = progress  # 0..100, NO_PROGRESS: none reported
        self.progress_data = progress_data
        self.history = history
        untrack(self)

    def with_error(self, error: JobError) -> JobNotes:
        """These notes with `error` among the errors (kept in time order, the last
        MAX_ERRORS; one already there changes nothing: a holder may hear of an error
        twice). Time alone, and errors of one millisecond in the order they came (a
        stable sort): DEADLETTER REQUEUE resets the counters, so a later error may
        have an earlier delivery, within the same millisecond too."""
        if error in self.errors:
            return self
        errors = tuple(sorted((*self.errors, error), key=_error_order))[-MAX_ERRORS:]
        return JobNotes(errors, self.progress, self.progress_data, self.history)

    def with_errors(self, errors: Iterable[JobError]) -> JobNotes:
        notes = self
        for error in errors:
            notes = notes.with_error(error)
        return notes

    def with_progress(self, progress: int | None, data: bytes | None) -> JobNotes:
        """None leaves that part as it was."""
        return JobNotes(self.errors, self.progress if progress is None else progress,
                        self.progress_data if data is None else data, self.history)

    def with_history(self) -> JobNotes:
        """These notes with a history begun (themselves if it has one)."""
        if self.history is not None:
            return self
        return JobNotes(self.errors, self.progress, self.progress_data, JobHistory())

    @property
    def last_error(self) -> bytes | None:
        return self.errors[-1][2] if self.errors else None

    @property
    def size(self) -> int:
        """Memory counted for them in the node's job bytes."""
        return (sum(NOTE_OVERHEAD + len(error[2]) for error in self.errors)
                + len(self.progress_data or b"")
                + (HISTORY_BYTES if self.history is not None else 0))


def _error_order(error: JobError) -> int:
    return error[1]


def job_notes(job: Job) -> JobNotes | None:
    """What the job's consumers reported, if anything."""
    ext = job.ext
    return ext.notes if ext is not None else None


def notes_size(job: Job) -> int:
    """Job bytes counted for the job's notes (0: none)."""
    notes = job_notes(job)
    return 0 if notes is None else notes.size


def job_priority(job: Job) -> int:
    ext = job.ext
    return DEFAULT_PRIORITY if ext is None else ext.priority


def job_batch(job: Job) -> bytes | None:
    """The batch the job is a member of (ADDJOB ... BATCH), if any."""
    ext = job.ext
    return None if ext is None else ext.batch


def job_orderkey(job: Job) -> bytes | None:
    """The job's ORDERKEY, if any."""
    ext = job.ext
    return None if ext is None else ext.orderkey


def job_group(job: Job) -> bytes | None:
    ext = job.ext
    return None if ext is None else ext.group


# The distinct holder sets of a node's jobs: few (one per group of nodes a job went
# to), each shared by all the jobs with those holders.
_HOLDER_SETS: dict[frozenset[str], frozenset[str]] = {}
_MAX_HOLDER_SETS: Final = 65_536  # then start again: jobs keep theirs, new ones are shared anew


def holder_set(ids: Iterable[str]) -> frozenset[str]:
    """A job's `nodes_delivered`: one immutable set shared by every job with the same
    holders, so a million replicated jobs cost a pointer each rather than a 216-byte
    set. Change a job's holders by giving it another one (`with_holders`)."""
    key = ids if type(ids) is frozenset else frozenset(ids)
    shared = _HOLDER_SETS.get(key)
    if shared is None:
        if len(_HOLDER_SETS) >= _MAX_HOLDER_SETS:
            _HOLDER_SETS.clear()
        _HOLDER_SETS[key] = shared = key
    return shared


def with_holders(holders: frozenset[str], ids: Iterable[str]) -> frozenset[str]:
    """`holders` and `ids` as a shared holder set (`holders` itself if nothing is new)."""
    return holders if holders.issuperset(ids) else holder_set(holders.union(ids))


NO_HOLDERS: frozenset[str] = holder_set(())


def node_id_set(ids: Iterable[str] = ()) -> set[str]:
    """A new `nodes_confirmed` set (or any set of node IDs a job keeps). It holds only strings, so like
    the job itself it is kept out of the cycle collector (see gcfree.py); adding to it
    later does not track it again."""
    ids_set = set(ids)
    untrack(ids_set)
    return ids_set

