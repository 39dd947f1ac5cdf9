"""The retained jobs' files (QPOLICY ... RETAIN): one directory per queue under the
node's `dir`, `retain/<queue digest>/`, holding a `QUEUE` file (the queue's name) and
segment files `<first ack ms>-<n>.seg`, each the AOF's framed format (aof/frames.py: the
32-byte header, then frames with a CRC32C each, AES-256-GCM with the AOF's key when
`aof-encryption-key-file` is set). Every record is a frame of its own, so each record
has its checksum: a record cut off by a crash is the file's torn tail (cut on start, as
the AOF loader does), a damaged one ends what is read of its segment.

A record is `RETAINED <msgpack [id, queue, body, ctime, ack ms, [holder ids], [key,
value, ...]]>`: the job as its holder knew it when it was acknowledged. Reading a
segment is `read_segment` (a plain function: the store runs it in a thread).
"""

from __future__ import annotations

import hashlib
import os
from typing import Any, Final

import msgpack

from ..aof.fileformat import FormatError
from ..aof.frames import Codec, FramedReader, WrongKey, reader_for

RECORD_HEAD: Final = b"*2\r\n$8\r\nRETAINED\r\n"
SUFFIX: Final = ".seg"
QUEUE_FILE: Final = "QUEUE"
MAX_ATTRS: Final = 1024


class RetainedJob:
    """One acknowledged job, as retained: what REPLAY adds again and RETAINED lists."""

    __slots__ = ("id", "queue", "body", "ctime", "acked", "nodes", "attrs")

    def __init__(self, job_id: bytes, queue: bytes, body: bytes, ctime: int, acked: int,
                 nodes: list[str], attrs: list[bytes]) -> None:
        self.id = job_id
        self.queue = queue
        self.body = body
        self.ctime = ctime  # the job's ctime: ms * 1_000_000 + a counter (job.py)
        self.acked = acked  # ms: when this holder learned of the acknowledgement
        self.nodes = nodes  # the job's holders as this one knew them
        self.attrs = attrs  # key, value, ... (ADDJOB ... ATTR)

    @property
    def ms(self) -> int:
        """The job's creation time, Unix ms: what a window selects."""
        return self.ctime // 1_000_000

    def key(self) -> tuple[int, bytes]:
        """The replay order: creation time, then ID."""
        return self.ctime, self.id

    def attr_dict(self) -> dict[bytes, bytes]:
        attrs = self.attrs
        return {attrs[i]: attrs[i + 1] for i in range(0, len(attrs) - 1, 2)}

    def to_wire(self) -> list[Any]:
        return [self.id, self.queue, self.body, self.ctime, self.acked, self.nodes,
                self.attrs]

    @classmethod
    def from_wire(cls, data: object) -> RetainedJob | None:
        """From `to_wire`'s list (a file's record or a peer's message), checked."""
        if type(data) is not list or len(data) != 7:
            return None
        job_id, queue, body, ctime, acked, nodes, attrs = data
        if not (type(job_id) is bytes and 0 < len(job_id) <= 64 and type(queue) is bytes
                and 0 < len(queue) <= 1024 and type(body) is bytes
                and type(ctime) is int and 0 <= ctime < 2**63
                and type(acked) is int and 0 <= acked < 2**63
                and type(nodes) is list and len(nodes) <= 1024
                and all(type(n) is str and len(n) <= 64 for n in nodes)
                and type(attrs) is list and len(attrs) <= 2 * MAX_ATTRS
                and len(attrs) % 2 == 0 and all(type(a) is bytes for a in attrs)):
            return None
        return cls(job_id, queue, body, ctime, acked, nodes, attrs)


def encode_record(job: RetainedJob) -> bytes:
    payload: bytes = msgpack.packb(job.to_wire(), use_bin_type=True)
    return b"%s$%d\r\n%s\r\n" % (RECORD_HEAD, len(payload), payload)


def decode_payload(payload: bytes) -> RetainedJob | None:
    try:
        data = msgpack.unpackb(payload, raw=False)
    except (ValueError, msgpack.UnpackException):
        return None
    return RetainedJob.from_wire(data)


def queue_digest(queue: bytes) -> str:
    """The queue's directory name: any bytes make a safe, fixed-length name."""
    return hashlib.sha256(b"disq retain\0" + queue).hexdigest()[:32]


def segment_name(first_ms: int, serial: str) -> str:
    return f"{first_ms:013d}-{serial}{SUFFIX}"


def new_segment(codec: Codec) -> bytes:
    """What a new segment file starts with."""
    return codec.header()


class SegmentScan:
    """What reading a segment found: its records (in file order), the offset after the
    last sound frame, why the reading stopped early (`cut_off`: a torn tail; `damage`:
    a frame that fails its checksum or authentication: what follows is not read)."""

    __slots__ = ("jobs", "end", "cut_off", "damage", "size")

    def __init__(self) -> None:
        self.jobs: list[RetainedJob] = []
        self.end = 0
        self.cut_off: str | None = None
        self.damage: str | None = None
        self.size = 0


def read_segment(path: str, key: bytes | None, limit: int | None = None) -> SegmentScan:
    """Every record of a segment file, up to `limit` bytes of it (the part written
    when the read was asked: the writer may be appending). Blocking: call it in a
    thread. A file that cannot be read, or needs another key, reads as damaged."""
    scan = SegmentScan()
    try:
        with open(path, "rb") as fh:
            buf = fh.read() if limit is None else fh.read(limit)
    except OSError as exc:
        scan.damage = f"can't read: {exc.strerror}"
        return scan
    scan.size = len(buf)
    try:
        reader = reader_for(buf, key)
    except WrongKey as exc:
        scan.damage = str(exc)
        return scan
    if not isinstance(reader, FramedReader):
        scan.damage = "not a segment file (no frame header)"
        return scan
    try:
        for _, args in reader:
            job = decode_payload(args[1]) if len(args) == 2 else None
            if job is None or args[0] != b"RETAINED":
                scan.damage = "a record that is not a retained job"
                break
            scan.jobs.append(job)
    except FormatError as exc:
        scan.damage = f"{exc.reason} at offset {exc.offset}"
    scan.end = reader.pos
    scan.cut_off = reader.cut_off
    return scan


def cut_tail(path: str, end: int) -> None:
    """Drop a torn tail (blocking)."""
    os.truncate(path, end)
