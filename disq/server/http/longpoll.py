"""GET /queues/{q}/jobs waiting for a job: a consumer parked on the node's queues as a
RESP client parked in GETJOB is (`JobService.park`), its job handed over through an
asyncio future. The route awaits `done`; its client going away cancels the route, which
takes the consumer off the queues (`leave`) and puts back a job it got meanwhile."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from ... import history
from ...clock import now_ms

if TYPE_CHECKING:
    from ...acl import User
    from ...errors import DisqError
    from ...job import Job
    from ...node import Node
    from ...queue import Queue
    from ...where import Condition


class LongPoll:
    """A blocked consumer (the node's `Waiter`) for one HTTP request: `done` gets its
    job, None at its timeout, or the error that ended the wait (-LEAVING)."""

    __slots__ = ("node", "user", "loop", "done", "queues", "timer", "where")

    def __init__(self, node: Node, user: User, loop: asyncio.AbstractEventLoop,
                 timeout_ms: int) -> None:
        self.node = node
        self.user = user
        self.loop = loop
        self.where: list[Condition] | None = None  # (its GETJOB's WHERE: not over HTTP)
        self.done: asyncio.Future[Job | None] = loop.create_future()
        self.queues: list[Queue] = []  # the node's, while it waits (JobService.park)
        self.timer = (loop.call_later(timeout_ms / 1000, self.give_up, None)
                      if timeout_ms > 0 else None)

    def serve_job(self, job: Job) -> None:
        self.user.jobs_consumed += 1
        if job.ext is not None:  # (a plain job has no history: history.py)
            history.delivered(job, now_ms(), self.node.id, None)
        self.leave()
        self.done.set_result(job)

    def give_up(self, error: DisqError | None) -> None:
        self.leave()
        if not self.done.done():
            if error is None:
                self.done.set_result(None)
            else:
                self.done.set_exception(error)

    def wait_left_ms(self) -> int | None:
        timer = self.timer
        if timer is None:
            return None
        return max(0, int((timer.when() - self.loop.time()) * 1000) + 1)

    def leave(self) -> None:
        """Off the queues, the timer cancelled (served, timed out, or its client gone)."""
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        if self.queues:
            self.node.consumers.unblock(self, self.queues)
            self.queues = []

    def taken(self) -> Job | None:
        """The job it got, if any (its client may be gone before it was answered)."""
        done = self.done
        if done.done() and not done.cancelled() and done.exception() is None:
            return done.result()
        return None
