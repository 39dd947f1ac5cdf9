"""Answers that come later, typed. An ADDJOB waiting for its copies or for a DEDUP
check, a JOBSET asking the job's other holders: the cluster (disq/replication/) hands
back what came of it as a typed outcome, never a reply's bytes (`Added`: the job's
ID or the error; `Changed`: None once every holder applied the change, or the error),
and each front end encodes it (RESP: server/pending.py, `Pending.added`; HTTP: JSON).

`Later` is the job service's handle on one such answer (server/service.py returns
it): the cluster calls its `answer` with the outcome; the front end takes it with
`then`, which it gets only once what the node logged is as safe as the AOF policy
promises (the one place answers wait for the AOF: `when_durable`, which the RESP
connection's replies sent at once use too); `cancel` is what the front end calls if
its client goes away first."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Generic, TypeVar

from .errors import DisqError

if TYPE_CHECKING:
    from .node import Node

# ADDJOB's outcome: the job's ID, or why it was not added (-NOREPL, ...)
Added = bytes | DisqError
OnAdded = Callable[[Added], None]
# JOBSET's outcome: None once every holder applied the change, or the error
Changed = DisqError | None
OnChanged = Callable[[Changed], None]

T = TypeVar("T")


def when_durable(node: Node, deliver: Callable[[T], object], value: T) -> None:
    """`deliver(value)` once what `node` logged is as safe as the AOF policy promises:
    now if it is (or nothing is recorded), else when the AOF says so."""
    if node.recording and not node.persistence.commit():
        node.persistence.on_durable(partial(deliver, value))
    else:
        deliver(value)


class Later(Generic[T]):
    """One answer that comes later. The cluster gets its `answer` (an `OnAdded` /
    `OnChanged`) and calls it with the outcome once; with `durable`, the outcome is held
    until the AOF has what the node logged (`when_durable`); the front end gets it
    through `then` (at once if it came already). `cancel`: the front end's client
    went away before the outcome: `on_cancel(job_id)` runs (an ADDJOB waiting for its
    copies: the job is deleted everywhere), unless there is none (a DEDUP add: a
    retry with the key gets the ID)."""

    __slots__ = ("node", "durable", "deliver", "outcome", "came", "released", "on_cancel",
                 "job_id")

    def __init__(self, node: Node, durable: bool = True,
                 on_cancel: Callable[[bytes], None] | None = None, job_id: bytes = b"") -> None:
        self.node = node
        self.durable = durable
        self.deliver: Callable[[T], object] | None = None
        self.outcome: T | None = None  # held until `then`
        self.came = False  # the outcome came (it may still wait for the AOF)
        self.released = False  # ... and may be delivered
        self.on_cancel = on_cancel
        self.job_id = job_id

    def answer(self, outcome: T) -> None:
        """The cluster's outcome. (A bound method, not `__call__`: Python calls an
        instance through a tuple of its arguments; `_release` inlined: this runs for
        every ADDJOB that waits for its copies.)"""
        if self.came:
            return
        self.came = True
        if self.durable and self.node.recording:  # (the test the per-job paths make)
            when_durable(self.node, self._release, outcome)
            return
        deliver = self.deliver
        if deliver is not None:
            deliver(outcome)
            return
        self.outcome = outcome
        self.released = True

    def _release(self, outcome: T) -> None:
        deliver = self.deliver
        if deliver is not None:
            deliver(outcome)
            return
        self.outcome = outcome
        self.released = True

    def then(self, deliver: Callable[[T], object]) -> None:
        """The front end's delivery of the outcome (called once, at once if it came
        and may be delivered already)."""
        if self.released:
            self.released = False
            outcome, self.outcome = self.outcome, None
            deliver(outcome)  # type: ignore[arg-type]
        else:
            self.deliver = deliver

    def cancel(self) -> None:
        """The front end's client went away: cancel what waits, if anything does."""
        if not self.came and self.on_cancel is not None:
            self.on_cancel(self.job_id)
            self.on_cancel = None
