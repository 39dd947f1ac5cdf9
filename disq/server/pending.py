"""Replies that come later. A handler returns a `Pending` in place of bytes (an ADDJOB
waiting for its copies, a DEDUP check, a parked GETJOB) and whoever finishes the work
answers it; `LaterReplies`, a part of `Client`, keeps the client's replies in request
order behind it and parks a blocked GETJOB until a job or its timeout. The job
service's answers that come later are Pendings too (`LaterReplies.later`, disq/outcomes.py):
`Pending.added` and `Pending.changed` encode their typed outcomes."""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from time import perf_counter_ns
from typing import TYPE_CHECKING, Any

from mypy_extensions import mypyc_attr, trait

from .. import history
from ..clock import now_ms
from ..errors import DisqError
from ..outcomes import OnCancel, when_durable
from . import reply
from .read_pause import ReadPause

if TYPE_CHECKING:
    from ..acl import User
    from ..errors import DisqError
    from ..job import Job
    from ..node import Node
    from ..queue import Queue
    from ..where import Condition
    from .app import Server
    from .histograms import Histogram
    from .hotstate import HotState

class Pending:
    """A reply that comes later: a handler returns one in place of bytes, and whoever
    finishes the work calls `answer(data)` (an ADDJOB's copies confirmed, a DEDUP
    check done, a job for a parked GETJOB). The client's later replies wait behind it
    so they leave in request order; `holds` (a parked GETJOB): its later requests
    wait too. With `durable` (the job service's word), the typed outcome is given
    only once the AOF has what the node logged (`later.when_durable`).
    `on_cancel(cancel_arg)` runs if the client goes away first. The reply of one job
    of an ADDJOBS goes to its `batch` (`BatchReplies`), not to the client."""

    __slots__ = ("client", "reply", "on_cancel", "cancel_arg", "holds", "durable", "batch",
                 "index", "histogram", "started")

    def __init__(self, client: LaterReplies, on_cancel: Callable[[Any], None] | None,
                 cancel_arg: Any, holds: bool) -> None:
        self.client = client
        self.reply: bytes | None = None
        self.on_cancel = on_cancel
        self.cancel_arg = cancel_arg
        self.holds = holds
        self.durable = False
        self.batch: BatchReplies | None = None
        self.index = 0  # in `batch`
        self.histogram: Histogram | None = None  # timed until answered (`timed`)
        self.started = 0

    def timed(self, histogram: Histogram, started_ns: int) -> None:
        """The request's time until answered goes to `histogram` (ADDJOB, GETJOB)."""
        self.histogram = histogram
        self.started = started_ns

    def added(self, outcome: bytes | DisqError) -> None:
        """An ADDJOB's outcome (disq/outcomes.py), as its reply: +<id>, or the error."""
        if self.durable and self.client.node.recording:
            self.durable = False  # given again once it is safe
            when_durable(self.client.node, self.added, outcome)
            return
        self.answer(b"+" + outcome + b"\r\n" if type(outcome) is bytes
                    else outcome.reply())  # type: ignore[union-attr]

    def changed(self, outcome: DisqError | None) -> None:
        """A JOBSET's outcome, as its reply: +OK, or the error."""
        if self.durable and self.client.node.recording:
            self.durable = False
            when_durable(self.client.node, self.changed, outcome)
            return
        self.answer(reply.OK if outcome is None else outcome.reply())

    def answer(self, data: bytes) -> None:
        if self.reply is not None:
            return
        client = self.client
        self.reply = data
        histogram = self.histogram
        if histogram is not None:
            histogram.observe((perf_counter_ns() - self.started) // 1000)
        batch = self.batch
        if batch is not None:
            batch.fill(self.index, data)
            return
        if not client._flush_scheduled:  # one write for all answered this turn
            client._flush_scheduled = True
            client.server.loop.call_soon(client._flush_replies)  # type: ignore[union-attr]


class BatchReplies:
    """The replies of an ADDJOBS's jobs, one array once every job has one: each
    job's reply is given now (`give`) or is a Pending of its own (`adopt`, as its ADDJOB
    would have returned: answered, it fills its place here)."""

    __slots__ = ("replies", "left", "later", "pendings")

    def __init__(self, count: int) -> None:
        self.replies: list[bytes] = [b""] * count
        self.left = 0  # replies still to come
        self.later: Pending | None = None  # the client's, once some reply waits
        self.pendings: list[Pending] = []

    def give(self, index: int, data: bytes) -> None:
        self.replies[index] = data

    def adopt(self, index: int, pending: Pending) -> None:
        if pending.reply is not None:  # answered already (in the same loop turn)
            self.replies[index] = pending.reply
            return
        pending.batch = self
        pending.index = index
        self.pendings.append(pending)
        self.left += 1

    def result(self, client: LaterReplies) -> bytes | Pending:
        """The handler's reply: the array now, or the Pending it comes through."""
        if not self.left:
            return self._array()
        self.later = client.pending(self._cancel)
        return self.later

    def fill(self, index: int, data: bytes) -> None:
        self.replies[index] = data
        self.left -= 1
        if not self.left and self.later is not None:
            self.later.answer(self._array())

    def _array(self) -> bytes:
        return b"*%d\r\n%s" % (len(self.replies), b"".join(self.replies))

    def _cancel(self, _: object) -> None:
        """The client went away: each job's ADDJOB is cancelled as it would have been."""
        for pending in self.pendings:
            if pending.reply is None and pending.on_cancel is not None:
                pending.on_cancel(pending.cancel_arg)


@trait  # a base of several (mypyc compiles traits, not multiple inheritance)
@mypyc_attr(allow_interpreted_subclasses=True)  # as Client, its class
class LaterReplies:
    """Client's replies that do not leave at once (a mixin: the state is set in
    Client.__init__)."""

    server: Server
    hot: HotState
    node: Node
    transport: asyncio.Transport | None
    closing: bool
    close_after_reply: bool
    _pending: deque[list[bytes]]  # requests held while blocked (or paused)
    _replies: deque[bytes | Pending]
    _flush_scheduled: bool
    reads: ReadPause  # when the connection reads its client
    blocked: bool
    jobs_taken: int
    where: list[Condition] | None
    _parked: Pending | None
    blocked_queues: list[Queue]
    block_timer: asyncio.TimerHandle | None
    block_with_counters: bool
    user: User
    id: int
    addr: str

    def consumer_name(self) -> bytes:
        """This client as a job's history names who took it (history.Consumer)."""
        return f"client id={self.id} addr={self.addr}".encode()

    # Client's own method, which these call (a trait declares it: Client defines it).
    def _execute(self, requests: list[list[bytes]]) -> None:
        raise NotImplementedError

    # -- the reply queue: replies leave in request order ----------------------------------
    def send(self, data: bytes) -> None:
        if self._replies:  # behind replies still awaited: keep the order
            self._replies.append(data)
            self._flush_replies()
        elif self.transport is not None and not self.closing:
            self.hot.net_output_bytes += len(data)
            self.user.bytes_out += len(data)
            self.transport.write(data)

    def pending(self, on_cancel: Callable[[Any], None] | None = None, cancel_arg: Any = None,
                *, holds: bool = False) -> Pending:
        """A reply this client gets later (see Pending): the handler returns it."""
        self.reads.replies_held(len(self._replies))  # the cluster catches up with this client
        return Pending(self, on_cancel, cancel_arg, holds)

    def later(self, on_cancel: OnCancel | None, job_id: bytes, durable: bool) -> Pending:
        """An answer of the job service that comes later (disq/outcomes.py `Answers`):
        the handler returns it; `on_cancel(job_id)` if this client goes away first."""
        pending = self.pending(on_cancel, job_id)
        pending.durable = durable
        return pending

    def _flush_replies(self) -> None:
        """Write the replies at the head of the queue that are ready, in one write."""
        self._flush_scheduled = False
        replies = self._replies
        ready: list[bytes] = []
        while replies:
            head = replies[0]
            if type(head) is Pending:
                if head.reply is None:
                    break
                head = head.reply
            replies.popleft()
            ready.append(head)  # type: ignore[arg-type]
        if ready and self.transport is not None and not self.closing:
            data = b"".join(ready)
            self.hot.net_output_bytes += len(data)
            self.user.bytes_out += len(data)
            self.transport.write(data)
        if not replies and self.close_after_reply and self.transport is not None:
            self.transport.close()
        if not self.blocked:
            self.reads.replies_left(len(replies))

    # -- a consumer parked in GETJOB, and the requests it holds -------------------------
    def park(self, timeout_ms: int, with_counters: bool) -> Pending:
        """Block in GETJOB until a job arrives or the timeout: the handler returns
        the Pending reply this gives, and sets `blocked_queues` (JobService.park)."""
        self._parked = parked = self.pending(holds=True)
        self.blocked = True
        self.block_with_counters = with_counters
        if timeout_ms > 0:
            self.block_timer = self.server.loop.call_later(  # type: ignore[union-attr]
                timeout_ms / 1000, self._block_timeout)
        return parked

    def serve_job(self, job: Job) -> None:
        """Called by the node: a job for this blocked consumer (always exactly one)."""
        entry = (reply.job_entry_with_counters(job) if self.block_with_counters
                 else reply.job_entry(job))
        self.user.jobs_consumed += 1
        self.jobs_taken += 1
        now = now_ms()
        self.hot.latencies.delivered(job, now)
        if job.ext is not None:  # (a plain job has no history: history.py)
            history.delivered(job, now, self.node.id, self)
        self.unblock(b"*1\r\n" + entry)

    def give_up(self, error: DisqError | None) -> None:
        """Called by the node: the wait ends without a job (DEBUG FLUSHALL: a null
        reply, as at the timeout; CLUSTER LEAVING: the error)."""
        self.unblock(reply.NULL_ARRAY if error is None else error.reply())

    def wait_left_ms(self) -> int | None:
        """How long this blocked consumer still waits (ms, rounded up); None: no timeout."""
        timer = self.block_timer
        if timer is None:
            return None
        return max(0, int((timer.when() - self.server.loop.time()) * 1000) + 1)  # type: ignore

    def _block_timeout(self) -> None:
        self.block_timer = None
        if self.blocked:
            self.unblock(reply.NULL_ARRAY)

    def _cancel_block(self) -> None:
        if self.block_timer is not None:
            self.block_timer.cancel()
            self.block_timer = None
        if self.blocked_queues:
            self.node.consumers.unblock(self, self.blocked_queues)
            self.blocked_queues = []
        self.blocked = False
        self.where = None

    def unblock(self, data: bytes) -> None:
        """Answer the parked request and resume the requests that queued behind it."""
        if not self.blocked:
            return
        self._cancel_block()
        parked, self._parked = self._parked, None
        if parked is not None:
            parked.answer(data)
            self._flush_replies()  # now: a consumer's job leaves this loop turn
        if self._pending:
            self.server.loop.call_soon(self._resume)  # type: ignore[union-attr]
        else:
            self.reads.resume()

    def _resume(self) -> None:
        if self.blocked or self.closing:
            return
        pending, self._pending = self._pending, deque()
        self._execute(list(pending))
        if not self.blocked:
            self.reads.resume()

    def resume_after_pause(self) -> None:
        """The CLIENT PAUSE ended: run the requests held meanwhile."""
        if self._pending and not self.blocked and not self.closing:
            self._resume()

