"""ADDJOB's DEDUP option (a disq extension): the client's side of it. The key table is
`node.dedup` (disq/dedup_table.py); asking the other nodes is `replication.dedup`
(disq/replication/dedup_checks.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ... import errors
from ...job import WAIT_REPL, Job
from ...node import now_ms
from ...requests import AddJob

if TYPE_CHECKING:
    from ...replication.replicator import Replication
    from ..connection import Client
    from ..pending import Pending


def add_deduped(client: Client, request: AddJob) -> bytes | Pending:
    """ADDJOB ... DEDUP key: the ID of the job added with the key if the cluster knows
    it, else add the job and record the key. Answered later when the job waits for its
    copies or other nodes must be asked first. The key was checked by AddJob.parse
    (disq_client.spec)."""
    key = request.dedup
    assert key is not None
    node = client.node
    server = client.server
    replication = server.replication
    dedup = replication.dedup if replication is not None else None
    now = now_ms()
    known = None
    asking = dedup is not None and key in dedup.pending  # the same key, asked for here
    if not asking:
        known = node.dedup.peek(key, now)
        if known:  # (not a reservation)
            if dedup is not None and dedup.adding_here(known):  # its outcome is ours
                pending = _later(client)
                dedup.join(known, pending.answer)
                return pending
            if dedup is None or dedup.vouches(known, now):
                node.dedup.hits += 1
                return b"+" + known + b"\r\n"
            # A copy whose ADDJOB may still fail (unsettled): ask, as for a reservation.
    if dedup is None or node.cluster.size() <= 1:  # alone: this table is the truth
        job = node.add_job(request)
        if job.state == WAIT_REPL:  # cannot happen alone; keep ADDJOB's own path
            return park_for_replication(client, job)
        node.dedup.record(key, job.id, job.etime)
        return b"+" + job.id + b"\r\n"
    # Checked by the copies unless ASYNC or QUEUE-RANDOMLY (no synchronous copy here),
    # a reservation (RESERVED: another node asked for the key) or an unsettled copy.
    if known is None and not (request.async_ or request.queue_randomly or asking) and (
            dedup.copies_can_check(request.repl, request.ttl, now)):
        job = dedup.add_checked(request)
        pending = _later(client)
        replication.wait(job, pending.answer)
        return pending
    pending = _later(client)
    dedup.ask(request, pending.answer)
    return pending


def _later(client: Client) -> Pending:
    """The client's reply, given later once the AOF has the job. The client going
    away does not cancel the add: with a key, a retry gets the ID."""
    return client.pending(durable=True)


def park_for_replication(client: Client, job: Job) -> Pending:
    """ADDJOB waits until the job has its copies: the replication layer answers (the
    ID, or a NOREPL error), once the AOF has the job. If the client goes away first,
    the job is deleted from the cluster, as Disque's unblockClientWaitingJobRepl
    does. (Here, compiled, rather than on the Server: it runs for every ADDJOB; in
    this module, which ADDJOB's two paths share.)"""
    replication: Replication | None = client.server.replication
    if replication is None:  # no replication layer: nothing can confirm copies
        client.node.delete([job.id])
        raise errors.NOREPL
    pending = client.pending(replication.cancel_wait, job.id, durable=True)
    replication.wait(job, pending.answer)
    return pending
