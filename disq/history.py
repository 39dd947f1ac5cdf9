"""A job's delivery history on this node (disq extension): its lifecycle events, the
last MAX_HISTORY of them, with their Unix ms times (SHOW's `history`, the dashboard's
job page).

Where it lives, and when a job has one: in the job's JobNotes (job.py), which exist
only for jobs whose consumers reported something, and only from the job's first
failure on: a NACK, a requeue after its RETRY, a dead letter. A plain job (added,
delivered, acked) never has one, so ADDJOB / GETJOB / ACKJOB pay nothing for it
but a test of `job.ext` (None for a plain job) where they read it already; a node-
level table keyed by job ID would have cost every job an insert and a delete. The
history then begins with what the job record still tells (its addition, from its
ctime and the ID's node), and records every later event as it happens. It is this
node's view: never sent to the other holders nor stored in the AOF (a restart or a
job copied from a peer starts without one), and its memory is counted at its bound
(HISTORY_BYTES) with the job's.
"""

from __future__ import annotations

from typing import Final, Protocol

from .job import DEFAULT_PRIORITY, NO_PROGRESS, Job, JobExt, JobHistory

ADDED: Final = b"added"
QUEUED: Final = b"queued"
DELIVERED: Final = b"delivered"
NACKED: Final = b"nacked"
REQUEUED: Final = b"requeued"  # its RETRY passed without an ACK
BACKING_OFF: Final = b"backing-off"
DEAD_LETTERED: Final = b"dead-lettered"
REVIVED: Final = b"revived"  # DEADLETTER REQUEUE
ACKED: Final = b"acked"


class Consumer(Protocol):
    """Who took a job (a RESP client): its description for the `delivered` event."""

    def consumer_name(self) -> bytes:
        """E.g. b"client id=7 addr=127.0.0.1:50000"."""


def history_of(job: Job) -> JobHistory | None:
    """The job's history here, if it has one."""
    ext = job.ext
    notes = ext.notes if ext is not None else None
    return notes.history if notes is not None else None


def record(job: Job, when: int, event: bytes, detail: bytes = b"") -> None:
    """`event` joins the job's history, if it has one (else nothing: see above)."""
    history = history_of(job)
    if history is not None:
        history.add(when, event, detail)


def seed(history: JobHistory, job: Job) -> None:
    """A history just begun: the job's addition, as far as the record tells it."""
    history.add(job.ctime // 1_000_000, ADDED, b"by node " + job.id[2:10])


def delivered(job: Job, when: int, node_id: str, consumer: Consumer | None) -> None:
    """The job handed to `consumer` (None: an HTTP consumer) by this node."""
    history = history_of(job)
    if history is not None:
        to = consumer.consumer_name() if consumer is not None else b"an HTTP consumer"
        history.add(when, DELIVERED, b"by node " + node_id[:8].encode() + b" to " + to)


def only_history(ext: JobExt) -> bool:
    """Whether a job's JobExt holds nothing but its history (a Disque job that failed
    a delivery): SHOW gives Disque's fields then the history, the AOF Disque's record."""
    notes = ext.notes
    return (notes is not None and notes.history is not None and not notes.errors
            and notes.progress == NO_PROGRESS and notes.progress_data is None
            and ext.priority == DEFAULT_PRIORITY and ext.group is None and not ext.due
            and not ext.extra and ext.batch is None and ext.after is None
            and ext.attrs is None and ext.orderkey is None)


def shown_ext(job: Job) -> JobExt | None:
    """The job's JobExt as other nodes, the AOF and Disque's replies see it: None for a
    plain job and for one whose JobExt holds only this node's history."""
    ext = job.ext
    return None if ext is None or only_history(ext) else ext
