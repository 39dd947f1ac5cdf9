"""The job lifecycle: the one writer of `Job.state`.

A job is created in the state its maker gives it (`Job(...)`: WAIT_REPL for an ADDJOB,
ACTIVE for a copy from another node, ACKED for an ACK of a job never seen, the stored
state for a LOADJOB of the AOF). Every later change is one of the named transitions
below, each allowed from a set of states (a bitmask, `1 << state`):

    event              from                       to          where
    replicated         WAIT_REPL                  ACTIVE      Node.activate (DELAY, AT)
    replicated_queued  WAIT_REPL                  QUEUED      Node.activate
    not_kept           WAIT_REPL                  DELETED     ADDJOB replicated
                                                              externally (node, copies)
    queued             ACTIVE                     QUEUED      Node.enqueue
    moved              ACTIVE, QUEUED             QUEUED      dead-lettered, revived
    delivered          QUEUED                     ACTIVE      Consumers.take (GETJOB, waiters)
    dequeued           QUEUED                     ACTIVE      DEQUEUE, WORKING, ACKJOB,
                                                              JOBSET, a peer's move
    exported           QUEUED                     ACTIVE      federation (YOURJOBS)
    backing_off        ACTIVE                     ACTIVE      a requeue waits a back-off
    acked              WAIT_REPL, ACTIVE          ACKED       ACKJOB, SETACK
    removed            any                        DELETED     unregister, FLUSHALL
    loaded             ACTIVE, QUEUED             ACTIVE      the AOF loader
    copy_stored        ACTIVE                     ACTIVE      a copy from another node

A transition is a plain attribute write after one compare with a constant (a bit test
of the mask where more than one state is allowed; this module is compiled with the
hot path): ADDJOB and GETJOB pay one call per job, ACKJOB two (acked, removed).
A transition from a state its event does not allow is a bug of the caller. In
production it is logged once per (state, event) and the write is done anyway: the
caller has already moved the job in or out of its queue by then, and keeping the old
state would leave the job's state and its queue disagreeing, which is worse than the
wrong transition. Under tests (`DISQ_STRICT_LIFECYCLE=1`, set by tests/conftest.py
for the test process and the servers it starts) it raises `IllegalTransition`.
"""

from __future__ import annotations

import logging
import os
from typing import Final

from mypy_extensions import mypyc_attr

from .job import ACKED, ACTIVE, DELETED, QUEUED, STATE_NAMES, WAIT_REPL, Job

log = logging.getLogger("disq")

# The states each event may start from (bit `1 << state`).
ANY_STATE: Final = (1 << WAIT_REPL) | (1 << ACTIVE) | (1 << QUEUED) | (1 << ACKED) | (
    1 << DELETED)
FROM_REPLICATED: Final = 1 << WAIT_REPL
FROM_NOT_KEPT: Final = 1 << WAIT_REPL
FROM_QUEUED: Final = 1 << ACTIVE
FROM_MOVED: Final = (1 << ACTIVE) | (1 << QUEUED)
FROM_DELIVERED: Final = 1 << QUEUED
FROM_DEQUEUED: Final = 1 << QUEUED
FROM_BACKING_OFF: Final = 1 << ACTIVE
FROM_ACKED: Final = (1 << WAIT_REPL) | (1 << ACTIVE)
FROM_LOADED: Final = (1 << ACTIVE) | (1 << QUEUED)
FROM_COPY_STORED: Final = 1 << ACTIVE

# The table (documentation, the unit test that walks it, and the log of a bug):
# event -> (the states it may start from, the state it goes to).
TRANSITIONS: Final[dict[str, tuple[int, int]]] = {
    "replicated": (FROM_REPLICATED, ACTIVE),
    "replicated_queued": (FROM_REPLICATED, QUEUED),
    "not_kept": (FROM_NOT_KEPT, DELETED),
    "queued": (FROM_QUEUED, QUEUED),
    "moved": (FROM_MOVED, QUEUED),
    "delivered": (FROM_DELIVERED, ACTIVE),
    "dequeued": (FROM_DEQUEUED, ACTIVE),
    "exported": (FROM_DEQUEUED, ACTIVE),
    "backing_off": (FROM_BACKING_OFF, ACTIVE),
    "acked": (FROM_ACKED, ACKED),
    "removed": (ANY_STATE, DELETED),
    "loaded": (FROM_LOADED, ACTIVE),
    "copy_stored": (FROM_COPY_STORED, ACTIVE),
}


@mypyc_attr(native_class=False)  # (mypyc compiles no subclass of a builtin exception)
class IllegalTransition(AssertionError):
    """A job was moved by an event its state does not allow (strict mode only)."""


class _Mode:
    """Whether an illegal transition raises (tests) or is logged once (production)."""

    __slots__ = ("strict", "reported")

    def __init__(self) -> None:
        self.strict = os.environ.get("DISQ_STRICT_LIFECYCLE", "") == "1"
        self.reported: set[tuple[int, str]] = set()


_mode: Final = _Mode()


def set_strict(strict: bool) -> None:
    """Raise on an illegal transition (True) or log it once and go on (False)."""
    _mode.strict = strict


def _illegal(job: Job, event: str) -> None:
    """The caller's bug: `event` is not allowed from `job`'s state."""
    state = job.state
    name = STATE_NAMES.get(state, b"deleted").decode()
    message = (f"illegal job state transition: {event} from {name} "
               f"(job {job.id.decode(errors='replace')})")
    if _mode.strict:
        raise IllegalTransition(message)
    key = (state, event)
    if key not in _mode.reported:
        _mode.reported.add(key)
        log.error("%s; done anyway, logged once", message)


def replicated(job: Job) -> None:
    """A new job's copies exist; it waits for its DELAY or due time."""
    if job.state != WAIT_REPL:  # FROM_REPLICATED, one state: one compare
        _illegal(job, "replicated")
    job.state = ACTIVE


def replicated_queued(job: Job) -> None:
    """A new job's copies exist and it joins its queue now."""
    if job.state != WAIT_REPL:  # FROM_REPLICATED, one state: one compare
        _illegal(job, "replicated_queued")
    job.state = QUEUED


def not_kept(job: Job) -> None:
    """An ADDJOB replicated externally: the job lives on other nodes only."""
    if job.state != WAIT_REPL:  # FROM_NOT_KEPT, one state: one compare
        _illegal(job, "not_kept")
    job.state = DELETED


def queued(job: Job) -> None:
    """An active job joins its queue (its first time, a requeue, a NACK)."""
    if job.state != ACTIVE:  # FROM_QUEUED, one state: one compare
        _illegal(job, "queued")
    job.state = QUEUED


def moved(job: Job) -> None:
    """A job queued in another queue: a dead letter, or one put back."""
    if not (FROM_MOVED >> job.state) & 1:
        _illegal(job, "moved")
    job.state = QUEUED


def delivered(job: Job) -> None:
    """A queued job taken by a consumer (the delivery primitive: Consumers.take)."""
    if job.state != QUEUED:  # FROM_DELIVERED, one state: one compare
        _illegal(job, "delivered")
    job.state = ACTIVE


def dequeued(job: Job) -> None:
    """A queued job out of its queue without a delivery."""
    if job.state != QUEUED:  # FROM_DEQUEUED, one state: one compare
        _illegal(job, "dequeued")
    job.state = ACTIVE


def exported(job: Job) -> None:
    """A queued job sent to a node whose consumers asked for its queue."""
    if job.state != QUEUED:  # FROM_DEQUEUED, one state: one compare
        _illegal(job, "exported")
    job.state = ACTIVE


def backing_off(job: Job) -> None:
    """A requeue put off for a back-off: the job stays active until then."""
    if job.state != ACTIVE:  # FROM_BACKING_OFF, one state: one compare
        _illegal(job, "backing_off")
    job.state = ACTIVE


def acked(job: Job) -> None:
    """ACKJOB here, or a SETACK from another node (a queued job is dequeued first)."""
    if not (FROM_ACKED >> job.state) & 1:
        _illegal(job, "acked")
    job.state = ACKED


def removed(job: Job) -> None:
    """The job leaves the node (deleted, expired, evicted, collected, flushed): its
    stale timer entries are skipped from now on."""
    job.state = DELETED


def loaded(job: Job) -> None:
    """A job read from the AOF, active until the loader queues it."""
    if not (FROM_LOADED >> job.state) & 1:
        _illegal(job, "loaded")
    job.state = ACTIVE


def copy_stored(job: Job) -> None:
    """A copy another node replicated here, kept active (not queued)."""
    if job.state != ACTIVE:  # FROM_COPY_STORED, one state: one compare
        _illegal(job, "copy_stored")
    job.state = ACTIVE
