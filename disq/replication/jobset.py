"""JOBSET across nodes (a disq extension, issue #18): a change of a job's priority or
due time reaches every node that holds a copy, wherever the client is connected.

* The node that knows the job applies the change (`Node.set_job`) and sends it to the
  job's other holders: JOBSET (fire and forget; a holder that lost its copy, or holds
  it acked, ignores it).
* A node that does not know the job asks every reachable node (JOBSET_ASK). Each one
  that holds it applies it as above and answers JOBSET_REPLY: applied, unknown, or
  refused (the error, e.g. the job is acked). The asker answers +OK at the first
  "applied", else the first refusal or -NOJOB once every node answered or after
  JOBSET_TIMEOUT_MS.

A due time travels as a time of the sender's clock; each receiver moves it onto its own
(`clock.to_local_ms`: late by the offset estimate's uncertainty, never early). Older
nodes ignore the message types they do not know: their copies keep the old fields.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, Final

from .. import errors
from ..cluster import messages as m
from ..cluster.membership import ClusterNode
from ..cluster.port import BusPort
from ..ids import is_valid_job_id
from ..job import ACTIVE, QUEUED, Job
from ..node import Node
from .clock import to_local_ms
from .wire import MAX_DUE_MS, MAX_PRIORITY

JOBSET_TIMEOUT_MS = 1000  # a node that does not know the job: -NOJOB after this
APPLIED, UNKNOWN, REFUSED = 0, 1, 2  # JOBSET_REPLY's status
MAX_ERROR_LEN: Final = 512  # a refusal's text, as sent

OnDone = Callable[[bytes], None]


class JobChanges:
    """JOBSET, JOBSET_ASK, JOBSET_REPLY; the core's `job_set` (a change to forward)."""

    def __init__(self, node: Node, bus: BusPort,
                 loop: asyncio.AbstractEventLoop | None = None) -> None:
        self.node = node
        self.bus = bus
        self._loop = loop
        # requests in flight: id -> [nodes yet to answer, first refusal or None, on_done]
        self._asks: dict[int, list[Any]] = {}
        self._ask_id = 0
        bus.on(m.JOBSET, self._on_jobset)
        bus.on(m.JOBSET_ASK, self._on_ask)
        bus.on(m.JOBSET_REPLY, self._on_reply)

    # -- what the core tells the cluster ------------------------------------------------
    def job_set(self, job: Job, priority: int | None, due: int | None) -> None:
        """This node changed its copy on a client's request: the other holders too."""
        if job.nodes_delivered:
            self.bus.broadcast(m.JOBSET, job.id, priority, due, node_ids=job.nodes_delivered)

    # -- a job this node does not know ----------------------------------------------------
    def set_elsewhere(self, job_id: bytes, priority: int | None, due: int | None,
                      on_done: OnDone) -> None:
        """JOBSET of a job this node does not hold: ask every reachable node, and
        answer through `on_done(reply)` exactly once (see the module's docstring).
        `due`: Unix ms on this node's clock, or None."""
        self._ask_id += 1
        ask_id = self._ask_id
        bus = self.bus
        asked = {n.id for n in bus.reachable_peers()
                 if bus.can_send(n.id) and bus.send(n.id, m.JOBSET_ASK, ask_id, job_id,
                                                    priority, due)}
        if not asked:
            on_done(errors.NOJOB.REPLY)
            return
        self._asks[ask_id] = [asked, None, on_done]
        loop = self._loop or asyncio.get_running_loop()
        loop.call_later(JOBSET_TIMEOUT_MS / 1000, self._done, ask_id, None)

    def _done(self, ask_id: int, reply: bytes | None) -> None:
        """Answer the request: `reply`, else its first refusal, else -NOJOB."""
        ask = self._asks.pop(ask_id, None)
        if ask is not None:
            ask[2](reply or ask[1] or errors.NOJOB.REPLY)

    # -- bus messages -------------------------------------------------------------------
    def _on_jobset(self, sender: ClusterNode, fields: list[Any]) -> None:
        change = _change(fields, 0)
        if change is None:
            return
        job = self.node.lookup(change[0])
        if job is None or (job.state != ACTIVE and job.state != QUEUED):
            return  # lost, acked here (the GC settles it), or still being replicated
        try:
            self.node.set_job(job, change[1], self._local(sender, change[2]),
                              broadcast=False)
        except errors.DisqError:
            pass  # the due time past this copy's expiry (clocks): it keeps its fields

    def _on_ask(self, sender: ClusterNode, fields: list[Any]) -> None:
        if not fields or type(fields[0]) is not int:
            return
        ask_id = fields[0]
        change = _change(fields, 1)
        if change is None:
            return
        job = self.node.lookup(change[0])
        if job is None:
            self.bus.send(sender.id, m.JOBSET_REPLY, ask_id, UNKNOWN, "")
            return
        try:
            self.node.set_job(job, change[1], self._local(sender, change[2]))
        except errors.DisqError as exc:
            text = f"{exc.code} {exc.message}"[:MAX_ERROR_LEN]
            self.bus.send(sender.id, m.JOBSET_REPLY, ask_id, REFUSED, text)
            return
        self.bus.send(sender.id, m.JOBSET_REPLY, ask_id, APPLIED, "")

    def _on_reply(self, sender: ClusterNode, fields: list[Any]) -> None:
        if len(fields) < 3 or type(fields[0]) is not int or type(fields[1]) is not int:
            return
        ask_id, status, text = fields[0], fields[1], fields[2]
        ask = self._asks.get(ask_id)
        if ask is None or sender.id not in ask[0]:
            return  # answered already, timed out, or not asked
        ask[0].discard(sender.id)
        if status == APPLIED:
            self._done(ask_id, b"+OK\r\n")
            return
        if status == REFUSED and ask[1] is None and type(text) is str:
            code, _, message = text[:MAX_ERROR_LEN].partition(" ")
            if code.isalpha() and code.isupper():
                ask[1] = errors.DisqError(code, message).reply()
        if not ask[0]:
            self._done(ask_id, None)

    def _local(self, sender: ClusterNode, due: int | None) -> int | None:
        return None if due is None else to_local_ms(self.bus, sender.id, due)


def _change(fields: list[Any], start: int) -> tuple[bytes, int | None, int | None] | None:
    """(job id, priority, due) from fields[start:start + 3], None if anything is off
    or the message changes nothing."""
    if len(fields) < start + 3:
        return None
    job_id, priority, due = fields[start:start + 3]
    if type(job_id) is not bytes or not is_valid_job_id(job_id):
        return None
    if priority is not None and not (type(priority) is int and 0 <= priority <= MAX_PRIORITY):
        return None
    if due is not None and not (type(due) is int and 0 <= due <= MAX_DUE_MS):
        return None
    if priority is None and due is None:
        return None
    return job_id, priority, due
