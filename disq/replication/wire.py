"""A job on the cluster bus (REPLJOB, YOURJOBS): a msgpack-friendly list.

    [id, queue, body, state, flags, repl, ttl_ms, ctime, delay, retry, nacks,
     deliveries(, dedup key(, check, settle ms)])  a copy (REPLJOB: the holders are the
                                                    message's; see replication/dedup.py)
    [..., nodes_delivered]            a job with its own holders (YOURJOBS)

`ttl_ms` is the time left before expiry, relative so that the nodes' clocks may differ
(Disque sends seconds left + 1; milliseconds keep the expiry exact). DELIVERED is never
sent: it says what *this* node did. The receiver trusts nothing: a field of the wrong
type or out of range drops the whole job, and node IDs it does not know are left out of
`nodes_delivered` (as Disque does), so a corrupt or hostile message can neither crash
the node nor make it wait for nodes that do not exist.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..ids import is_valid_job_id
from ..job import ACKED, ACTIVE, DELIVERED, Job, holder_set

COPY_FIELDS = 12  # without the holders
FIELD_COUNT = 13
MAX_U32 = 2**32 - 1
MAX_TTL_MS = 2**40  # ~35 years: more than any TTL a client can ask for
MAX_CTIME = 2**63 - 1
MAX_NODES = 10_000  # node IDs in one job's list
MAX_FLAGS = 0xFF


def encode_copy(job: Job, now: int) -> list[Any]:
    """The job without its holders: REPLJOB sends the holders once per message."""
    return [
        job.id, job.queue, job.body, job.state, job.flags & ~DELIVERED, job.repl,
        max(job.etime - now, 1), job.ctime, job.delay, job.retry, job.nacks,
        job.deliveries,
    ]


def encode_job(job: Job, my_id: str, now: int) -> list[Any]:
    """The job and its holders. A job only this node holds lists this node."""
    data = encode_copy(job, now)
    delivered = job.nodes_delivered
    data.append(list(delivered) if delivered is not None else [my_id])
    return data


def decode_copy(data: object, now: int) -> Job | None:
    """Build an active job from `encode_copy`'s list (holders not set: the caller
    sets `nodes_delivered`), or None if anything is off. The caller stores the job
    (`Node.store_copy` sets its requeue time and flags). Up to three more fields
    (ADDJOB's DEDUP key, whether to check it, and how long the ADDJOB may still fail)
    are the caller's to check."""
    if type(data) is not list or not COPY_FIELDS <= len(data) <= COPY_FIELDS + 3:
        return None
    return _decode(data, now)


def decode_job(data: object, now: int, known_ids: Mapping[str, str],
               *more: str) -> Job | None:
    """Build an active job from `encode_job`'s list, or None if anything is off.

    `known_ids` maps each known node ID to the string to keep (the node's own ID
    object, so a million jobs share a few strings); other IDs are dropped. The
    holders are those listed and `more`."""
    if type(data) is not list or len(data) != FIELD_COUNT:
        return None
    delivered = decode_holders(data[COPY_FIELDS], known_ids, *more)
    if delivered is None:
        return None
    job = _decode(data, now)
    if job is not None:
        job.nodes_delivered = delivered
    return job


def decode_holders(nodes: object, known_ids: Mapping[str, str],
                   *more: str) -> frozenset[str] | None:
    """A list of node IDs, with `more`, as a shared holder set of the known ones
    (None if it is not a list of strings): IDs this node does not know are left
    out, as Disque does."""
    if type(nodes) is not list or len(nodes) > MAX_NODES:
        return None
    delivered = set(more)
    for node_id in nodes:
        if type(node_id) is not str:
            return None
        kept = known_ids.get(node_id)
        if kept is not None:
            delivered.add(kept)
    return holder_set(delivered)


def _decode(data: list[Any], now: int) -> Job | None:
    (job_id, queue, body, state, flags, repl, ttl_ms, ctime, delay, retry, nacks,
     deliveries) = data[:COPY_FIELDS] if len(data) > COPY_FIELDS else data
    if type(job_id) is not bytes or not is_valid_job_id(job_id):
        return None
    if type(queue) is not bytes or type(body) is not bytes:
        return None
    # Plain ints (`type() is int`: not bools) within range; inline, as every
    # replicated job passes here.
    if not (
        type(state) is int and type(flags) is int and type(repl) is int
        and type(ttl_ms) is int and type(ctime) is int and type(delay) is int
        and type(retry) is int and type(nacks) is int and type(deliveries) is int
        and 0 <= state <= ACKED and 0 <= flags <= MAX_FLAGS and 1 <= repl <= 65535
        and 1 <= ttl_ms <= MAX_TTL_MS and 0 <= ctime <= MAX_CTIME
        and 0 <= delay <= MAX_U32 and 0 <= retry <= MAX_U32 and 0 <= nacks <= MAX_U32
        and 0 <= deliveries <= MAX_U32
    ):
        return None
    job = Job(job_id, queue, body, ACTIVE, ctime, now + ttl_ms, delay, retry, repl)
    job.flags = flags & ~DELIVERED
    job.nacks = nacks
    job.deliveries = deliveries
    return job
