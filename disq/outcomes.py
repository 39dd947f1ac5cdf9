"""Answers that come later, typed. An ADDJOB waiting for its copies or for a DEDUP
check, a JOBSET asking the job's other holders: the cluster (disq/replication/) hands
back what came of it as a typed outcome, never a reply's bytes (`Added`: the job's
ID or the error; `Changed`: None once every holder applied the change, or the error),
and each front end encodes it.

The job service (server/service.py) asks the front end for the answer it will give
later (`Answers.later`) only when it must wait, hands that answer's `added` or
`changed` to the cluster and returns it: the RESP connection's is a `Pending`
(server/pending.py: a reply that keeps its place in the connection's order), the
HTTP API's a `HeldAnswer` (here: its outcome awaited with a Future, `then`). The service
decides which answers wait for the AOF (`durable`: an ADDJOB's); `when_durable` is
the one gate, which the connection's replies sent at once go through too. What the
service gives as `on_cancel(job_id)` is what the front end runs if its client goes
away before the outcome (an ADDJOB waiting for its copies: the job is deleted
everywhere, as Disque does; none for a DEDUP add: a retry with the key gets the ID)."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Protocol, TypeVar

from .errors import DisqError

if TYPE_CHECKING:
    from .node import Node

# ADDJOB's outcome: the job's ID, or why it was not added (-NOREPL, ...)
Added = bytes | DisqError
OnAdded = Callable[[Added], None]
# JOBSET's outcome: None once every holder applied the change, or the error
Changed = DisqError | None
OnChanged = Callable[[Changed], None]
OnCancel = Callable[[bytes], None]

T = TypeVar("T")


def when_durable(node: Node, deliver: Callable[[T], object], value: T) -> None:
    """`deliver(value)` once what `node` logged is as safe as the AOF policy promises:
    now if it is (or nothing is recorded), else when the AOF says so."""
    if node.recording and not node.persistence.commit():
        node.persistence.on_durable(partial(deliver, value))
    else:
        deliver(value)


class Answer(Protocol):
    """An answer a front end gives later: the cluster calls `added` (ADDJOB) or
    `changed` (JOBSET) once, with the outcome."""

    def added(self, outcome: Added) -> None: ...

    def changed(self, outcome: Changed) -> None: ...


A = TypeVar("A", bound=Answer, covariant=True)


class Answers(Protocol[A]):
    """A front end's answers that come later: `later` makes one, which the job service
    returns (`on_cancel(job_id)` if the front end's client goes away before the
    outcome; `durable`: the outcome is given only once the AOF has what the node
    logged, through `when_durable`)."""

    def later(self, on_cancel: OnCancel | None, job_id: bytes, durable: bool) -> A: ...


class HeldAnswer:
    """An answer that comes later as a front end without a reply order of its own
    takes it (the HTTP API): the outcome is held until `then` asks for it, or given
    to it at once if it came already."""

    __slots__ = ("node", "durable", "deliver", "outcome", "came", "released", "on_cancel",
                 "job_id")

    def __init__(self, node: Node, on_cancel: OnCancel | None = None, job_id: bytes = b"",
                 durable: bool = False) -> None:
        self.node = node
        self.durable = durable
        self.deliver: Callable[[Added | Changed], object] | None = None
        self.outcome: Added | Changed = None  # held until `then`
        self.came = False  # the outcome came (it may still wait for the AOF)
        self.released = False  # ... and may be delivered
        self.on_cancel = on_cancel
        self.job_id = job_id

    def added(self, outcome: Added) -> None:
        self._came(outcome)

    def changed(self, outcome: Changed) -> None:
        self._came(outcome)

    def _came(self, outcome: Added | Changed) -> None:
        if self.came:
            return
        self.came = True
        if self.durable:
            when_durable(self.node, self._release, outcome)
        else:
            self._release(outcome)

    def _release(self, outcome: Added | Changed) -> None:
        deliver = self.deliver
        if deliver is not None:
            deliver(outcome)
            return
        self.outcome = outcome
        self.released = True

    def then(self, deliver: Callable[[Added | Changed], object]) -> None:
        """The front end's delivery of the outcome (called once, at once if it came
        and may be delivered already)."""
        if self.released:
            self.released = False
            outcome, self.outcome = self.outcome, None
            deliver(outcome)
        else:
            self.deliver = deliver

    def cancel(self) -> None:
        """The front end's client went away: cancel what waits, if anything does."""
        if not self.came and self.on_cancel is not None:
            self.on_cancel(self.job_id)
            self.on_cancel = None


class HeldAnswers:
    """The `Answers` of a front end without a reply order of its own: `HeldAnswer`s."""

    __slots__ = ("node",)

    def __init__(self, node: Node) -> None:
        self.node = node

    def later(self, on_cancel: OnCancel | None, job_id: bytes, durable: bool) -> HeldAnswer:
        return HeldAnswer(self.node, on_cancel, job_id, durable)
