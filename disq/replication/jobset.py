"""JOBSET across nodes (a disq extension): a change of a job's priority or
due time reaches every node that holds a copy, wherever the client is connected, and
+OK means that every one of them applied it.

* The node that knows the job applies the change (`Node.set_job`) and asks the job's
  other holders (JOBSET_ASK; `set_on_holders`).
* A node that does not know the job asks every reachable node (`set_elsewhere`).
* Each asked node that holds the job applies the change and answers JOBSET_REPLY:
  applied (with the job's holders as it knows them), unknown (it has no copy: lost,
  or never held), or refused (the error, e.g. the job is acked).
* The asker answers +OK once every holder applied the change or said it has no copy,
  the first refusal, -NOJOB if no node knows the job, else (a holder cut off, its
  link down or stuck: no answer within JOBSET_TIMEOUT_MS, or known failing and not
  asked) -NOREPL: that holder keeps the old fields and may deliver the job at the
  old time. The holders that applied it keep the change; the same JOBSET again,
  once every holder is reachable, answers +OK.

A due time travels as a time of the sender's clock; each receiver moves it onto its own
(`clock.to_local_ms`: late by the offset estimate's uncertainty, never early). JOBSET
(fire and forget) is what older nodes sent: still applied when it comes.
"""

from __future__ import annotations

import asyncio
from typing import Any, Final

from .. import errors
from ..cluster import messages as m
from ..cluster.membership import ClusterNode
from ..cluster.port import BusPort
from ..ids import is_valid_job_id
from ..job import ACTIVE, QUEUED, Job
from ..node import Node
from ..outcomes import Changed, OnChanged
from .clock import to_local_ms
from .wire import MAX_DUE_MS, MAX_PRIORITY

JOBSET_TIMEOUT_MS = 1000  # a node that did not answer by then did not apply the change
APPLIED, UNKNOWN, REFUSED = 0, 1, 2  # JOBSET_REPLY's status
MAX_ERROR_LEN: Final = 512  # a refusal's text, as sent
MAX_HOLDERS: Final = 1024  # node IDs an "applied" reply lists, at most


class _Ask:
    """A JOBSET in flight: the nodes asked that did not answer yet, the job's holders
    as known so far, those that applied the change, those that do not hold the job,
    the first refusal, and the client's callback."""

    __slots__ = ("waiting", "holders", "applied", "unknown", "refusal", "on_done",
                 "held_here")

    def __init__(self, waiting: set[str], holders: set[str], on_done: OnChanged,
                 held_here: bool) -> None:
        self.waiting = waiting
        self.holders = holders
        self.applied: set[str] = set()
        self.unknown: set[str] = set()
        self.refusal: errors.DisqError | None = None
        self.on_done = on_done
        self.held_here = held_here  # this node changed its own copy first

    def all_holders_applied(self) -> bool:
        return self.holders <= self.applied | self.unknown

    def outcome(self) -> Changed:
        """The answer once nobody more is to be heard from (None: applied)."""
        if self.refusal is not None:
            return self.refusal
        if not self.held_here and not self.applied:
            return errors.NOJOB()
        if not self.all_holders_applied():
            return errors.NOREPL_JOBSET()
        return None


class JobChanges:
    """JOBSET_ASK / JOBSET_REPLY (and JOBSET, which older nodes send); the core's
    `job_set` (a change to forward without waiting)."""

    def __init__(self, node: Node, bus: BusPort,
                 loop: asyncio.AbstractEventLoop | None = None) -> None:
        self.node = node
        self.bus = bus
        self._loop = loop
        self._asks: dict[int, _Ask] = {}  # requests in flight, by id
        self._ask_id = 0
        bus.on(m.JOBSET, self._on_jobset)
        bus.on(m.JOBSET_ASK, self._on_ask)
        bus.on(m.JOBSET_REPLY, self._on_reply)

    # -- what the core tells the cluster ------------------------------------------------
    def job_set(self, job: Job, priority: int | None, due: int | None) -> None:
        """This node changed its copy, nobody waits for the others: tell them."""
        if job.nodes_delivered:
            self.bus.broadcast(m.JOBSET, job.id, priority, due, node_ids=job.nodes_delivered)

    # -- a client's JOBSET ----------------------------------------------------------------
    def set_on_holders(self, job: Job, priority: int | None, due: int | None,
                       on_done: OnChanged) -> None:
        """This node changed its copy of `job` (`Node.set_job` without broadcast): ask
        its other holders to change theirs, and answer `on_done(outcome)` exactly once:
        None once every one applied it (or answered that it lost its copy), else
        -NOREPL (a holder not reached may deliver the job as before) once the others
        answered or after JOBSET_TIMEOUT_MS. `due`: Unix ms on this node's clock."""
        known = self.bus.known_id_map()  # (a node forgotten since holds nothing here)
        my_id = self.node.id
        holders = {i for i in job.nodes_delivered or () if i != my_id and i in known}
        if not holders:
            on_done(None)
            return
        self._ask(sorted(holders), holders, job.id, priority, due, on_done, True)

    def set_elsewhere(self, job_id: bytes, priority: int | None, due: int | None,
                      on_done: OnChanged) -> None:
        """JOBSET of a job this node does not hold: ask every reachable node. Each
        holder answers with the job's holders as it knows them; the answer is None once
        every one of them applied the change, the first refusal, -NOJOB if no node
        holds the job, else -NOREPL (as `set_on_holders`)."""
        peers = [n.id for n in self.bus.reachable_peers()]
        self._ask(peers, set(), job_id, priority, due, on_done, False)

    def _ask(self, node_ids: list[str], holders: set[str], job_id: bytes,
             priority: int | None, due: int | None, on_done: OnChanged,
             held_here: bool) -> None:
        self._ask_id += 1
        ask_id = self._ask_id
        bus = self.bus
        asked = {i for i in node_ids if bus.can_send(i) and bus.send(
            i, m.JOBSET_ASK, ask_id, job_id, priority, due)}
        ask = _Ask(asked, holders, on_done, held_here)
        if not asked:
            on_done(ask.outcome())
            return
        self._asks[ask_id] = ask
        loop = self._loop or asyncio.get_running_loop()
        loop.call_later(JOBSET_TIMEOUT_MS / 1000, self._done, ask_id)

    def _done(self, ask_id: int) -> None:
        ask = self._asks.pop(ask_id, None)
        if ask is not None:
            ask.on_done(ask.outcome())

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
        """Change this node's copy, and answer with the job's holders as known here
        (the asker makes sure every one of them applied it)."""
        if not fields or type(fields[0]) is not int:
            return
        ask_id = fields[0]
        change = _change(fields, 1)
        if change is None:
            return
        job = self.node.lookup(change[0])
        if job is None:
            self.bus.send(sender.id, m.JOBSET_REPLY, ask_id, UNKNOWN, "", [])
            return
        try:
            self.node.set_job(job, change[1], self._local(sender, change[2]),
                              broadcast=False)
        except errors.DisqError as exc:
            text = f"{exc.code} {exc.message}"[:MAX_ERROR_LEN]
            self.bus.send(sender.id, m.JOBSET_REPLY, ask_id, REFUSED, text, [])
            return
        holders = sorted(job.nodes_delivered or ())[:MAX_HOLDERS]
        self.bus.send(sender.id, m.JOBSET_REPLY, ask_id, APPLIED, "", holders)

    def _on_reply(self, sender: ClusterNode, fields: list[Any]) -> None:
        if len(fields) < 3 or type(fields[0]) is not int or type(fields[1]) is not int:
            return
        ask_id, status, text = fields[0], fields[1], fields[2]
        ask = self._asks.get(ask_id)
        if ask is None or sender.id not in ask.waiting:
            return  # answered already, timed out, or not asked
        ask.waiting.discard(sender.id)
        if status == APPLIED:
            ask.applied.add(sender.id)
            listed = fields[3] if len(fields) > 3 else None
            if type(listed) is list:
                my_id = self.node.id
                known = self.bus.known_id_map()
                ask.holders.update(i for i in listed[:MAX_HOLDERS]
                                   if type(i) is str and i != my_id and i in known)
            ask.holders.add(sender.id)
        elif status == UNKNOWN:
            ask.unknown.add(sender.id)
        elif status == REFUSED and ask.refusal is None and type(text) is str:
            code, _, message = text[:MAX_ERROR_LEN].partition(" ")
            if code.isalpha() and code.isupper():
                ask.refusal = errors.DisqError(code, message)
        if not ask.waiting or (ask.refusal is None and (ask.held_here or ask.applied)
                               and ask.all_holders_applied()):
            self._done(ask_id)

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
