"""Compacting the AOF to one LOADJOB per live job (and one LOADRESULT per result kept
and not past its time), without stopping the node.

Disque forks: the child writes the jobs it sees, the parent buffers what happens
meanwhile and appends it at the end. disq does it in one process:

* the jobs held when the rewrite starts are listed (references only), then serialized
  on the loop a slice per turn (a couple of milliseconds) and written by a thread;
* every record logged meanwhile goes to the rewrite as well, and is written before the
  next slice; so the new file has the events in the order they happened: a job
  serialized in a slice and acked later has its DELJOB after its LOADJOB, and a job
  removed before its slice is skipped (it is no longer active or queued);
* at the end the file is fsynced (in the thread), the last few records are written on
  the loop, and the file is renamed over the AOF (atomic); the writer appends to it
  from then on, and fsyncs it with its directory.

With `appendfsync always`, a record answered because the old file had it on disk must
be on disk in the new file too before the rename: while the final fsync runs the
writer counts old-file fsyncs only up to the records that fsync covers (`sync_cap`);
the others wait for the new file's own fsync.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from itertools import chain
from typing import TYPE_CHECKING, TypeVar

from ..clock import now_ms
from ..job import ACTIVE, QUEUED, Job
from ..results import Ends, JobEnd
from .disk import OFF, sync_directory
from .fileformat import RecordEncoder, loadresult_record, table_records
from .frames import Codec, configured_codec

if TYPE_CHECKING:
    from .writer import AppendOnlyFile

SLICE_SECONDS = 0.002  # serializing on the loop, per turn
MAX_IN_FLIGHT_BYTES = 16 * 1024 * 1024  # handed to the thread, not yet written
INCREMENTAL_FSYNC_BYTES = 32 * 1024 * 1024  # aof-rewrite-incremental-fsync


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        if n <= 0:
            raise OSError(28, os.strerror(28))  # ENOSPC, as Redis reports short writes
        view = view[n:]


def framed(codec: Codec | None, data: bytes) -> bytes:
    return data if codec is None else codec.frame(data)


T = TypeVar("T")


def job_record(encoder: RecordEncoder) -> Callable[[Job], bytes | None]:
    """A job's record in a rewrite: a job active or queued; None for the others."""
    def record(job: Job) -> bytes | None:
        if job.state == ACTIVE or job.state == QUEUED:
            return encoder.loadjob_record(job)
        return None
    return record


def result_record(ends: Ends, now: int) -> Callable[[JobEnd], bytes | None]:
    """A result's record in a rewrite: one still kept and not past its time (one
    dropped or kept again since the rewrite listed it is skipped, as a job no
    longer active or queued is)."""
    kept = ends.kept

    def record(end: JobEnd) -> bytes | None:
        if end.expires > now and kept.get(end.job_id) is end:
            return loadresult_record(end)
        return None
    return record


def records(items: Iterable[T], record: Callable[[T], bytes | None]) -> Iterator[bytes]:
    for item in items:
        data = record(item)
        if data is not None:
            yield data


def _discard(fd: int, path: str) -> None:
    os.close(fd)
    try:
        os.unlink(path)
    except OSError:
        pass


class BackgroundRewrite:
    """One BGREWRITEAOF (or automatic rewrite, or the first file after CONFIG SET
    appendonly yes). Starts at once; reports to `aof.rewrite_done`."""

    def __init__(self, aof: AppendOnlyFile) -> None:
        self.aof = aof
        self.started = time.monotonic()
        self.jobs: list[Job | None] = list(aof.node.jobs.values())
        self.ends: list[JobEnd | None] = list(aof.node.ends.kept.values())
        # the new file's format: the key file is read again, so a rewrite after the
        # key changed writes the new file with the new key (KeyFileError, an OSError)
        self.codec: Codec | None = configured_codec(aof.config)
        self.tmp_path = os.path.abspath(f"temp-rewriteaof-bg-{os.getpid()}.aof")
        self.target_path = os.path.abspath(aof.path)
        self.fd = os.open(self.tmp_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND,
                          0o644)
        if self.codec is not None:
            try:
                write_all(self.fd, self.codec.header())
            except OSError:
                _discard(self.fd, self.tmp_path)
                raise
        self.incremental_fsync = aof.config.aof_rewrite_incremental_fsync
        self._pending: list[bytes] = []  # records logged since the start, not yet written
        self._pending_bytes = 0
        self._seq_fed = 0  # sequence number of the last record fed
        self._seq_taken = 0  # of the last record in the parts being written
        self.seq_in_file = 0  # of the last record written to the new file
        self._bytes_written = 0
        self._bytes_synced = 0
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="aof-rewrite")
        # writes handed to the thread: (its future, last record in it, its size)
        self._in_flight: deque[tuple[Future[None], int, int]] = deque()
        self._in_flight_bytes = 0
        self.task = aof.loop.create_task(self._run())

    # -- what the writer tells it ----------------------------------------------------------
    def feed(self, chunk: bytes, seq: int) -> None:
        """Records logged while the rewrite runs, in order; `seq` numbers the last."""
        self._pending.append(chunk)
        self._pending_bytes += len(chunk)
        self._seq_fed = seq

    def buffered(self) -> int:
        return self._pending_bytes

    def cancel(self) -> None:
        """Stop and remove the temporary file (the AOF is turned off, reloaded...)."""
        aof = self.aof
        if aof.rewrite is self:
            aof.rewrite = None
            aof.sync_cap = None
            aof.recording_changed()  # with the AOF off, nothing is recorded any more
        self.task.cancel()

    # -- the work ----------------------------------------------------------------------------
    async def _run(self) -> None:
        try:
            await self._snapshot()
            new_fd = await self._finish()
        except asyncio.CancelledError:
            self._close_and_remove()
            raise
        except OSError as exc:
            self._close_and_remove()
            if self.aof.rewrite is self:
                self.aof.rewrite_done(self, None, f"{exc.strerror or exc}")
            return
        self.aof.rewrite_done(self, new_fd, None)

    async def _snapshot(self) -> None:
        """Every job active or queued now, then every result kept, a slice per loop
        turn, with the records logged meanwhile in between."""
        aof = self.aof
        node = aof.node
        tables = table_records(node)
        if tables:  # CRON's and QPOLICY's (few), first: a change logged meanwhile follows
            aof.take_buffer()
            await self._write(self._take_pending() + tables)
        await self._sliced(self.jobs, job_record(aof.encoder))
        await self._sliced(self.ends, result_record(node.ends, now_ms()))

    async def _sliced(self, items: list[T | None], record: Callable[[T], bytes | None]
                      ) -> None:
        """The records of `items` (None: none), a slice per loop turn."""
        count = len(items)
        i = 0
        clock = time.perf_counter
        while i < count:
            self.aof.take_buffer()  # what was logged before this slice goes first
            parts = self._take_pending()
            deadline = clock() + SLICE_SECONDS
            while i < count:
                item = items[i]
                items[i] = None  # the list must not keep deleted jobs alive
                i += 1
                assert item is not None
                data = record(item)
                if data is not None:
                    parts.append(data)
                if not i & 255 and clock() > deadline:
                    break
            await self._write(parts)

    async def _finish(self) -> int | None:
        """fsync, last records, rename. Returns the new file's descriptor for the
        writer to append to (None with the AOF off: the file is closed). What is
        logged while the thread writes and fsyncs is written by the thread too; the
        loop writes only what one turn logged (Disque's parent writes everything its
        child did not read)."""
        aof = self.aof
        loop = aof.loop
        aof.take_buffer()
        await self._write(self._take_pending())
        await self._written(0)
        aof.sync_cap = self.seq_in_file  # see the module's docstring
        await loop.run_in_executor(self._executor, os.fsync, self.fd)
        aof.take_buffer()  # what was logged during the fsync: most of it off the loop
        await self._write(self._take_pending())
        await self._written(0)
        # From here on, synchronous: nothing may be logged in between.
        aof.take_buffer()
        seq = self._seq_fed
        rest = self._take_pending()
        if rest:
            write_all(self.fd, framed(self.codec, b"".join(rest)))
        self.seq_in_file = seq
        old_fd = None
        if aof.fd is None:  # keep the replaced file open: its unlink happens off the loop
            try:
                old_fd = os.open(self.target_path, os.O_RDONLY | os.O_NONBLOCK)
            except OSError:
                pass
        os.replace(self.tmp_path, self.target_path)
        if old_fd is not None:
            self._executor.submit(os.close, old_fd)
        new_fd: int | None = self.fd
        if aof.state == OFF:
            self._executor.submit(sync_directory, os.path.dirname(self.target_path))
            self._executor.submit(os.close, self.fd)
            new_fd = None
        self.fd = -1
        self._executor.shutdown(wait=False)
        return new_fd

    def _take_pending(self) -> list[bytes]:
        parts, self._pending = self._pending, []
        self._pending_bytes = 0
        self._seq_taken = self._seq_fed
        return parts

    async def _write(self, parts: list[bytes]) -> None:
        """Hand the parts to the thread, then give the loop a turn: one slice per
        turn, the writing overlapping the next ones. Waits for the thread only when
        too much is in flight."""
        if parts:
            data = b"".join(parts)
            future = self._executor.submit(self._write_in_thread, data)
            self._in_flight.append((future, self._seq_taken, len(data)))
            self._in_flight_bytes += len(data)
        if not await self._written(MAX_IN_FLIGHT_BYTES):
            await asyncio.sleep(0)

    async def _written(self, limit: int) -> bool:
        """Collect the writes the thread finished (raising their errors), waiting
        until no more than `limit` bytes are in flight. True if it waited."""
        waited = False
        in_flight = self._in_flight
        while in_flight and (self._in_flight_bytes > limit or in_flight[0][0].done()):
            future, seq, size = in_flight.popleft()
            if future.done():
                future.result()
            else:
                waited = True
                await asyncio.wrap_future(future)
            self.seq_in_file = seq
            self._in_flight_bytes -= size
        return waited

    def _write_in_thread(self, data: bytes) -> None:
        data = framed(self.codec, data)  # checksummed, encrypted: off the loop
        write_all(self.fd, data)
        self._bytes_written += len(data)
        if (self.incremental_fsync
                and self._bytes_written - self._bytes_synced >= INCREMENTAL_FSYNC_BYTES):
            os.fsync(self.fd)  # many small fsyncs rather than one long one at the end
            self._bytes_synced = self._bytes_written

    def _close_and_remove(self) -> None:
        if self.fd >= 0:
            self._executor.submit(_discard, self.fd, self.tmp_path)
            self.fd = -1
        self._executor.shutdown(wait=False)


def rewrite_now(aof: AppendOnlyFile) -> None:
    """The blocking rewrite of SHUTDOWN REWRITE-AOF (and of a shutdown while the first
    file is still being written). Raises OSError."""
    tmp_path = f"temp-rewriteaof-{os.getpid()}.aof"
    target = os.path.abspath(aof.config.appendfilename)
    encoder = aof.encoder
    codec = configured_codec(aof.config)
    fd = os.open(tmp_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        if codec is not None:
            write_all(fd, codec.header())
        node = aof.node
        parts = table_records(node)
        for record in chain(records(node.jobs.values(), job_record(encoder)),
                            records(node.ends.kept.values(),
                                    result_record(node.ends, now_ms()))):
            parts.append(record)
            if len(parts) == 4096:
                write_all(fd, framed(codec, b"".join(parts)))
                parts = []
        if parts:
            write_all(fd, framed(codec, b"".join(parts)))
        os.fsync(fd)
    except OSError:
        _discard(fd, tmp_path)
        raise
    os.close(fd)
    os.replace(tmp_path, target)
    sync_directory(os.path.dirname(target))
