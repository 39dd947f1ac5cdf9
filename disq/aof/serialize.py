"""Disque's job serialization, storage flavour (SER_STORAGE), byte for byte.

    u32 length of what follows
    68 bytes, the leading fields of Disque's `struct job`, little-endian:
        id[40]  state:4|gc_retry:4 (one byte)  flags u8  repl u16  etime u32 (unix s)
        ctime u64  delay u32  retry u32  num_nacks u16  num_deliv u16
    u32 + queue name
    u32 + body
    u32 count + count x 40-byte node IDs (the nodes that may hold a copy)

Times are absolute and the state is kept, so a file written by Disque loads here and
the other way round. disq keeps `etime` in milliseconds: it is stored rounded up to
the second (a restarted job never expires early). Counters wider than the format's
fields are stored saturated.

A job using disq's extensions (`Job.ext`: PRIORITY, GROUP, AT / DELAY-MS,
MAXDELIVERIES, a dead letter's state) has its extended fields serialized apart
(`serialize_ext`), as a second LOADJOB argument: a job's serialization stays Disque's,
and an AOF without extended jobs loads in Disque.

    u8 format (1)  u8 priority  u64 due (Unix ms, 0: none)  group (the rest; none: empty)
    u8 format (2)  u8 priority  u64 due  u16 max deliveries  u32 generation
        u32 + group  u32 + dead from  u32 + reason   (a length of 0xFFFFFFFF: none)
    u8 format (3)  format 2's fields, then the errors of NACK ... ERROR (oldest first):
        u8 count (1..5), each  u32 delivery  u64 unix ms  u32 + reason
    u8 format (4)  format 2's fields, then u8 count (0..5) and the errors as format 3's,
        then u32 + batch (ADDJOB ... BATCH; a length of 0xFFFFFFFF: none), u8 count
        (0..32) and each parent as u32 + ID (ADDJOB ... AFTER)
    u8 format (5)  format 4's fields, then u8 count (1..16) and each attribute as
        u32 + key  u32 + value (ADDJOB ... ATTR)
    u8 format (6)  format 5's fields, the attributes' count 0..16 (0: none), then
        u32 + order key  u8 strict (0 or 1) (ADDJOB ... ORDERKEY k [STRICT])

A job's progress (WORKING ... PROGRESS / DATA) is not recorded: the next report
replaces it.

A result kept for a job (results.JobEnd, a disq extension) is LOADRESULT's argument:

    u8 format (1)  u8 how (0 acked, 1 dead)  u64 expires (Unix ms)  u64 ttl (ms)
    job id[40]  u32 + queue  u32 + data   (a length of 0xFFFFFFFF: none)

The bus (`disq.replication.wire`) has its own msgpack encoding; this module depends
on nothing but the job record, so it can serve there too.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping

from ..attrs import Attrs, flat, from_flat
from ..batches import MAX_BID_LEN, MAX_PARENTS
from ..ids import is_valid_job_id
from ..job import (
    ACTIVE,
    BACKOFF_WAIT,
    MAX_BODY,
    MAX_ERROR_LEN,
    MAX_ERRORS,
    QUEUED,
    Job,
    JobError,
    JobExt,
    JobNotes,
    holder_set,
)
from ..policies import MAX_RESULT_TTL_MS
from ..results import ACKED_END, DEAD_END, JobEnd

# The fixed part, with the length prefix in front and the queue name's length after.
_HEAD = struct.Struct("<I40sBBHIQIIHHI")
U32 = struct.Struct("<I")
JOB_STRUCT_SER_LEN = 68
NODE_ID_LEN = 40
_FIXED = JOB_STRUCT_SER_LEN + 12  # beyond the length prefix: struct + three u32 counts
_BEFORE_TAIL = JOB_STRUCT_SER_LEN + 8  # struct + the queue and body lengths
U16_MAX = 0xFFFF
U32_MAX = 0xFFFFFFFF
STORED_STATES = (ACTIVE, QUEUED)
_EXT = struct.Struct("<BBQ")
_EXT2 = struct.Struct("<BBQHI")
EXT_FORMAT = 1
EXT_FORMAT_2 = 2  # with MAXDELIVERIES and a dead letter's state
EXT_FORMAT_3 = 3  # format 2, then the errors of NACK ... ERROR
EXT_FORMAT_4 = 4  # format 2, the errors (maybe none), a batch member's batch
EXT_FORMAT_5 = 5  # format 4, then the attributes
EXT_FORMAT_6 = 6  # format 5 (attributes maybe none), then the order key
_ERROR = struct.Struct("<IQI")  # an error: delivery, unix ms, reason's length
MAX_GROUP_LEN = 256
_NONE = 0xFFFFFFFF
_END = struct.Struct("<BBQQ40s")
END_FORMAT = 1
_END_HOWS = (ACKED_END, DEAD_END)  # by the code stored


class CorruptJob(ValueError):
    """A serialized job (or result) that does not decode; the message says what is
    wrong."""


class JobEncoder:
    """Serializes jobs of one node. A job only this node holds (`nodes_delivered` is
    None) lists this node, as Disque's own `nodes_delivered` always does."""

    __slots__ = ("_alone_tail", "_node_bytes")

    def __init__(self, my_id: str) -> None:
        me = my_id.encode()
        self._alone_tail = U32.pack(1) + me
        self._node_bytes: dict[str, bytes] = {my_id: me}

    def serialize(self, job: Job) -> bytes:
        queue = job.queue or b""
        body = job.body or b""
        delivered = job.nodes_delivered
        if delivered is None:
            tail = self._alone_tail
        else:
            tail = U32.pack(len(delivered)) + b"".join(map(self._node_id, delivered))
        etime = -(-job.etime // 1000)  # ms -> s, rounded up
        head = _HEAD.pack(
            _BEFORE_TAIL + len(queue) + len(body) + len(tail),
            job.id, job.state & 0x0F, job.flags & 0xFF, job.repl,
            etime if etime <= U32_MAX else U32_MAX, job.ctime,
            job.delay if job.delay <= U32_MAX else U32_MAX,
            job.retry if job.retry <= U32_MAX else U32_MAX,
            job.nacks if job.nacks <= U16_MAX else U16_MAX,
            job.deliveries if job.deliveries <= U16_MAX else U16_MAX,
            len(queue))
        return b"".join((head, queue, U32.pack(len(body)), body, tail))

    def _node_id(self, node_id: str) -> bytes:
        encoded = self._node_bytes.get(node_id)
        if encoded is None:
            encoded = self._node_bytes[node_id] = node_id.encode()
        return encoded


def deserialize_job(data: bytes, known_ids: Mapping[str, str] | None = None) -> Job:
    """The job in `data` (exactly one serialized job), as stored: absolute times,
    state and flags as written. `known_ids` maps the node IDs to keep to the string
    to use (one shared object per node); others are dropped, as Disque drops nodes
    it does not know. None keeps every ID. Raises CorruptJob."""
    size = len(data)
    if size < 4 + _FIXED:
        raise CorruptJob(f"{size} bytes, shorter than any serialized job")
    (length, job_id, state_byte, flags, repl, etime, ctime, delay, retry, nacks, deliv,
     queue_len) = _HEAD.unpack_from(data)
    if length != size - 4:
        raise CorruptJob(f"length field says {length} bytes, {size - 4} follow it")
    if not is_valid_job_id(job_id):
        raise CorruptJob(f"invalid job ID {job_id!r}")
    pos = _HEAD.size
    queue = data[pos:pos + queue_len]
    pos += queue_len
    if pos + 8 > size:
        raise CorruptJob(f"queue name length {queue_len} runs past the end")
    (body_len,) = U32.unpack_from(data, pos)
    pos += 4
    body = data[pos:pos + body_len]
    pos += body_len
    if pos + 4 > size:
        raise CorruptJob(f"body length {body_len} runs past the end")
    (count,) = U32.unpack_from(data, pos)
    pos += 4
    if pos + count * NODE_ID_LEN != size:
        raise CorruptJob(f"{count} node IDs do not fill the {size - pos} bytes left")
    delivered: set[str] = set()
    for _ in range(count):
        try:
            node_id = data[pos:pos + NODE_ID_LEN].decode("ascii")
        except UnicodeDecodeError:
            raise CorruptJob(f"node ID at byte {pos} is not text") from None
        pos += NODE_ID_LEN
        if known_ids is None:
            delivered.add(node_id)
        else:
            kept = known_ids.get(node_id)
            if kept is not None:
                delivered.add(kept)
    job = Job(job_id, queue, body, state_byte & 0x0F, ctime, etime * 1000, delay, retry,
              repl)
    job.flags = flags & ~BACKOFF_WAIT  # a wait of the process that wrote it
    job.nacks = nacks
    job.deliveries = deliv
    job.nodes_delivered = holder_set(delivered)
    return job


def serialize_ext(ext: JobExt) -> bytes:
    """The extended fields of a job, LOADJOB's second argument."""
    notes = ext.notes
    errors = notes.errors if notes is not None else ()
    batch, after = ext.batch, ext.after
    attrs, orderkey = ext.attrs, ext.orderkey
    linked = batch is not None or after is not None or attrs is not None or (
        orderkey is not None)
    if not ext.extra and not errors and not linked:
        return _EXT.pack(EXT_FORMAT, ext.priority, ext.due) + (ext.group or b"")
    version = (EXT_FORMAT_6 if orderkey is not None else EXT_FORMAT_5 if attrs is not None
               else EXT_FORMAT_4 if linked else EXT_FORMAT_3 if errors else EXT_FORMAT_2)
    fields = [
        _EXT2.pack(version, ext.priority, ext.due, min(ext.max_deliveries, U16_MAX),
                   ext.generation),
        _short(ext.group), _short(ext.dead_from), _short(ext.dead_reason)]
    if errors or linked:
        fields.append(bytes((len(errors),)))
        fields += [_ERROR.pack(min(delivery, U32_MAX), when, len(reason)) + reason
                   for delivery, when, reason in errors]
    if linked:
        fields.append(_short(batch))
        parents = after or ()
        fields.append(bytes((len(parents),)))
        fields += [_short(parent) for parent in parents]
    if attrs is not None or orderkey is not None:
        fields.append(bytes((len(attrs or ()),)))
        fields += [_short(item) for item in flat(attrs or ())]
    if orderkey is not None:
        fields += [_short(orderkey), bytes((int(ext.order_strict),))]
    return b"".join(fields)


def _short(data: bytes | None) -> bytes:
    return U32.pack(_NONE) if data is None else U32.pack(len(data)) + data


def deserialize_ext(data: bytes) -> JobExt:
    """`serialize_ext`'s JobExt. Raises CorruptJob."""
    if data[:1] and EXT_FORMAT_2 <= data[0] <= EXT_FORMAT_6:
        return _deserialize_ext2(data)
    if len(data) < _EXT.size or len(data) > _EXT.size + MAX_GROUP_LEN:
        raise CorruptJob(f"extended fields of {len(data)} bytes")
    version, priority, due = _EXT.unpack_from(data)
    if version != EXT_FORMAT:
        raise CorruptJob(f"extended fields in an unknown format ({version})")
    return JobExt(priority, data[_EXT.size:] or None, due)


def _deserialize_ext2(data: bytes) -> JobExt:
    if len(data) < _EXT2.size + 12:
        raise CorruptJob(f"extended fields of {len(data)} bytes")
    _, priority, due, max_deliveries, generation = _EXT2.unpack_from(data)
    group, pos = _read_short(data, _EXT2.size, "extended fields")
    dead_from, pos = _read_short(data, pos, "extended fields")
    reason, pos = _read_short(data, pos, "extended fields")
    notes = None
    if data[0] == EXT_FORMAT_3:
        errors, pos = _deserialize_errors(data, pos)
        notes = JobNotes(errors)
    batch = after = attrs = None
    if data[0] >= EXT_FORMAT_4:
        errors, pos = _deserialize_errors(data, pos, 0)
        notes = JobNotes(errors) if errors else None
        batch, pos = _read_short(data, pos, "extended fields")
        if batch is not None and not 0 < len(batch) <= MAX_BID_LEN:
            raise CorruptJob("a batch ID of a wrong length")
        after, pos = _deserialize_parents(data, pos)
    if data[0] == EXT_FORMAT_5 or data[0] == EXT_FORMAT_6 and data[pos:pos + 1] != b"\0":
        attrs, pos = _deserialize_attrs(data, pos)
    elif data[0] == EXT_FORMAT_6:
        pos += 1  # no attribute
    orderkey, strict = None, False
    if data[0] == EXT_FORMAT_6:
        orderkey, pos = _read_short(data, pos, "extended fields' order key")
        if orderkey is None or not 0 < len(orderkey) <= MAX_GROUP_LEN or (
                data[pos:pos + 1] not in (b"\0", b"\1")):
            raise CorruptJob("an order key out of bounds")
        strict = data[pos] == 1
        pos += 1
    if pos != len(data) or (group is not None and not 0 < len(group) <= MAX_GROUP_LEN):
        raise CorruptJob("extended fields of a wrong length")
    return JobExt(priority, group, due, max_deliveries, dead_from, reason, generation,
                  notes, batch, after, attrs, orderkey, strict)


def _deserialize_attrs(data: bytes, pos: int) -> tuple[Attrs, int]:
    """Format 5's attributes from `pos`, and the position after them."""
    if pos >= len(data):
        raise CorruptJob("extended fields' attributes cut short")
    count = data[pos]
    pos += 1
    items: list[bytes | None] = []
    for _ in range(2 * count):
        item, pos = _read_short(data, pos, "extended fields' attributes")
        items.append(item)
    attrs = from_flat(items)
    if attrs is None:
        raise CorruptJob("extended fields' attributes out of bounds")
    return attrs, pos


def _deserialize_parents(data: bytes, pos: int) -> tuple[tuple[bytes, ...] | None, int]:
    """Format 4's parents from `pos` (none: None), and the position after them."""
    if pos >= len(data) or data[pos] > MAX_PARENTS:
        raise CorruptJob("extended fields' parents cut short or too many")
    count = data[pos]
    pos += 1
    parents = []
    for _ in range(count):
        parent, pos = _read_short(data, pos, "extended fields' parents")
        if parent is None or not 0 < len(parent) <= MAX_BID_LEN:
            raise CorruptJob("a parent ID of a wrong length")
        parents.append(parent)
    return tuple(parents) or None, pos


def _read_short(data: bytes, pos: int, what: str) -> tuple[bytes | None, int]:
    """`_short`'s string at `pos`, and the offset after it. Raises CorruptJob."""
    if pos + 4 > len(data):
        raise CorruptJob(f"{what} cut short")
    (length,) = U32.unpack_from(data, pos)
    pos += 4
    if length == _NONE:
        return None, pos
    if pos + length > len(data):
        raise CorruptJob(f"{what} cut short")
    return data[pos:pos + length], pos + length


def serialize_end(end: JobEnd) -> bytes:
    """A kept result, LOADRESULT's argument."""
    return b"".join((
        _END.pack(END_FORMAT, _END_HOWS.index(end.how), end.expires, end.ttl, end.job_id),
        _short(end.queue), _short(end.data)))


def deserialize_end(data: bytes) -> JobEnd:
    """`serialize_end`'s JobEnd, every field checked (a damaged or hostile file): a
    job ID, a known end, a TTL of at most a month, a queue name and data of at most
    MAX_BODY bytes, nothing after them. Raises CorruptJob."""
    if len(data) < _END.size + 8:
        raise CorruptJob(f"a result of {len(data)} bytes, shorter than any")
    version, how, expires, ttl, job_id = _END.unpack_from(data)
    if version != END_FORMAT:
        raise CorruptJob(f"a result in an unknown format ({version})")
    if how >= len(_END_HOWS):
        raise CorruptJob(f"a result that ended in an unknown way ({how})")
    if not is_valid_job_id(job_id):
        raise CorruptJob(f"a result of an invalid job ID {job_id!r}")
    if not 0 < ttl <= MAX_RESULT_TTL_MS or expires < ttl:
        raise CorruptJob(f"a result kept for {ttl} ms, until {expires}")
    queue, pos = _read_short(data, _END.size, "a result")
    result, pos = _read_short(data, pos, "a result")
    if pos != len(data):
        raise CorruptJob(f"{len(data) - pos} bytes after a result")
    if len(queue or b"") > MAX_BODY or len(result or b"") > MAX_BODY:
        raise CorruptJob("a result or queue name over the largest body")
    return JobEnd(job_id, _END_HOWS[how], result, expires, ttl, queue)


def _deserialize_errors(data: bytes, pos: int, least: int = 1
                        ) -> tuple[tuple[JobError, ...], int]:
    """Format 3's errors from `pos` (at least `least`): them, and the position after
    them."""
    if pos >= len(data) or not least <= data[pos] <= MAX_ERRORS:
        raise CorruptJob("extended fields' errors cut short or too many")
    count = data[pos]
    pos += 1
    errors: list[JobError] = []
    for _ in range(count):
        if pos + _ERROR.size > len(data):
            raise CorruptJob("extended fields' errors cut short")
        delivery, when, length = _ERROR.unpack_from(data, pos)
        pos += _ERROR.size
        if length > MAX_ERROR_LEN or pos + length > len(data):
            raise CorruptJob("an error of a wrong length")
        errors.append((delivery, when, data[pos:pos + length]))
        pos += length
    return tuple(errors), pos
