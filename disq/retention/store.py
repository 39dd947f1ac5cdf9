"""A node's retained jobs (QPOLICY ... RETAIN): the acknowledged jobs of RETAIN queues,
appended to segment files (segments.py) and read back by window for REPLAY and
RETAINED.

The loop never waits for the disk: `job_acked` encodes the record (its frame: the
CRC, the encryption) and queues it; once per loop turn the queued frames go to one
worker thread, which appends them (one `os.write` per segment and turn), fsyncs the
written segments once a second, deletes expired ones and reads segments for the
readers. One thread keeps the order: a read asked after a write sees it. Each
segment's index (count, its jobs' creation times, its last ack time, its size) lives
in memory, kept as records are queued; it is rebuilt on start by reading every
segment (a torn tail is cut there).

Expiry (every second): a segment whose last record is older than the queue's RETAIN
is deleted whole, then the oldest ones while the queue's segments hold more than
RETAIN-BYTES; a queue whose policy was deleted (QPOLICY DEL, QDEL) has its segments
deleted. Segments of a queue whose policy this node does not know (yet: a restarted
node hears of policies from its peers) are kept.

What a crash loses: records queued in the last loop turn (the acknowledgement itself
is not held for them) and, for a machine crash, what was written in the last second
and not fsynced. A write error (disk full) loses the records of that write: logged,
counted in INFO retention.
"""

from __future__ import annotations

import asyncio
import heapq
import logging
import os
import shutil
import time
import zlib
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Final

from .. import errors
from ..aof.frames import Codec, load_key
from ..where import Condition
from .files import (
    QueueFiles,
    Segment,
    Writer,
    make_queue_dir,
    remove_queue_dir,
    scan_all,
)
from .segments import RetainedJob, encode_record, queue_digest, read_segment, segment_name

if TYPE_CHECKING:
    from ..job import Job
    from ..node import Node

log = logging.getLogger("disq")

RETAIN_DIR: Final = "retain"  # under the node's `dir`
SEGMENT_BYTES: Final = 4 * 1024 * 1024  # a segment rolls at this size ...
SEGMENT_MS: Final = 3600 * 1000  # ... or age
TICK_S: Final = 1.0  # expiry and fsync
CACHE_SEGMENTS: Final = 8  # segments whose records stay decoded between two reads
Key = tuple[int, bytes]  # (ctime, id): the replay order


class RetentionStore:
    """The core's `Retention` port: every RETAIN queue's segments on this node."""

    def __init__(self, node: Node, directory: str, key_file: str = "") -> None:
        self.node = node
        self.directory = os.path.abspath(directory)
        self.key = load_key(key_file) if key_file else None
        self.codec = Codec(self.key)
        self.queues: dict[bytes, QueueFiles] = {}
        self.loaded = False  # the files found on start are indexed
        self._indexed: asyncio.Event | None = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="disq-retain")
        self._writer = Writer()
        self._flush_scheduled = False
        self._tick: asyncio.TimerHandle | None = None
        self._cache: OrderedDict[str, tuple[int, list[RetainedJob]]] = OrderedDict()
        self.appended = 0  # records queued since start
        self.expired_segments = 0
        self.damaged: list[str] = []  # what the start found damaged (logged)

    # -- the node's acknowledgements ----------------------------------------------------
    def job_acked(self, job: Job) -> None:
        queue = job.queue
        if queue is None or job.body is None:
            return
        policy = self.node.policies.get(queue)
        if policy is None or policy.retain <= 0 or self.loop is None:
            return
        ext = job.ext
        attrs = [] if ext is None or ext.attrs is None else [
            item for pair in ext.attrs for item in pair]
        nodes = sorted(job.nodes_delivered) if job.nodes_delivered else [self.node.id]
        retained = RetainedJob(job.id, queue, job.body, job.ctime, now_ms(), nodes, attrs)
        frame = self.codec.frame(encode_record(retained))
        files = self._files(queue)
        segment = self._segment(files, retained.acked, policy.retain_bytes)
        segment.add(retained, len(frame))
        segment.queued += len(frame)
        files.pending.append(frame)
        self.appended += 1
        if not self._flush_scheduled:
            self._flush_scheduled = True
            self.loop.call_soon(self._flush)

    def _files(self, queue: bytes) -> QueueFiles:
        files = self.queues.get(queue)
        if files is None:
            directory = os.path.join(self.directory, queue_digest(queue))
            files = self.queues[queue] = QueueFiles(queue, directory)
            self._submit(make_queue_dir, directory, queue)
        return files

    def _segment(self, files: QueueFiles, now: int, cap: int) -> Segment:
        """The segment the next record goes to: a new one when the current one is full
        or old (or a tenth of RETAIN-BYTES, so that trimming is gradual)."""
        current = files.current
        limit = SEGMENT_BYTES if not cap else max(64 * 1024, min(SEGMENT_BYTES, cap // 10))
        if current is not None and current.size < limit and now - current.first_ms < SEGMENT_MS:
            return current
        if current is not None:
            self._seal(files, current)
        path = os.path.join(files.directory, segment_name(now, os.urandom(4).hex()))
        segment = files.current = Segment(path, now)
        header = self.codec.header()
        segment.size = segment.queued = len(header)
        files.pending.append(header)
        files.segments.append(segment)
        return segment

    def _seal(self, files: QueueFiles, segment: Segment) -> None:
        self._flush()
        segment.sealed = True
        if files.current is segment:
            files.current = None
        self._submit(self._writer.close, segment.path)

    def _flush(self) -> None:
        self._flush_scheduled = False
        for files in self.queues.values():
            if files.pending:
                data, files.pending = b"".join(files.pending), []
                segment = files.current or files.segments[-1]
                segment.queued = 0
                self._submit(self._writer.append, segment.path, data)

    def _submit(self, fn: Callable[..., object], *args: object) -> asyncio.Future[object]:
        loop = self.loop or asyncio.get_running_loop()
        return loop.run_in_executor(self._executor, fn, *args)

    # -- start, expiry, stop ------------------------------------------------------------
    async def start(self, loop: asyncio.AbstractEventLoop) -> None:
        """Take records from now on, and index what the files hold (cutting torn
        tails) in the thread meanwhile: the node does not wait for it to serve (reads
        do); then expire every TICK_S."""
        self.loop = loop
        self._indexed = asyncio.Event()
        loop.create_task(self._index())

    async def indexed(self) -> None:
        """Once the files found on start are indexed."""
        if not self.loaded and self._indexed is not None:
            await self._indexed.wait()

    async def _index(self) -> None:
        loop = self.loop
        assert loop is not None and self._indexed is not None
        found = await loop.run_in_executor(self._executor, scan_all, self.directory,
                                           self.key)
        for queue, directory, segments, damaged in found:
            files = self.queues.get(queue) or QueueFiles(queue, directory)
            self.queues[queue] = files
            files.segments[:0] = segments  # (before any written since the start)
            self.damaged += damaged
        self.loaded = True
        self._indexed.set()
        self._tick = loop.call_later(TICK_S, self._on_tick)

    def _on_tick(self) -> None:
        self.expire(now_ms())
        self._submit(self._writer.sync)
        assert self.loop is not None
        self._tick = self.loop.call_later(TICK_S, self._on_tick)

    def expire(self, now: int) -> None:
        policies = self.node.policies.policies
        for queue, files in list(self.queues.items()):
            policy = policies.get(queue)
            if policy is None:
                continue  # not known (yet): kept
            if policy.deleted or policy.retain <= 0:
                for segment in list(files.segments):
                    self._drop(files, segment)
                if not files.pending:
                    del self.queues[queue]
                    self._submit(remove_queue_dir, files.directory)
                continue
            cutoff = now - policy.retain * 1000
            for segment in list(files.segments):
                if segment.last_ack < cutoff and (segment.count or segment.sealed):
                    self._drop(files, segment)
            cap = policy.retain_bytes
            while cap and files.size > cap and files.segments:
                self._drop(files, files.segments[0])

    def _drop(self, files: QueueFiles, segment: Segment) -> None:
        if files.current is segment:
            self._seal(files, segment)
        files.segments.remove(segment)
        self._cache.pop(segment.path, None)
        self.expired_segments += 1
        self._submit(self._writer.delete, segment.path)

    async def stop(self) -> None:
        if self._tick is not None:
            self._tick.cancel()
        self._flush()
        if self.loop is not None:
            await self._submit(self._writer.close_all)
        self._executor.shutdown(wait=False)

    def close(self) -> None:
        """At shutdown, the loop done: what is queued written, every segment fsynced
        and closed (blocking: nothing else runs)."""
        if self._tick is not None:
            self._tick.cancel()
        if self.loop is not None:
            self._flush()
            self._executor.submit(self._writer.close_all)
        self._executor.shutdown(wait=True)

    # -- reads --------------------------------------------------------------------------
    async def window(self, queue: bytes, start_ms: int, end_ms: int, after: Key | None,
                     count: int, where: list[Condition] | None = None,
                     shard: tuple[int, int] | None = None
                     ) -> tuple[list[RetainedJob], bool]:
        """This node's retained jobs of `queue` created from `start_ms` to `end_ms`
        (inclusive), after `after` in the replay order, the first `count` of them in
        that order, and whether there may be more. `where`: those whose attributes
        match; `shard` (i, n): those whose ID is in shard i of n (`shard_of`: a
        cluster read split in n parts, each reading every node, merged by ID)."""
        await self.indexed()
        files = self.queues.get(queue)
        if files is None:
            return [], False
        low = start_ms * 1_000_000
        high = end_ms * 1_000_000 + 999_999
        if after is not None:
            low = max(low, after[0])
        candidates = sorted((s for s in files.segments
                             if s.count and s.max_ctime >= low and s.min_ctime <= high),
                            key=lambda s: s.min_ctime)
        found: list[RetainedJob] = []
        more = False
        for i, segment in enumerate(candidates):
            if len(found) >= count:
                found = heapq.nsmallest(count, found, key=RetainedJob.key)
                if segment.min_ctime > found[-1].ctime:
                    more = True  # (jobs of later segments come after these)
                    break
            for job in await self._read(segment):
                ctime = job.ctime
                if ctime < low or ctime > high or (after is not None and job.key() <= after):
                    continue
                if shard is not None and shard_of(job.id, shard[1]) != shard[0]:
                    continue
                if where and not _matches(job, where):
                    continue
                found.append(job)
            if i and i % 4 == 0:
                await asyncio.sleep(0)  # a turn for the others between segments
        found.sort(key=RetainedJob.key)
        if len(found) > count:
            more = True
            del found[count:]
        return found, more

    async def _read(self, segment: Segment) -> list[RetainedJob]:
        """The segment's records (decoded in the thread; a few cached)."""
        limit = segment.size - segment.queued
        cached = self._cache.get(segment.path)
        if cached is not None and cached[0] == limit:
            self._cache.move_to_end(segment.path)
            return cached[1]
        if segment.queued:
            self._flush()
        loop = self.loop or asyncio.get_running_loop()
        scan = await loop.run_in_executor(self._executor, read_segment, segment.path,
                                          self.key, segment.size)
        if scan.damage and "No such file" not in scan.damage:
            log.warning("Retained jobs' segment %s: %s", segment.path, scan.damage)
        self._cache[segment.path] = (segment.size, scan.jobs)
        while len(self._cache) > CACHE_SEGMENTS:
            self._cache.popitem(last=False)
        return scan.jobs

    @property
    def write_errors(self) -> int:
        return self._writer.errors

    # -- INFO, QPOLICY --------------------------------------------------------------------
    def queue_info(self, queue: bytes) -> tuple[int, int, int] | None:
        """(bytes, jobs, oldest ack ms) of `queue` here; None: nothing retained."""
        files = self.queues.get(queue)
        if files is None:
            return None
        oldest = min((s.first_ms for s in files.segments if s.count), default=0)
        return files.size, files.count, oldest

    def totals(self) -> tuple[int, int, int]:
        """(bytes, jobs, oldest ack ms) of every queue here."""
        size = count = 0
        oldest = 0
        for queue in self.queues:
            info = self.queue_info(queue)
            if info is not None:
                size += info[0]
                count += info[1]
                if info[2] and (not oldest or info[2] < oldest):
                    oldest = info[2]
        return size, count, oldest

    def check_disk(self, retain_bytes: int) -> None:
        """QPOLICY SET ... RETAIN-BYTES: refused if the disk cannot hold it."""
        path = self.directory if os.path.isdir(self.directory) else os.path.dirname(
            self.directory)
        try:
            free = shutil.disk_usage(path).free
        except OSError:
            return
        if retain_bytes > free:
            raise errors.err(f"RETAIN-BYTES {retain_bytes} is more than the {free} bytes "
                             "free on this node's disk for retained jobs")


def now_ms() -> int:
    return int(time.time() * 1000)


def shard_of(job_id: bytes, shards: int) -> int:
    """The shard of a job in a read split in `shards` parts: by its ID alone, so every
    holder puts its copy in the same one."""
    return zlib.crc32(job_id) % shards


def _matches(job: RetainedJob, where: list[Condition]) -> bool:
    attrs = job.attr_dict()
    return all(condition.matches(attrs) for condition in where)
