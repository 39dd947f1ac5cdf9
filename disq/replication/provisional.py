"""Copies of an ADDJOB ... DEDUP whose success their holder has not heard of (a disq
extension): an ADDJOB answered -NOREPL adds nothing, under kill -9 too.

A holder keeps a copy of a DEDUP ADDJOB (REPLJOB, confirmed with GOTJOB once it is as
safe as the AOF policy promises) before the ADDJOB's outcome is known: the origin may
still fail it (a holder that does not confirm, the timeout) and then deletes it
everywhere (DELJOB, best effort). A holder killed before that DELJOB reached its AOF,
or whose link dropped it, would load the copy again, queue it after its RETRY and
deliver a job whose ADDJOB failed: next to the job of the client's retry, two jobs for
one key. So:

* such a copy, on a node whose AOF is on, is marked PROVISIONAL (job.py) from the
  moment it is stored, and the mark is stored with it in the AOF (a bit of Disque's
  flags byte). With the AOF off a killed holder comes back empty, and nothing
  changes: a live holder that missed both the DEDUP_SETTLED and the DELJOB (a link
  dropped) still queues its copy after RETRY, rather than risk waiting for an origin
  that lost its own copy;
* the origin's DEDUP_SETTLED (the ADDJOB succeeded) clears the mark, and the copy is
  logged again without it (`Node.confirm_copy`);
* a PROVISIONAL copy is never queued by its holder on its own (its RETRY, or its due
  time): it asks the job's other holders first (JOB_CHECK). A holder that has the job
  and not as PROVISIONAL (the origin's own copy is never, and the others' once the
  ADDJOB settled) answers that the job exists: the mark is cleared and the copy is
  queued now. Once the origin (the holder named by the job's ID) answered that it
  does not have the job, or every other holder did, the copy is dropped with its
  DEDUP key: the ADDJOB failed, or was never answered (its origin was killed before
  it logged its own copy), or the job was acknowledged and collected. Otherwise (a
  holder not answering, or one that has it PROVISIONAL too) the holder asks again
  PROVISIONAL_RECHECK_MS (job.py) later, until the job's TTL. A node alone (no
  cluster) has nobody to ask: it clears the mark;
* a DEDUP question about the copy's key, once the ADDJOB's deadline is past or its
  origin is counted down, asks the holders the same way at once and is answered
  "busy" meanwhile (`verify`): neither proves the ADDJOB succeeded (a holder resumed
  from SIGSTOP counts every peer down until their PONGs come, and had answered the
  failed job's ID to the client's retry). Only an origin counted down that did not
  answer within PROVISIONAL_RECHECK_MS lets the holder answer the job's ID (an
  orphan copy, a job that exists) and clear the mark; one told by the origin to
  queue it (ENQUEUE, sent once the ADDJOB succeeded) clears it as well.

With the AOF on every node, kill -9 of any nodes leaves a successful ADDJOB's job on
its origin unmarked (it logs its copy before the ADDJOB answers), so the provisional
copies find it. Not covered: an ADDJOB whose origin keeps no copy (a node leaving,
short of memory, QUEUE-RANDOMLY) whose DEDUP_SETTLED and ENQUEUE reached no
holder's AOF before every holder was killed (the copies then wait, undelivered,
until their TTL), and an origin that lost its copy (its AOF off, or its disk: the
copies are dropped as if the ADDJOB had failed).
"""

from __future__ import annotations

import logging
from typing import Any, Final

from ..cluster import messages as m
from ..cluster.membership import ClusterNode
from ..cluster.port import BusPort
from ..ids import is_valid_job_id
from ..job import ACTIVE, DELETED, PROVISIONAL, PROVISIONAL_RECHECK_MS, WAIT_REPL, Job
from ..node import Node, now_ms

log = logging.getLogger("disq")

EXISTS, UNKNOWN, UNDECIDED = 0, 1, 2  # JOB_CHECK_REPLY's status
_MAX_TRACKED: Final = 100_000  # checks in flight before the gone jobs' entries are pruned


class _Round:
    """One JOB_CHECK of a copy: the holders that answered they do not have the job
    settled (their status); `due`: the copy is held back from its queue until it ends
    (its requeue time came), else the check was made for a DEDUP question
    (`ProvisionalCopies.verify`) and a job found to exist keeps its requeue time."""

    __slots__ = ("absent", "due", "started")

    def __init__(self, due: bool, started: int) -> None:
        self.absent: dict[str, int] = {}
        self.due = due
        self.started = started


class ProvisionalCopies:
    """JOB_CHECK / JOB_CHECK_REPLY; the core's `job_unconfirmed`; `verify` for the
    DEDUP questions about a provisional copy's key."""

    def __init__(self, node: Node, bus: BusPort) -> None:
        self.node = node
        self.bus = bus
        self._rounds: dict[bytes, _Round] = {}  # job id -> its check in flight
        bus.on(m.JOB_CHECK, self._on_check)
        bus.on(m.JOB_CHECK_REPLY, self._on_reply)

    def job_unconfirmed(self, job: Job) -> None:
        """A PROVISIONAL copy is due to be queued: ask its other holders first."""
        holders = self._other_holders(job)
        if not holders:  # nobody to ask (a copy that names no other holder): as before
            self.node.confirm_copy(job, now_ms())
            self.node.update_awake(job)
            return
        self._ask(job, holders, _Round(True, now_ms()))

    def verify(self, job: Job, now: int, origin_up: bool) -> bool:
        """Whether a node may answer the ID of `job`, a PROVISIONAL copy, for its
        DEDUP key, now that the time its ADDJOB could fail is past or its origin is
        not counted up. Neither proves the ADDJOB succeeded: the origin's DELJOB
        and DEDUP_FORGET may have been lost (this node killed, or stopped, before they
        arrived), and a node resumed from a pause counts every peer down until their
        PONGs come. So its holders are asked first, and a question is answered
        "busy" until they settle it (the copy confirmed or dropped). Only an origin
        counted down that did not answer within PROVISIONAL_RECHECK_MS leaves the
        copy to be vouched for: an orphan whose job exists as far as anyone can know."""
        holders = self._other_holders(job)
        if not holders:
            return True
        current = self._rounds.get(job.id)
        if current is None or now - current.started >= PROVISIONAL_RECHECK_MS:
            if current is not None and not origin_up and _origin(job.id, holders) not in (
                    current.absent):
                return True
            self._ask(job, holders, _Round(current is not None and current.due, now))
        return False

    def _ask(self, job: Job, holders: list[str], round_: _Round) -> None:
        rounds = self._rounds
        if len(rounds) >= _MAX_TRACKED:
            lookup = self.node.lookup
            self._rounds = rounds = {i: r for i, r in rounds.items() if lookup(i) is not None}
        current = rounds.get(job.id)
        if current is not None and current.due:
            round_.due = True
        rounds[job.id] = round_
        bus = self.bus
        bus.send_batched([i for i in holders if bus.can_send(i)], m.JOB_CHECK, [job.id])

    def _on_check(self, sender: ClusterNode, fields: list[Any]) -> None:
        """Whether this node has each job, and whether as a job that exists."""
        lookup = self.node.lookup
        replies: list[list[Any]] = []
        for job_id in fields:
            if type(job_id) is not bytes or not is_valid_job_id(job_id):
                continue
            job = lookup(job_id)
            if job is None or job.state == DELETED:
                status = UNKNOWN
            elif job.flags & PROVISIONAL or job.state == WAIT_REPL:
                status = UNDECIDED
            else:
                status = EXISTS
            replies.append([job_id, status])
        if replies:
            self.bus.send_batched((sender.id,), m.JOB_CHECK_REPLY, replies)

    def _on_reply(self, sender: ClusterNode, fields: list[Any]) -> None:
        node = self.node
        for item in fields:
            if not (type(item) is list and len(item) == 2 and type(item[0]) is bytes
                    and type(item[1]) is int):
                continue
            job_id, status = item
            round_ = self._rounds.get(job_id)
            job = node.lookup(job_id)
            if round_ is None or job is None or not job.flags & PROVISIONAL:
                if round_ is not None:
                    del self._rounds[job_id]
                continue
            if status == EXISTS:
                del self._rounds[job_id]
                node.dedup.settle((job_id,))
                node.confirm_copy(job, now_ms() if round_.due else 0)
                node.update_awake(job)
            elif status == UNKNOWN or status == UNDECIDED:
                holders = job.nodes_delivered
                if not holders or sender.id not in holders:
                    continue
                absent = round_.absent
                absent[sender.id] = status
                others = self._other_holders(job)
                origin = _origin(job_id, others)
                if origin is None or absent.get(origin) != UNKNOWN:
                    # The origin logs its own copy before its ADDJOB answers: without
                    # its word, every other holder must have answered.
                    if not all(i in absent for i in others):
                        continue
                    if any(s == UNDECIDED for s in absent.values()):
                        continue  # nobody knows yet: ask again later
                del self._rounds[job_id]
                log.info("Dropped the copy of job %s: no other holder has it (its ADDJOB "
                         "failed or was never answered, or the job is done)",
                         job_id.decode())
                node.dedup.forget_unsettled(job_id)
                node.unregister(job)
            if job.state != ACTIVE:
                self._rounds.pop(job_id, None)

    def _other_holders(self, job: Job) -> list[str]:
        """The job's holders but this node, among the nodes still known (one forgotten
        since, CLUSTER FORGET, holds nothing that counts)."""
        known = self.bus.known_id_map()
        my_id = self.node.id
        return [i for i in job.nodes_delivered or () if i != my_id and i in known]


def _origin(job_id: bytes, holders: list[str]) -> str | None:
    """The holder that made `job_id` (its ID starts with the 8 characters after
    "D-"), if it is one of `holders`."""
    prefix = job_id[2:10].decode("ascii", "replace")
    for node_id in holders:
        if node_id.startswith(prefix):
            return node_id
    return None
