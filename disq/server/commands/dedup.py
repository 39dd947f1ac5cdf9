"""ADDJOB's DEDUP option (a disq extension): the client's side of it. The key table is
`node.dedup` (disq/dedup.py); asking the other nodes is `replication.dedup`
(disq/replication/dedup.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ...job import WAIT_REPL
from ...node import now_ms

if TYPE_CHECKING:
    from ..connection import Client, Pending


def add_deduped(client: Client, key: bytes, queue: bytes, body: bytes,
                options: tuple) -> bytes | Pending:
    """ADDJOB ... DEDUP key: the ID of the job added with `key` if the cluster knows
    it, else add the job (`options`: Node.add_job's arguments after the body) and
    record the key. Answered later when the job waits for its copies or other nodes
    must be asked first. The key was checked by AddJob.parse (disq_client.spec)."""
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
        job = node.add_job(queue, body, *options)
        if job.state == WAIT_REPL:  # cannot happen alone; keep ADDJOB's own path
            return server.park_for_replication(client, job)
        node.dedup.record(key, job.id, job.etime)
        return b"+" + job.id + b"\r\n"
    _, repl, _, _, ttl, _, async_, queue_randomly = options
    # Checked by the copies unless ASYNC or QUEUE-RANDOMLY (no synchronous copy here),
    # a reservation (RESERVED: another node asked for the key) or an unsettled copy.
    if known is None and not (async_ or queue_randomly or asking) and (
            dedup.copies_can_check(repl, ttl, now)):
        job = dedup.add_checked(key, queue, body, options)
        pending = _later(client)
        replication.wait(job, pending.answer)
        return pending
    pending = _later(client)
    dedup.ask(key, queue, body, options, pending.answer)
    return pending


def _later(client: Client) -> Pending:
    """The client's reply, given later once the AOF has the job. The client going
    away does not cancel the add: with a key, a retry gets the ID."""
    return client.pending(durable=True)
