"""The retained jobs' files as the worker thread handles them (store.py's): the index
of a segment (`Segment`) and of a queue's segments (`QueueFiles`), the appends, fsyncs
and deletions (`Writer`), and what a start reads (`scan_all`, `index_segment`: every
segment indexed, a torn tail cut). Blocking: the thread runs these, never the loop."""

from __future__ import annotations

import logging
import os
import shutil

from ..aof.frames import HEADER_SIZE
from .segments import QUEUE_FILE, SUFFIX, RetainedJob, cut_tail, read_segment

log = logging.getLogger("disq")

class Segment:
    """One segment file and its index."""

    __slots__ = ("path", "first_ms", "count", "size", "queued", "min_ctime", "max_ctime",
                 "last_ack", "sealed")

    def __init__(self, path: str, first_ms: int) -> None:
        self.path = path
        self.first_ms = first_ms
        self.count = 0
        self.size = 0  # bytes in the file once what is queued is written
        self.queued = 0  # ... of which not handed to the thread yet
        self.min_ctime = 2**63
        self.max_ctime = 0
        self.last_ack = 0
        self.sealed = False  # no more records (rolled, or found on start)

    def add(self, job: RetainedJob, size: int) -> None:
        self.count += 1
        self.size += size
        self.min_ctime = min(self.min_ctime, job.ctime)
        self.max_ctime = max(self.max_ctime, job.ctime)
        self.last_ack = max(self.last_ack, job.acked)


class QueueFiles:
    """One queue's segments, oldest first, and the frames waiting for the thread."""

    __slots__ = ("queue", "directory", "segments", "current", "pending")

    def __init__(self, queue: bytes, directory: str) -> None:
        self.queue = queue
        self.directory = directory
        self.segments: list[Segment] = []
        self.current: Segment | None = None
        self.pending: list[bytes] = []

    @property
    def size(self) -> int:
        return sum(s.size for s in self.segments)

    @property
    def count(self) -> int:
        return sum(s.count for s in self.segments)


class Writer:
    """The worker thread's side: open files, appends, fsyncs (only it touches them)."""

    def __init__(self) -> None:
        self.fds: dict[str, int] = {}
        self.dirty: set[str] = set()
        self.errors = 0

    def append(self, path: str, data: bytes) -> None:
        try:
            fd = self.fds.get(path)
            if fd is None:
                fd = self.fds[path] = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT,
                                              0o600)
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            self.dirty.add(path)
        except OSError as exc:
            self.errors += 1
            log.warning("Can't write the retained jobs' segment %s: %s", path, exc.strerror)

    def close(self, path: str) -> None:
        fd = self.fds.pop(path, None)
        if fd is not None:
            if path in self.dirty:
                self.dirty.discard(path)
                os.fsync(fd)
            os.close(fd)

    def sync(self) -> None:
        for path in list(self.dirty):
            fd = self.fds.get(path)
            if fd is not None:
                try:
                    os.fsync(fd)
                except OSError as exc:
                    log.warning("Can't fsync %s: %s", path, exc.strerror)
        self.dirty.clear()

    def delete(self, path: str) -> None:
        self.close(path)
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass

    def close_all(self) -> None:
        for path in list(self.fds):
            self.close(path)


# -- the thread's work on start ---------------------------------------------------------
def make_queue_dir(directory: str, queue: bytes) -> None:
    try:
        os.makedirs(directory, exist_ok=True)
        name = os.path.join(directory, QUEUE_FILE)
        if not os.path.exists(name):
            with open(name, "wb") as fh:
                fh.write(queue)
    except OSError as exc:
        log.warning("Can't make the retained jobs' directory %s: %s", directory,
                    exc.strerror)


def remove_queue_dir(directory: str) -> None:
    shutil.rmtree(directory, ignore_errors=True)


ScanResult = list[tuple[bytes, str, list[Segment], list[str]]]


def scan_all(directory: str, key: bytes | None) -> ScanResult:
    """Every queue directory's segments, indexed (torn tails cut)."""
    out: ScanResult = []
    try:
        names = sorted(os.listdir(directory))
    except FileNotFoundError:
        return out
    for name in names:
        queue_dir = os.path.join(directory, name)
        try:
            with open(os.path.join(queue_dir, QUEUE_FILE), "rb") as fh:
                queue = fh.read()
            files = sorted(f for f in os.listdir(queue_dir) if f.endswith(SUFFIX))
        except OSError:
            continue
        segments, damaged = [], []
        for file_name in files:
            path = os.path.join(queue_dir, file_name)
            segment, problem = index_segment(path, key)
            if problem:
                damaged.append(f"{path}: {problem}")
                log.warning("Retained jobs' segment %s: %s", path, problem)
            if segment is not None:
                segments.append(segment)
        out.append((queue, queue_dir, segments, damaged))
    return out


def index_segment(path: str, key: bytes | None) -> tuple[Segment | None, str]:
    """A segment file's index (None: nothing readable, the file deleted), and what
    was wrong with it ("": nothing). A torn tail is cut off the file."""
    try:
        first_ms = int(os.path.basename(path).split("-", 1)[0])
    except ValueError:
        return None, "not a segment's name"
    scan = read_segment(path, key)
    problem = scan.damage or ""
    if scan.cut_off is not None and not scan.damage:
        problem = f"torn tail cut ({scan.cut_off})"
        try:
            cut_tail(path, scan.end)
        except OSError as exc:
            problem += f", can't truncate: {exc.strerror}"
    if not scan.jobs and scan.end <= HEADER_SIZE and not scan.damage:
        try:
            os.unlink(path)
        except OSError:
            pass
        return None, problem
    segment = Segment(path, first_ms)
    for job in scan.jobs:
        segment.add(job, 0)
    segment.size = scan.end if scan.end else scan.size
    segment.sealed = True
    return segment, problem

