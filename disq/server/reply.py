"""RESP encoding. Handlers return ready bytes; these helpers build them."""

from __future__ import annotations

from typing import Any, Final

from ..attrs import flat
from ..history import only_history, shown_ext
from ..job import Job, JobExt

OK: Final = b"+OK\r\n"
PONG: Final = b"+PONG\r\n"
NULL_BULK: Final = b"$-1\r\n"
NULL_ARRAY: Final = b"*-1\r\n"
EMPTY_ARRAY: Final = b"*0\r\n"
ZERO: Final = b":0\r\n"
ONE: Final = b":1\r\n"

_SMALL_INTS: Final = [b":%d\r\n" % i for i in range(1024)]
# `$<n>\r\n` of the lengths most bulk strings have: joining the pieces of a reply
# costs less than half of formatting it with `%` (job_entry: 200 against 450 ns).
_BULK_HEADERS: Final = [b"$%d\r\n" % n for n in range(4096)]


def status(text: bytes) -> bytes:
    return b"+" + text + b"\r\n"


def error(text: str) -> bytes:
    return b"-" + text.encode() + b"\r\n"


def integer(n: int) -> bytes:
    if 0 <= n < 1024:
        return _SMALL_INTS[n]
    return b":%d\r\n" % n


def bulk_header(size: int) -> bytes:
    """`$<size>\r\n`."""
    if size < 4096:
        return _BULK_HEADERS[size]
    return b"$%d\r\n" % size


def bulk(data: bytes) -> bytes:
    return b"".join((bulk_header(len(data)), data, b"\r\n"))


def bulk_str(text: str) -> bytes:
    return bulk(text.encode())


def array(items: list[bytes]) -> bytes:
    """An array of already-encoded items."""
    return b"*%d\r\n" % len(items) + b"".join(items)


def encode(value: Any) -> bytes:
    """Encode nested Python values: bytes/str -> bulk, int -> integer, None -> null
    bulk, list/tuple -> array."""
    if isinstance(value, bytes):
        return bulk(value)
    if isinstance(value, str):
        return bulk(value.encode())
    if isinstance(value, bool):
        return integer(int(value))
    if isinstance(value, int):
        return integer(value)
    if value is None:
        return NULL_BULK
    if isinstance(value, (list, tuple)):
        return b"*%d\r\n" % len(value) + b"".join(encode(v) for v in value)
    raise TypeError(f"cannot encode {type(value)!r}")


def job_entry(job: Job) -> bytes:
    """One job as GETJOB and QPEEK return it: [queue, id, body], all bulk strings."""
    return _entry(b"*3\r\n", job, b"\r\n")


def _entry(head: bytes, job: Job, tail: bytes) -> bytes:
    """`head` (the array's), the job's queue, ID and body, `tail` (from the CRLF that
    ends the body on)."""
    queue, body = job.queue, job.body  # a delivered job has both
    return b"".join((head, bulk_header(len(queue)), queue,  # type: ignore[arg-type]
                     b"\r\n$40\r\n", job.id, b"\r\n",
                     bulk_header(len(body)), body, tail))  # type: ignore[arg-type]


# the end of a job's body and its counters, both 0
_NO_COUNTS: Final = b"\r\n$5\r\nnacks\r\n:0\r\n$21\r\nadditional-deliveries\r\n:0\r\n"


def job_entry_with_counters(job: Job) -> bytes:
    """GETJOB WITHCOUNTERS: [queue, id, body, "nacks", n, "additional-deliveries", n],
    then, for a job using disq's extensions, `ext_fields` and "attrs", [key, value, ...]
    (ADDJOB ... ATTR; empty: none; a worker reads a trace context there). (Joined, not
    %-formatted: a streaming reader takes every job this way; most have no NACK and no
    redelivery.)"""
    ext, nacks, deliveries = job.ext, job.nacks, job.deliveries
    if ext is not None and only_history(ext):  # a Disque job that failed: Disque's entry
        ext = None
    entry = _entry(b"*7\r\n", job, _NO_COUNTS if not (nacks or deliveries) else
                   b"\r\n$5\r\nnacks\r\n:%d\r\n$21\r\nadditional-deliveries\r\n:%d\r\n"
                   % (nacks, deliveries))
    if ext is None:
        return entry
    count, fields = ext_fields(ext)
    attrs = ext.attrs
    fields += b"$5\r\nattrs\r\n" + (b"*0\r\n" if attrs is None else
                                     array([bulk(item) for item in flat(attrs)]))
    return b"*%d%s%s" % (9 + count, entry[2:], fields)


def job_entry_peek(job: Job) -> bytes:
    """QPEEK: `job_entry`, then `ext_fields` for a job using disq's extensions."""
    ext = shown_ext(job)
    if ext is None:
        return job_entry(job)
    count, fields = ext_fields(ext)
    return b"*%d%s%s" % (3 + count, job_entry(job)[2:], fields)


def ext_fields(ext: JobExt) -> tuple[int, bytes]:
    """What a job using disq's extensions shows beyond Disque's fields (SHOW, JSCAN
    REPLY ALL, QPEEK, GETJOB WITHCOUNTERS), as name/value pairs, and how many items:
    "priority" (0..255), "group" (nil: none), "due-ms" (Unix ms before which it is not
    delivered; 0: none); with MAXDELIVERIES or for a dead letter (or one put back)
    also "max-deliveries" (0: the queue's policy), "dead-from" and "dead-reason" (nil:
    not a dead letter). A plain job's replies have none of them: Disque clients parse
    fixed layouts."""
    group = ext.group
    base = b"$8\r\npriority\r\n:%d\r\n$5\r\ngroup\r\n%s$6\r\ndue-ms\r\n:%d\r\n" % (
        ext.priority, NULL_BULK if group is None else bulk(group), ext.due)
    if not ext.extra:
        return 6, base
    dead_from, reason = ext.dead_from, ext.dead_reason
    return 12, base + b"$14\r\nmax-deliveries\r\n:%d\r\n$9\r\ndead-from\r\n%s" \
        b"$11\r\ndead-reason\r\n%s" % (
            ext.max_deliveries, NULL_BULK if dead_from is None else bulk(dead_from),
            NULL_BULK if reason is None else bulk(reason))
