"""A job on the cluster bus (REPLJOB, YOURJOBS): a msgpack-friendly list.

    [id, queue, body, state, flags, repl, ttl_ms, ctime, delay, retry, nacks,
     deliveries(, dedup key(, check, settle ms)])  a copy (REPLJOB: the holders are the
                                                    message's; the key is scoped to the
                                                    queue: see replication/dedup_checks.py)
    [..., nodes_delivered]            a job with its own holders (YOURJOBS)
    [..., [priority, group, due(,     last, only for a job using disq's extensions
           max deliveries, dead from, (`Job.ext`: PRIORITY, GROUP, AT / DELAY-MS; the
           reason, generation(,       next four for MAXDELIVERIES or a dead letter, the
           batch(, after)))]]         batch of a member: ADDJOB ... BATCH, nil or; the
                                      parents of ADDJOB ... AFTER)

`ttl_ms` is the time left before expiry, relative so that the nodes' clocks may differ
(Disque sends seconds left + 1; milliseconds keep the expiry exact). DELIVERED,
BACKOFF_WAIT and PLACED (`LOCAL_FLAGS`) are never sent: they say what *this* node did. The receiver trusts nothing: a field of the wrong
type or out of range drops the whole job, and node IDs it does not know are left out of
`nodes_delivered` (as Disque does), so a corrupt or hostile message can neither crash
the node nor make it wait for nodes that do not exist.

The extended fields are a list, which none of the fields before them is, so a copy's
trailing DEDUP fields and its extended fields are told apart by type. `due` is the
sender's Unix ms (0: none), turned into this node's clock by `due_from_peer`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Final

from ..attrs import flat, from_flat
from ..batches import MAX_BID_LEN, MAX_PARENTS
from ..history import only_history
from ..ids import is_valid_job_id
from ..job import (
    ACKED,
    ACTIVE,
    LOCAL_FLAGS,
    MAX_ERROR_LEN,
    MAX_ERRORS,
    Job,
    JobError,
    JobExt,
    holder_set,
)

COPY_FIELDS: Final = 12  # without the holders
FIELD_COUNT: Final = 13
MAX_U32: Final = 2**32 - 1
MAX_TTL_MS: Final = 2**40  # ~35 years: more than any TTL a client can ask for
MAX_CTIME: Final = 2**63 - 1
MAX_NODES: Final = 10_000  # node IDs in one job's list
MAX_FLAGS: Final = 0xFF
MAX_PRIORITY: Final = 255
MAX_GROUP_LEN: Final = 256
MAX_ORDERKEY_LEN: Final = 256  # ADDJOB ... ORDERKEY (spec.py ORDERKEY_MAX_LEN)
MAX_DUE_MS: Final = 2**63 - 1
MAX_DELIVERIES: Final = 65535
MAX_GENERATION: Final = 2**32 - 1


# (peer ID, a time of its clock in ms) -> the same time on this node's clock, never
# early: replication/clock.py's `to_local_ms` over the bus's clock offsets.
PeerClock = Callable[[str, int], int]


def due_from_peer(due_ms: int, peer_id: str, to_local: PeerClock | None = None) -> int:
    """A due time (Unix ms) set by the clock of node `peer_id` (the sender of the job),
    as a time of this node's clock: the one place where the peers' clocks meet this
    node's. Without `to_local` (tests, a peer's clock not known) the clocks are taken
    as agreeing."""
    return due_ms if to_local is None or not peer_id else to_local(peer_id, due_ms)


def encode_copy(job: Job, now: int) -> list[Any]:
    """The job without its holders: REPLJOB sends the holders once per message. The
    extended fields, if any, end the list: DEDUP's fields go before them."""
    data = _encode_fields(job, now)
    ext = job.ext
    if ext is not None and not only_history(ext):  # (a history is this node's alone)
        data.append(encode_ext(ext))
    return data


def encode_ext(ext: JobExt) -> list[Any]:
    if ext.orderkey is not None:  # ORDERKEY: an 11th field [key, strict] (after and
        return [ext.priority, ext.group, ext.due, ext.max_deliveries,  # attrs may be
                ext.dead_from, ext.dead_reason, ext.generation, ext.batch,  # None then)
                None if ext.after is None else list(ext.after),
                None if ext.attrs is None else flat(ext.attrs),
                [ext.orderkey, ext.order_strict]]
    if ext.attrs is not None:  # ATTR: a 10th field (after may be None then)
        return [ext.priority, ext.group, ext.due, ext.max_deliveries, ext.dead_from,
                ext.dead_reason, ext.generation, ext.batch,
                None if ext.after is None else list(ext.after), flat(ext.attrs)]
    if ext.after is not None:
        return [ext.priority, ext.group, ext.due, ext.max_deliveries, ext.dead_from,
                ext.dead_reason, ext.generation, ext.batch, list(ext.after)]
    if ext.batch is not None:
        return [ext.priority, ext.group, ext.due, ext.max_deliveries, ext.dead_from,
                ext.dead_reason, ext.generation, ext.batch]
    if ext.extra:
        return [ext.priority, ext.group, ext.due, ext.max_deliveries, ext.dead_from,
                ext.dead_reason, ext.generation]
    return [ext.priority, ext.group, ext.due]


def without_ext(data: list[Any]) -> list[Any]:
    """A decoded copy's list without its extended fields (what is left after the
    job's fields: the DEDUP ones)."""
    return data[:-1] if len(data) > COPY_FIELDS and type(data[-1]) is list else data


def encode_job(job: Job, my_id: str, now: int) -> list[Any]:
    """The job and its holders. A job only this node holds lists this node."""
    data = _encode_fields(job, now)
    delivered = job.nodes_delivered
    data.append(list(delivered) if delivered is not None else [my_id])
    ext = job.ext
    if ext is not None and not only_history(ext):  # (a history is this node's alone)
        data.append(encode_ext(ext))
    return data


def _encode_fields(job: Job, now: int) -> list[Any]:
    return [
        job.id, job.queue, job.body, job.state, job.flags & ~LOCAL_FLAGS, job.repl,
        max(job.etime - now, 1), job.ctime, job.delay, job.retry, job.nacks,
        job.deliveries,
    ]


def decode_copy(data: object, now: int, peer_id: str = "",
                to_local: PeerClock | None = None) -> Job | None:
    """Build an active job from `encode_copy`'s list (holders not set: the caller
    sets `nodes_delivered`), or None if anything is off. The caller stores the job
    (`Node.store_copy` sets its requeue time and flags). Up to three more fields
    (ADDJOB's DEDUP key, whether to check it, and how long the ADDJOB may still fail)
    are the caller's to check (`without_ext(data)[COPY_FIELDS:]`). `peer_id`: the
    sender, whose clock set the due time (`to_local`: due_from_peer)."""
    if type(data) is not list or not COPY_FIELDS <= len(data) <= COPY_FIELDS + 4:
        return None
    if type(data[-1]) is list and len(data) > COPY_FIELDS:
        ext = _decode_ext(data[-1], peer_id, to_local)
        if ext is None:
            return None
        job = _decode(data, now)
        if job is not None:
            job.ext = ext
        return job
    if len(data) > COPY_FIELDS + 3:
        return None
    return _decode(data, now)


def decode_job(data: object, now: int, known_ids: Mapping[str, str],
               *more: str, peer_id: str = "", to_local: PeerClock | None = None) -> Job | None:
    """Build an active job from `encode_job`'s list, or None if anything is off.

    `known_ids` maps each known node ID to the string to keep (the node's own ID
    object, so a million jobs share a few strings); other IDs are dropped. The
    holders are those listed and `more`. `peer_id`: the sender, whose clock set the
    due time."""
    if type(data) is not list or not FIELD_COUNT <= len(data) <= FIELD_COUNT + 1:
        return None
    ext = None
    if len(data) > FIELD_COUNT:
        ext = _decode_ext(data[FIELD_COUNT], peer_id, to_local)
        if ext is None:
            return None
    delivered = decode_holders(data[COPY_FIELDS], known_ids, *more)
    if delivered is None:
        return None
    job = _decode(data, now)
    if job is not None:
        job.nodes_delivered = delivered
        job.ext = ext
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
    job.flags = flags & ~LOCAL_FLAGS
    job.nacks = nacks
    job.deliveries = deliveries
    return job


def _decode_ext(data: object, peer_id: str, to_local: PeerClock | None) -> JobExt | None:
    """The extended fields [priority, group, due(, max deliveries, dead from, reason,
    generation(, batch(, parents(, attributes(, [orderkey, strict]))))))], checked as
    ADDJOB checks them: with attributes (a flat list), the parents may be None; with
    the order key, both may be."""
    if type(data) is not list or len(data) not in (3, 7, 8, 9, 10, 11):
        return None
    priority, group, due = data[:3]
    if not (type(priority) is int and 0 <= priority <= MAX_PRIORITY
            and type(due) is int and 0 <= due <= MAX_DUE_MS
            and (group is None or type(group) is bytes and 0 < len(group) <= MAX_GROUP_LEN)):
        return None
    ext = JobExt(priority, group, due_from_peer(due, peer_id, to_local) if due else 0)
    if len(data) >= 7:
        max_deliveries, dead_from, reason, generation = data[3:7]
        if not (type(max_deliveries) is int and 0 <= max_deliveries <= MAX_DELIVERIES
                and type(generation) is int and 0 <= generation <= MAX_GENERATION
                and (dead_from is None or type(dead_from) is bytes)
                and (reason is None or type(reason) is bytes and len(reason) <= 64)):
            return None
        ext.max_deliveries, ext.dead_from, ext.dead_reason = max_deliveries, dead_from, reason
        ext.generation = generation
    if len(data) >= 8:
        batch = data[7]
        if batch is not None and not (type(batch) is bytes and 0 < len(batch) <= MAX_BID_LEN):
            return None
        ext.batch = batch
    if len(data) == 11:  # ORDERKEY
        order = data[10]
        if not (type(order) is list and len(order) == 2 and type(order[0]) is bytes
                and 0 < len(order[0]) <= MAX_ORDERKEY_LEN and type(order[1]) is bool):
            return None
        ext.orderkey, ext.order_strict = order
    if len(data) >= 10 and not (len(data) == 11 and data[9] is None):  # ATTR's pairs
        attrs = from_flat(data[9])
        if attrs is None:
            return None
        ext.attrs = attrs
    if len(data) >= 9 and not (len(data) >= 10 and data[8] is None):
        after = data[8]
        if not (type(after) is list and 0 < len(after) <= MAX_PARENTS
                and all(type(p) is bytes and 0 < len(p) <= MAX_BID_LEN for p in after)):
            return None
        ext.after = tuple(after)
    return ext


def decode_error(data: object) -> JobError | None:
    """A job's error as a peer sends it ([delivery, unix ms, reason]: QUEUED,
    JOBMOVE), checked as NACK ... ERROR checks it; None if anything is off."""
    if type(data) is not list or len(data) != 3:
        return None
    delivery, when, reason = data
    if (type(delivery) is int and 1 <= delivery <= MAX_U32 and type(when) is int
            and 0 <= when <= MAX_DUE_MS and type(reason) is bytes
            and len(reason) <= MAX_ERROR_LEN):
        return delivery, when, reason
    return None


def decode_errors(data: object) -> list[JobError] | None:
    """JOBMOVE's list of errors (at most MAX_ERRORS); None if anything is off."""
    if type(data) is not list or len(data) > MAX_ERRORS:
        return None
    errors = []
    for item in data:
        error = decode_error(item)
        if error is None:
            return None
        errors.append(error)
    return errors
