"""ADDJOB's DEDUP option (a disq extension): the client's side of it. The key table is
`node.dedup` (disq/dedup.py); asking the other nodes is `replication.dedup`
(disq/replication/dedup.py)."""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING

from ...dedup import MAX_KEY_LEN
from ...errors import err
from ...job import WAIT_REPL
from ...node import now_ms

if TYPE_CHECKING:
    from ..connection import Client

_BAD_KEY = err(f"DEDUP key must be 1 to {MAX_KEY_LEN} bytes")


def add_deduped(client: Client, key: bytes, queue: bytes, body: bytes,
                options: tuple) -> bytes | None:
    """ADDJOB ... DEDUP key: the ID of the job added with `key` if the cluster knows
    it, else add the job (`options`: Node.add_job's arguments after the body) and
    record the key. Answered later when other nodes must be asked first."""
    if not key or len(key) > MAX_KEY_LEN:
        raise _BAD_KEY
    node = client.node
    server = client.server
    dedup = server.replication.dedup if server.replication is not None else None
    if dedup is None or key not in dedup.pending:
        known = node.dedup.get(key, now_ms())
        if known is not None:
            node.dedup.hits += 1
            return b"+" + known + b"\r\n"
    if dedup is None or node.cluster.size() <= 1:  # alone: this table is the truth
        job = node.add_job(queue, body, *options)
        if job.state == WAIT_REPL:  # cannot happen alone; keep ADDJOB's own path
            server.park_for_replication(client, job)
            return None
        node.dedup.record(key, job.id, job.etime)
        return b"+" + job.id + b"\r\n"
    # The client going away does not cancel the add: with a key, a retry gets the ID.
    answer = server._after_logging(client.defer(lambda: None))
    dedup.add(key, partial(node.add_job, queue, body, *options), answer)
    return None
