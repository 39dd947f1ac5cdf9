"""The job record.

A node may hold a million of these, so the record has `__slots__`, keeps times as
plain ints (milliseconds since the epoch), and keeps `nodes_delivered` as None while
the only holder is this node (the common single-node case).
"""

from __future__ import annotations

from collections.abc import Iterable

from .gcfree import untrack

# States (the numbers are Disque's).
WAIT_REPL = 0
ACTIVE = 1
QUEUED = 2
ACKED = 3
DELETED = 4  # disq only: removed from the node; lets stale timer entries be skipped

STATE_NAMES = {WAIT_REPL: b"wait-repl", ACTIVE: b"active", QUEUED: b"queued", ACKED: b"acked"}
STATE_BY_NAME = {v.decode(): k for k, v in STATE_NAMES.items()}

# Flags.
BCAST_QUEUED = 1 << 0  # broadcast QUEUED the next time this job is queued
BCAST_WILLQUEUE = 1 << 1  # send WILLQUEUE shortly before the requeue time
DELIVERED = 1 << 2  # handed to a client at least once by this node

WILLQUEUE_ADVANCE_MS = 500


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
        "nodes_delivered",  # None = only this node, else a set of node IDs (str)
        "nodes_confirmed",  # None or set of node IDs
        "gc_retry",  # number of ACK GC attempts so far
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
        self.nodes_delivered: set[str] | None = None
        self.nodes_confirmed: set[str] | None = None
        self.gc_retry = 0
        untrack(self)  # a job is never part of a reference cycle (see gcfree.py)

    def __repr__(self) -> str:
        return f"<Job {self.id.decode()} {STATE_NAMES.get(self.state, b'deleted').decode()}>"


def node_id_set(ids: Iterable[str] = ()) -> set[str]:
    """A new `nodes_delivered` / `nodes_confirmed` set. It holds only strings, so like
    the job itself it is kept out of the cycle collector (see gcfree.py); adding to it
    later does not track it again."""
    ids_set = set(ids)
    untrack(ids_set)
    return ids_set

