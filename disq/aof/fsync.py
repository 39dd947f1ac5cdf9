"""The AOF's fsyncs, in a background thread (a part of the writer: writer.py).

One fsync covers every record written before it started (group commit); the next
starts as soon as it ends if more were written meanwhile. With `appendfsync always`
the replies wait for it (the writer's `durable`), `everysec` runs one a second at most,
`no` leaves it to the kernel. After a rewrite replaced the file, the directory is
fsynced too, so the new file stays reachable under the AOF's name. A failed fsync
cannot be retried (the kernel may have dropped the pages): the writer rewrites the
file from memory instead.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import time
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING

from .disk import ON, sync_directory

if TYPE_CHECKING:
    from .writer import AppendOnlyFile

log = logging.getLogger("disq")

FSYNC_DELAYED_AFTER = 2.0  # an everysec fsync still running after this is "delayed"


def _fsync(fd: int, directory: str | None) -> None:
    """Runs in the fsync thread: the file's data, and the directory entry after a
    rename (the new file must stay reachable under the AOF's name)."""
    os.fdatasync(fd)
    if directory is not None:
        sync_directory(directory)


class Fsyncs:
    """The fsyncs of one AOF (`aof.fsyncs`): when one starts, what it covered."""

    __slots__ = ("aof", "executor", "running", "started", "delay_counted", "last",
                 "delayed", "covered", "directory_needed")

    def __init__(self, aof: AppendOnlyFile) -> None:
        self.aof = aof
        self.executor = ThreadPoolExecutor(1, thread_name_prefix="aof-fsync")
        self.running = False
        self.started = 0.0
        self.delay_counted = False
        self.last = time.monotonic()  # when the last one ended (everysec)
        self.delayed = 0  # INFO's aof_delayed_fsync
        self.covered = 0  # records the last fsync of this file covered (see sync_cap)
        self.directory_needed = False  # the directory entry changed (a rewrite)

    def paused(self) -> bool:
        """no-appendfsync-on-rewrite: no fsync while a rewrite runs."""
        aof = self.aof
        return aof.rewrite is not None and aof.config.no_appendfsync_on_rewrite

    def maybe_start(self) -> None:
        aof = self.aof
        if aof.fd is None or self.running or aof.fsync_failed or aof.state != ON:
            return
        policy = aof.config.appendfsync
        behind = aof.written > self.covered or self.directory_needed
        if not behind or self.paused():
            return
        if policy == "always" or (
                policy == "everysec" and time.monotonic() - self.last >= 1.0):
            self.start()

    def start(self) -> None:
        """fsync the file in the background; covers every record written so far."""
        aof = self.aof
        assert aof.fd is not None
        self.running = True
        self.started = time.monotonic()
        self.delay_counted = False
        target, generation = aof.written, aof.generation
        directory = aof.directory if self.directory_needed else None
        self.directory_needed = False
        future = aof.loop.run_in_executor(self.executor, _fsync, aof.fd, directory)
        future.add_done_callback(lambda f: self._done(f, target, generation, directory))

    def _done(self, future: asyncio.Future[None], target: int, generation: int,
              directory: str | None) -> None:
        aof = self.aof
        self.running = False
        self.last = time.monotonic()
        exc = None if future.cancelled() else future.exception()
        if generation != aof.generation:
            pass  # it synced a file a rewrite replaced since: it proves nothing now
        elif exc is not None:
            self._failed(exc, directory)
        else:
            self.covered = target
            cap = aof.sync_cap
            reached = target if cap is None or target <= cap else cap
            if reached > aof.synced:
                aof.synced = reached
        self.maybe_start()
        aof.release()

    def _failed(self, exc: BaseException, directory: str | None) -> None:
        code = exc.errno if isinstance(exc, OSError) and exc.errno else errno.EIO
        log.warning("Error syncing the AOF to disk (fsync: %s): the data written since "
                    "the last fsync may be lost; rewriting the AOF from memory.",
                    os.strerror(code))
        if directory is not None:
            self.directory_needed = True
        self.aof.fsync_failed = True
        self.aof.set_error(code)

    def count_delay(self, now: float) -> None:
        """The cron: an everysec fsync running for too long counts as delayed, once."""
        if (self.running and self.aof.config.appendfsync == "everysec"
                and not self.delay_counted and now - self.started > FSYNC_DELAYED_AFTER):
            self.delay_counted = True
            self.delayed += 1

    def sync_now(self, fd: int, directory: str) -> None:
        """Blocking (the file closes): after the running fsync ends, one more."""
        self.executor.submit(lambda: None).result()  # let a running fsync end
        try:
            os.fdatasync(fd)
            if self.directory_needed:
                sync_directory(directory)
        except OSError as exc:
            log.warning("Error syncing the AOF to disk: %s", exc.strerror)

    def file_replaced(self, old_fd: int | None, appendfsync: str, directory: str) -> None:
        """A rewrite's file is the AOF now: the old one closed in the thread (closing
        its last descriptor unlinks it), the new file and its directory entry synced."""
        self.covered = 0
        self.directory_needed = True
        if old_fd is not None:
            self.executor.submit(os.close, old_fd)
        if appendfsync == "no":
            self.executor.submit(sync_directory, directory)
            self.directory_needed = False
        elif not self.running:  # else it starts when the running one ends
            self.start()

    def shutdown(self) -> None:
        self.executor.shutdown(wait=False)
