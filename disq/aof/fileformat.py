"""The AOF's records, as Disque writes them: RESP commands, one after the other.

    *2\\r\\n$7\\r\\nLOADJOB\\r\\n$<n>\\r\\n<serialized job>\\r\\n
    *3\\r\\n$7\\r\\nLOADJOB\\r\\n$<n>\\r\\n<serialized job>\\r\\n$<m>\\r\\n<ext>\\r\\n
                               (a job using disq's extensions: serialize.serialize_ext)
    *2\\r\\n$6\\r\\nDELJOB\\r\\n$40\\r\\n<job id>\\r\\n
    *2\\r\\n$7\\r\\nCRONSET\\r\\n$<n>\\r\\n<msgpack>\\r\\n     (a CRON schedule)
    *2\\r\\n$10\\r\\nQPOLICYSET\\r\\n$<n>\\r\\n<msgpack>\\r\\n  (a queue policy)
    *2\\r\\n$10\\r\\nLOADRESULT\\r\\n$<n>\\r\\n<result>\\r\\n
                               (a result kept: serialize.serialize_end)
    *1\\r\\n$12\\r\\nFLUSHRESULTS\\r\\n   (every result forgotten: DEBUG FLUSHALL,
                                              CLUSTER RESET)

`RecordReader` walks a file's bytes (a memory map) and tells a file cut off in the
middle of its last record (a crash, a power loss: it loads up to the last whole
record) from a record damaged in the middle (the start stops, naming the offset).
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from typing import TYPE_CHECKING, Protocol

import msgpack

from ..history import only_history
from ..job import Job
from ..policies import QueuePolicy
from ..results import JobEnd
from ..schedules import CronSchedule
from .serialize import (
    JOB_STRUCT_SER_LEN,
    STORED_STATES,
    U32,
    CorruptJob,
    JobEncoder,
    deserialize_end,
    deserialize_ext,
    deserialize_job,
    serialize_end,
    serialize_ext,
)

if TYPE_CHECKING:
    from ..policies import PolicyTable
    from ..schedules import CronTable


class NodeTables(Protocol):
    schedules: CronTable
    policies: PolicyTable


LOADJOB_HEAD = b"*2\r\n$7\r\nLOADJOB\r\n"
LOADJOB_EXT_HEAD = b"*3\r\n$7\r\nLOADJOB\r\n"  # a job with its extended fields
DELJOB_HEAD = b"*2\r\n$6\r\nDELJOB\r\n$40\r\n"
CRONSET_HEAD = b"*2\r\n$7\r\nCRONSET\r\n"  # a CRON schedule (a disq extension)
QPOLICYSET_HEAD = b"*2\r\n$10\r\nQPOLICYSET\r\n"  # a queue policy (a disq extension)
# The results of ACKJOB ... RESULT (disq extensions: only a node that keeps results
# writes them)
LOADRESULT_HEAD = b"*2\r\n$10\r\nLOADRESULT\r\n"
FLUSHRESULTS_RECORD = b"*1\r\n$12\r\nFLUSHRESULTS\r\n"
_LOADJOB_PREFIX = LOADJOB_HEAD + b"$"
MAX_LINE = 32  # `*<n>` / `$<n>` header lines longer than this are damage
MAX_ARGS = 1024


def loadjob_record(payload: bytes) -> bytes:
    return b"%s$%d\r\n%s\r\n" % (LOADJOB_HEAD, len(payload), payload)


def loadjob_ext_record(payload: bytes, ext: bytes) -> bytes:
    return b"%s$%d\r\n%s\r\n$%d\r\n%s\r\n" % (LOADJOB_EXT_HEAD, len(payload), payload,
                                                len(ext), ext)


def deljob_record(job_id: bytes) -> bytes:
    return DELJOB_HEAD + job_id + b"\r\n"


def cronset_record(schedule: CronSchedule) -> bytes:
    """A CRON schedule (disq/schedules.py), msgpack of its wire form: the newest
    record of a name wins on load (and only a node that used CRON writes any)."""
    payload = msgpack.packb(schedule.to_wire())
    return b"%s$%d\r\n%s\r\n" % (CRONSET_HEAD, len(payload), payload)


def cronset_schedule(payload: bytes) -> CronSchedule | None:
    return CronSchedule.from_wire(_unpack(payload))


def qpolicyset_record(policy: QueuePolicy) -> bytes:
    """A queue policy (disq/policies.py), as a CRONSET record is built."""
    payload = msgpack.packb(policy.to_wire())
    return b"%s$%d\r\n%s\r\n" % (QPOLICYSET_HEAD, len(payload), payload)


def qpolicyset_policy(payload: bytes) -> QueuePolicy | None:
    return QueuePolicy.from_wire(_unpack(payload))


def loadresult_record(end: JobEnd) -> bytes:
    payload = serialize_end(end)
    return b"%s$%d\r\n%s\r\n" % (LOADRESULT_HEAD, len(payload), payload)


def _unpack(payload: bytes) -> object:
    try:
        return msgpack.unpackb(payload, raw=False)
    except (ValueError, msgpack.UnpackException):
        return None


def table_records(node: NodeTables) -> list[bytes]:
    """Every CRON schedule and queue policy a node knows (tombstones too), as
    records: what an AOF rewrite writes first."""
    return [*map(cronset_record, node.schedules.schedules.values()),
            *map(qpolicyset_record, node.policies.policies.values())]


class RecordEncoder(JobEncoder):
    """`loadjob_record(job)` is `loadjob_record(self.serialize(job))` built in one
    go: one struct for the fixed fields, the queue name and the body length (one per
    queue name length, cached), the frame's header from a cache. It runs once per
    ADDJOB when the AOF is on."""

    __slots__ = ("_heads", "_frames", "_alone_tail_crlf", "_tails", "_etime_ms", "_etime_s")

    def __init__(self, my_id: str) -> None:
        super().__init__(my_id)
        self._heads: dict[int, struct.Struct] = {}
        self._frames: dict[int, bytes] = {}
        self._alone_tail_crlf = self._alone_tail + b"\r\n"
        self._tails: dict[frozenset[str], bytes] = {}  # per shared holder set
        self._etime_ms = self._etime_s = 0  # a burst of jobs shares one etime object

    def loadjob_record(self, job: Job) -> bytes:
        ext = job.ext  # disq's extensions: Disque's record plus their fields (not for
        if ext is not None and not only_history(ext):  # a history alone: never stored)
            return loadjob_ext_record(self.serialize(job), serialize_ext(ext))
        queue = job.queue or b""
        body = job.body or b""
        delivered = job.nodes_delivered
        if delivered is None:
            tail = self._alone_tail_crlf
        else:
            shared = type(delivered) is frozenset
            tail = self._tails.get(delivered) if shared else None  # type: ignore
            if tail is None:
                tail = (U32.pack(len(delivered)) + b"".join(map(self._node_id, delivered))
                        + b"\r\n")
                if shared and len(self._tails) < 4096:
                    self._tails[delivered] = tail
        qlen = len(queue)
        length = JOB_STRUCT_SER_LEN + 8 + qlen + len(body) + len(tail) - 2
        head = self._heads.get(qlen)
        if head is None:
            head = self._heads[qlen] = struct.Struct(f"<I40sBBHIQIIHHI{qlen}sI")
        etime = job.etime
        if etime is not self._etime_ms:
            self._etime_ms, self._etime_s = etime, (etime + 999) // 1000  # rounded up
        try:
            fixed = head.pack(length, job.id, job.state, job.flags, job.repl,
                              self._etime_s, job.ctime, job.delay, job.retry,
                              job.nacks, job.deliveries, qlen, queue, len(body))
        except struct.error:  # a field out of its range: the general encoder saturates it
            return loadjob_record(self.serialize(job))
        frame = self._frames.get(length)
        if frame is None:
            frame = b"%s$%d\r\n" % (LOADJOB_HEAD, length + 4)
            if len(self._frames) < 65536:
                self._frames[length] = frame
        return b"".join((frame, fixed, body, tail))


class Buffer(Protocol):
    """bytes or an mmap: what the parser reads."""

    def __len__(self) -> int: ...
    def __getitem__(self, index: slice) -> bytes: ...
    def find(self, sub: bytes, start: int = ..., end: int = ...) -> int: ...


class FormatError(Exception):
    """A record that is not a record: `offset` is where it starts."""

    def __init__(self, offset: int, reason: str) -> None:
        super().__init__(f"{reason} (record at offset {offset})")
        self.offset = offset
        self.reason = reason


class Incomplete(Exception):
    """The buffer ends inside the record starting at `offset`."""

    def __init__(self, offset: int) -> None:
        super().__init__(offset)
        self.offset = offset


def parse_record(buf: Buffer, pos: int, end: int | None = None) -> tuple[list[bytes], int]:
    """The record starting at `pos`: (its arguments, the offset after it). Raises
    Incomplete if the buffer (or `end`) comes first, FormatError if it is not a
    record."""
    if end is None:
        end = len(buf)
    if buf[pos:pos + 18] == _LOADJOB_PREFIX:  # the usual record, parsed directly
        eol = buf.find(b"\r\n", pos + 18, min(pos + 18 + MAX_LINE, end))
        if eol < 0:
            if end - pos - 18 < MAX_LINE:
                raise Incomplete(pos)
            raise FormatError(pos, "bulk length line too long")
        n = _number(buf[pos + 18:eol], pos, "bulk length")
        start = eol + 2
        stop = start + n
        if stop + 2 > end:
            raise Incomplete(pos)
        if buf[stop:stop + 2] != b"\r\n":
            raise FormatError(pos, "bulk string not followed by CRLF")
        return [b"LOADJOB", buf[start:stop]], stop + 2
    argc, cur = _header(buf, pos, end, pos, b"*", "multibulk length")
    if not 1 <= argc <= MAX_ARGS:
        raise FormatError(pos, f"invalid multibulk length {argc}")
    args = []
    for _ in range(argc):
        n, cur = _header(buf, cur, end, pos, b"$", "bulk length")
        stop = cur + n
        if stop + 2 > end:
            raise Incomplete(pos)
        if buf[stop:stop + 2] != b"\r\n":
            raise FormatError(pos, "bulk string not followed by CRLF")
        args.append(buf[cur:stop])
        cur = stop + 2
    return args, cur


def _header(buf: Buffer, cur: int, end: int, record: int, prefix: bytes,
            what: str) -> tuple[int, int]:
    if cur >= end:
        raise Incomplete(record)
    first = buf[cur:cur + 1]
    if first != prefix:
        raise FormatError(record, f"expected '{prefix.decode()}' at offset {cur}, got {first!r}")
    eol = buf.find(b"\r\n", cur + 1, min(cur + 1 + MAX_LINE, end))
    if eol < 0:
        if end - cur - 1 < MAX_LINE:
            raise Incomplete(record)
        raise FormatError(record, f"{what} line too long")
    return _number(buf[cur + 1:eol], record, what), eol + 2


def _number(text: bytes, record: int, what: str) -> int:
    if not text.isdigit() or len(text) > 12:
        raise FormatError(record, f"invalid {what} {text[:20]!r}")
    return int(text)


def check_record(args: list[bytes], offset: int) -> None:
    """Raise FormatError unless the record is one the loader can apply."""
    name = args[0].upper()
    if name == b"LOADJOB":
        if len(args) not in (2, 3):
            raise FormatError(offset, "LOADJOB with a wrong number of arguments")
        try:
            job = deserialize_job(args[1])
            if len(args) == 3:
                deserialize_ext(args[2])
        except CorruptJob as exc:
            raise FormatError(offset, f"corrupted LOADJOB data: {exc}") from None
        if job.state not in STORED_STATES:  # the loader refuses it too
            raise FormatError(offset, f"a LOADJOB record in state {job.state}")
    elif name == b"DELJOB":
        if len(args) < 2:
            raise FormatError(offset, "DELJOB without a job ID")
    elif name == b"CRONSET":
        if len(args) != 2 or cronset_schedule(args[1]) is None:
            raise FormatError(offset, "corrupted CRONSET data")
    elif name == b"QPOLICYSET":
        if len(args) != 2 or qpolicyset_policy(args[1]) is None:
            raise FormatError(offset, "corrupted QPOLICYSET data")
    elif name == b"LOADRESULT":
        loadresult_end(args, offset)
    elif name == b"FLUSHRESULTS":
        if len(args) != 1:
            raise FormatError(offset, "FLUSHRESULTS with arguments")
    else:
        raise FormatError(offset, f"unknown command {args[0][:40]!r}")


def loadresult_end(args: list[bytes], offset: int) -> JobEnd:
    """A LOADRESULT record's result. Raises FormatError."""
    if len(args) != 2:
        raise FormatError(offset, "LOADRESULT with a wrong number of arguments")
    try:
        return deserialize_end(args[1])
    except CorruptJob as exc:
        raise FormatError(offset, f"corrupted LOADRESULT data: {exc}") from None


class RecordReader:
    """Iterating yields (offset, arguments) for each whole record of `buf`. When the
    buffer ends inside a record that is the file's cut-off tail, the iteration
    stops and `cut_off` says what was found; `pos` is then the offset after the last
    whole record. Damage anywhere else raises FormatError."""

    def __init__(self, buf: Buffer, start: int = 0) -> None:
        self.buf = buf
        self.pos = start
        self.cut_off: str | None = None

    def __iter__(self) -> Iterator[tuple[int, list[bytes]]]:
        buf = self.buf
        end = len(buf)
        pos = self.pos
        while pos < end:
            try:
                args, nxt = parse_record(buf, pos, end)
            except Incomplete:
                self.cut_off = cut_off_reason(buf, pos)
                if self.cut_off is None:
                    raise FormatError(pos, "a record runs past the end of the file, and "
                                      "whole records follow where it should end") from None
                return
            except FormatError:
                self.cut_off = cut_off_reason(buf, pos)
                if self.cut_off is None:
                    raise
                return  # a record cut off, then zeros from the file system
            yield pos, args
            pos = self.pos = nxt


def cut_off_reason(buf: Buffer, pos: int) -> str | None:
    """Why the bytes from `pos` to the end look like the last record cut off (a
    crash while it was written): a prefix of a record, possibly followed by zeros
    (a file system extends a file before it writes the data). None if they look
    like damage instead: something that is not a record prefix, or a whole valid
    record further on (a length field hit in the middle of the file, not a tail)."""
    end = len(buf)
    data_end = before_zeros(buf, pos)
    if data_end == pos:
        return f"{end - pos} zero bytes"
    try:
        parse_record(buf, pos, data_end)
    except Incomplete:
        pass
    except FormatError:
        return None
    else:
        return None  # a whole record followed by zeros? not a cut-off
    if _whole_record_after(buf, pos + 1, data_end):
        return None
    if data_end < end:
        return f"{data_end - pos} bytes of a record, then {end - data_end} zero bytes"
    return f"{end - pos} bytes of a record"


def before_zeros(buf: Buffer, pos: int) -> int:
    """The end of buf[pos:] without its trailing zeros (read 64 KiB at a time)."""
    data_end = len(buf)
    while data_end > pos:
        piece_start = max(pos, data_end - 65536)
        kept = len(buf[piece_start:data_end].rstrip(b"\0"))
        data_end = piece_start + kept
        if kept:
            break
    return data_end


def _whole_record_after(buf: Buffer, pos: int, end: int) -> bool:
    """Does a valid record start anywhere in buf[pos:end]?"""
    for head in (LOADJOB_HEAD, LOADJOB_EXT_HEAD, DELJOB_HEAD, LOADRESULT_HEAD):
        at = buf.find(head, pos, end)
        while at >= 0:
            try:
                args, _ = parse_record(buf, at, end)
                check_record(args, at)
                return True
            except (Incomplete, FormatError):
                pass
            at = buf.find(head, at + 1, end)
    return False
