"""The append-only file while the node runs: Disque's directives and behaviour,
without blocking the event loop.

The node logs through `job_stored` / `job_removed` (the core's `Persistence`): a
LOADJOB or DELJOB record appended to an in-memory buffer, a few hundred nanoseconds.
The buffer reaches the file (one `os.write`) before the replies that depend on it
leave: the connection calls `commit()` after each batch of requests, and a callback
at the end of the loop turn writes what the cluster bus and the timers logged. So a
reply never announces a job the file does not have, even if the process is killed
the next instant (Redis writes its buffer before its replies, too).

fsync runs in a background thread (fsync.py). With `appendfsync always` the replies
that depend on new records wait (their place kept in the client's reply stream) until
an fsync covers them. Every record has a sequence number; `written` and `synced` say
how far the file and the disk are.

The records of one write go in one frame (frames.py: a CRC32C, and AES-256-GCM with
`aof-encryption-key-file`) unless the file is Disque's plain records (`aof-checksum
no`, or a plain file loaded: it is rewritten in the configured format at start).

A write error (disk full, ...) keeps the records in memory, holds the replies that
depend on them, and makes write commands fail with -MISCONF until a retry (every
second) succeeds. A failed fsync cannot be retried (the kernel may have dropped the
pages), so the file is rewritten from memory instead, and the error clears once the
new file is on disk.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import time
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from ..config import Config
from ..errors import FixedError, fixed
from ..job import Job
from ..policies import QueuePolicy
from ..ports import NO_PERSISTENCE
from ..results import JobEnd
from ..schedules import CronSchedule
from .disk import OFF, ON, WAIT_REWRITE
from .fileformat import (
    DELJOB_HEAD,
    FLUSHRESULTS_RECORD,
    RecordEncoder,
    cronset_record,
    loadresult_record,
    qpolicyset_record,
)
from .frames import Codec, codec_of_file, configured_codec, describe_codec
from .fsync import Fsyncs
from .rewrite import BackgroundRewrite

if TYPE_CHECKING:
    from ..node import Node

log = logging.getLogger("disq")

WRITE_ERROR_LOG_PERIOD = 30.0  # seconds between two logs of the same write error
RETRY_PERIOD = 1.0  # seconds between two attempts to write after an error
REWRITE_RETRY_PERIOD = 5.0  # seconds after a failed rewrite before another may start


class AppendOnlyFile:
    """The AOF of one node. `state` is Disque's aof_state: off, on, or wait-rewrite
    (turned on at run time: the records go to the rewrite that writes the first
    file). It is the node's persistence while records are needed (`recording`: the
    AOF is on, or a rewrite runs: BGREWRITEAOF works with the AOF off, as in Disque);
    `recording_changed` installs it, or NO_PERSISTENCE, whenever that changes."""

    def __init__(self, config: Config, node: Node, loop: asyncio.AbstractEventLoop) -> None:
        self.config = config
        self.node = node
        self.loop = loop
        self.state = OFF
        self.path = config.appendfilename
        self.directory = os.getcwd()
        self.fd: int | None = None
        self.encoder = RecordEncoder(node.id)
        # the open file's frames (checksummed, maybe encrypted; frames.py), or None:
        # Disque's plain records
        self.codec: Codec | None = None
        self.buffer: list[bytes] = []  # records logged this turn, not yet taken
        self._unwritten: list[bytes] = []  # taken, not in the file yet (write errors)
        self.appended = 0  # records logged (sequence number of the last one)
        self._taken = 0  # records moved out of `buffer`
        self.written = 0  # records in the file (handed to the rewrite, while no file)
        self.synced = 0  # records the disk has, under the AOF's name
        self.current_size = 0
        self.base_size = 0  # size after the last load or rewrite (auto rewrite base)
        self.waiters: deque[tuple[int, Callable[[], object]]] = deque()
        self._turn_scheduled = False
        self.fsyncs = Fsyncs(self)  # in a background thread (fsync.py)
        self.generation = 0  # bumped when a rewrite replaces the file
        self.sync_cap: int | None = None  # while a rewrite ends: see BackgroundRewrite
        # errors
        self.write_errno = 0
        # What write commands are refused with while `write_errno` stands: a fixed error
        # made once per error, so that each refusal's reply is bytes made already.
        self.misconf: type[FixedError] | None = None
        self.fsync_failed = False
        self._last_error_log = 0.0
        self._last_retry = 0.0
        self.on_status_change: Callable[[], None] = lambda: None
        # rewrites
        self.rewrite: BackgroundRewrite | None = None
        self.rewrite_scheduled = False
        self.rewrite_refused = ""  # why the last rewrite could not start
        self.last_rewrite_ok = True
        self.last_rewrite_seconds = -1
        self._last_failed_rewrite = 0.0

    # -- the core's Persistence: the hot path ---------------------------------------------
    @property
    def recording(self) -> bool:
        return self.state != OFF or self.rewrite is not None

    def recording_changed(self) -> None:
        """The one place the node's persistence is set: this writer while it records,
        nothing otherwise."""
        self.node.set_persistence(self if self.recording else NO_PERSISTENCE)

    @contextmanager
    def not_recording(self) -> Iterator[None]:
        """DEBUG LOADAOF: what the node does meanwhile is not logged (it drops its jobs
        and loads this very file again)."""
        self.node.set_persistence(NO_PERSISTENCE)
        try:
            yield
        finally:
            self.recording_changed()

    def job_stored(self, job: Job) -> None:
        self.buffer.append(self.encoder.loadjob_record(job))
        self.appended += 1
        if not self._turn_scheduled:
            self._turn_scheduled = True
            self.loop.call_soon(self._end_of_turn)

    def schedule_stored(self, schedule: CronSchedule) -> None:
        """A CRON schedule defined, deleted or fired (a disq extension)."""
        self._append(cronset_record(schedule))

    def policy_stored(self, policy: QueuePolicy) -> None:
        """A queue policy set or deleted (a disq extension)."""
        self._append(qpolicyset_record(policy))

    def result_stored(self, end: JobEnd) -> None:
        """A result kept (ACKJOB ... RESULT here, or a SETACK_RESULT's)."""
        self._append(loadresult_record(end))

    def results_flushed(self) -> None:
        """Every result forgotten (DEBUG FLUSHALL, CLUSTER RESET)."""
        self._append(FLUSHRESULTS_RECORD)

    def _append(self, record: bytes) -> None:
        self.buffer.append(record)
        self.appended += 1
        if not self._turn_scheduled:
            self._turn_scheduled = True
            self.loop.call_soon(self._end_of_turn)

    def job_removed(self, job_id: bytes) -> None:
        self.buffer.append(DELJOB_HEAD + job_id + b"\r\n")
        self.appended += 1
        if not self._turn_scheduled:
            self._turn_scheduled = True
            self.loop.call_soon(self._end_of_turn)

    # -- replies that depend on records ---------------------------------------------------
    def commit(self) -> bool:
        """Write what was logged. True if the replies that depend on it may leave now;
        else the caller waits with `on_durable`."""
        if self.buffer or self._unwritten:
            self.write_pending()
        return self.durable() >= self.appended

    def on_durable(self, callback: Callable[[], object]) -> None:
        """Call `callback` once every record logged so far is as safe as the policy
        promises (written; fsynced with `appendfsync always`)."""
        self.waiters.append((self.appended, callback))
        self._schedule_turn()

    def durable(self) -> int:
        """The last record the replies may count on."""
        if self.state == OFF:
            return self.appended  # no promise: recording only for a rewrite
        if self.config.appendfsync == "always" and not self.fsyncs.paused():
            return self.synced
        if self.state == WAIT_REWRITE:
            return self.appended  # Disque answers at once while the first file is written
        return self.written

    def release(self) -> None:
        """Call the waiters whose records are safe now."""
        durable = self.durable()
        waiters = self.waiters
        while waiters and waiters[0][0] <= durable:
            waiters.popleft()[1]()

    def release_all(self) -> None:
        waiters, self.waiters = self.waiters, deque()
        for _, callback in waiters:
            callback()

    # -- writing --------------------------------------------------------------------------
    def _schedule_turn(self) -> None:
        if not self._turn_scheduled:
            self._turn_scheduled = True
            self.loop.call_soon(self._end_of_turn)

    def _end_of_turn(self) -> None:
        """After the requests of a loop turn: write what they logged, start the fsync
        that covers it (group commit), answer the replies that may go."""
        self._turn_scheduled = False
        if self.buffer or self._unwritten:
            self.write_pending()
        self.fsyncs.maybe_start()
        self.release()

    def take_buffer(self) -> None:
        """Move the records logged so far out of the buffer: to the rewrite, if one
        runs, and to the list of data to write."""
        if not self.buffer:
            return
        buffer = self.buffer
        chunk = buffer[0] if len(buffer) == 1 else b"".join(buffer)
        self.buffer = []
        self._taken = self.appended
        if self.rewrite is not None:
            self.rewrite.feed(chunk, self._taken)
        if self.fd is not None:
            codec = self.codec
            self._unwritten.append(chunk if codec is None else codec.frame(chunk))

    def write_pending(self) -> None:
        """One write of everything logged and not yet in the file."""
        self.take_buffer()
        if self.fd is None:
            self.written = self._taken  # no file: the rewrite has the records
            return
        if not self._unwritten:
            return
        data = self._unwritten[0] if len(self._unwritten) == 1 else b"".join(self._unwritten)
        try:
            n = os.write(self.fd, data)
        except OSError as exc:
            self._unwritten = [data]
            self._write_failed(exc.errno or errno.EIO, f"Error writing to the AOF file: "
                               f"{exc.strerror}")
            return
        if n != len(data):
            self._short_write(data, n)
            return
        self._written_ok(n)

    def _written_ok(self, n: int) -> None:
        self._unwritten = []
        self.current_size += n
        self.written = self._taken
        if self.write_errno and not self.fsync_failed:
            log.warning("AOF write error looks solved, Disque can write again.")
            self.set_error(0)
            self.fsyncs.maybe_start()
            self.release()

    def _short_write(self, data: bytes, n: int) -> None:
        """Part of the data reached the file. Write the rest: usually it goes, or the
        attempt says what is wrong (EFBIG, ENOSPC...). If it does not go, take the
        part back, as Redis does, so that the file ends with a whole record; if even
        that fails keep only the rest for the next attempt."""
        written = n
        code = errno.ENOSPC  # what Redis reports for a short write
        try:
            while written < len(data):
                more = os.write(self.fd, data[written:])  # type: ignore[arg-type]
                if more <= 0:
                    break
                written += more
        except OSError as exc:
            code = exc.errno or code
        if written == len(data):
            self._written_ok(len(data))
            return
        try:
            os.ftruncate(self.fd, self.current_size)  # type: ignore[arg-type]
            self._unwritten = [data]
        except OSError as exc:
            log.warning("Could not remove short write from the append-only file. Disque "
                        "may refuse to load the AOF the next time it starts. ftruncate: %s",
                        exc.strerror)
            self.current_size += written
            self._unwritten = [data[written:]]
        self._write_failed(code, "Short write while writing to the AOF file: "
                           f"(nwritten={written}, expected={len(data)}): {os.strerror(code)}")

    def _write_failed(self, code: int, message: str) -> None:
        now = time.monotonic()
        if now - self._last_error_log > WRITE_ERROR_LOG_PERIOD or code != self.write_errno:
            self._last_error_log = now
            log.warning(message)
        self._last_retry = now
        self.set_error(code)

    def set_error(self, code: int) -> None:
        """Record the error write commands are refused with (0: none)."""
        if code != self.write_errno:
            self.write_errno = code
            self.misconf = fixed("MISCONF", "MISCONF", "Errors writing to the AOF file: "
                                 f"{os.strerror(code)}") if code else None
            self.on_status_change()

    # -- the cron (hz) --------------------------------------------------------------------
    def cron(self) -> None:
        now = time.monotonic()
        if self.buffer or self._unwritten:
            if not self.write_errno or now - self._last_retry >= RETRY_PERIOD:
                self._last_retry = now
                self.write_pending()
        self.fsyncs.count_delay(now)
        self.fsyncs.maybe_start()
        self.release()
        if self.rewrite is not None:
            return
        if now - self._last_failed_rewrite < REWRITE_RETRY_PERIOD:
            return
        if self.fsync_failed or self.rewrite_scheduled:
            self.start_rewrite()
        elif self.state == ON and not self.write_errno:
            self._auto_rewrite()

    def _auto_rewrite(self) -> None:
        percentage = self.config.auto_aof_rewrite_percentage
        if not percentage or self.current_size <= self.config.auto_aof_rewrite_min_size:
            return
        growth = self.current_size * 100 // (self.base_size or 1) - 100
        if growth >= percentage:
            log.info("Starting automatic rewriting of AOF on %d%% growth", growth)
            self.start_rewrite()

    # -- turning on and off ---------------------------------------------------------------
    def open(self) -> None:
        """Start appending to the file (at start-up, after loading it)."""
        self.path = self.config.appendfilename
        self.directory = os.getcwd()
        self.fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self.current_size = self.base_size = os.fstat(self.fd).st_size
        self._choose_codec()
        self.state = ON
        self.fsyncs.last = time.monotonic()
        self.recording_changed()

    def _choose_codec(self) -> None:
        """The format to append in: a new file gets the configured one (its header
        written now); a file loaded keeps its own (the loader checked its key), and is
        rewritten in the configured one if that differs (checksums or a key turned on
        or off, a key changed on disk). Raises OSError (KeyFileError)."""
        assert self.fd is not None
        wanted = configured_codec(self.config)
        if self.current_size == 0:
            self.codec = wanted
            if wanted is not None:
                start = wanted.header()
                os.write(self.fd, start)
                self.current_size = self.base_size = len(start)
            return
        self.codec = codec_of_file(self.path, wanted)
        if self.codec is not wanted:
            log.warning("The AOF is in another format (%s) than the configured one (%s): "
                        "rewriting it", describe_codec(self.codec), describe_codec(wanted))
            self.rewrite_scheduled = True

    def turn_on(self) -> bool:
        """CONFIG SET appendonly yes: write the jobs held now in a new file (a rewrite),
        then append to it. False if that cannot start (the log says why)."""
        self.path = self.config.appendfilename
        self.directory = os.getcwd()
        try:
            os.close(os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644))
        except OSError as exc:
            log.warning("Disque needs to enable the AOF but can't open the append only "
                        "file: %s", exc.strerror)
            return False
        self.state = WAIT_REWRITE
        self.recording_changed()
        if self.rewrite is not None:  # a BGREWRITEAOF without AOF: its file would lack
            self.rewrite.cancel()     # what was logged before now; start afresh
        if not self.start_rewrite():
            self.state = OFF
            self.recording_changed()
            log.warning("Disque needs to enable the AOF but can't trigger a background "
                        "AOF rewrite operation. Check the above logs for more info about "
                        "the error.")
            return False
        return True

    def turn_off(self) -> None:
        """CONFIG SET appendonly no: flush, fsync, close; stop any rewrite."""
        if self.rewrite is not None:
            log.info("Killing running AOF rewrite")
            self.rewrite.cancel()
        self.close_file()
        self.state = OFF
        self.recording_changed()
        self.rewrite_scheduled = False
        self._unwritten = []  # what a write error kept: no longer wanted
        self.fsync_failed = False
        self.set_error(0)
        self.release_all()

    def close_file(self) -> None:
        """Write and fsync what is pending and close the file (blocking: shutdown,
        turning off)."""
        if self.fd is None:
            return
        self.write_pending()
        self.fsyncs.sync_now(self.fd, self.directory)
        os.close(self.fd)
        self.fd = None
        self.synced = self.fsyncs.covered = self.written

    def shutdown(self) -> None:
        """Before the process exits: the buffer on disk, the rewrite stopped."""
        if self.rewrite is not None:
            log.warning("There is a rewrite of the AOF running. Killing it!")
            self.rewrite.cancel()
        if self.fd is not None:  # an AOF file is open (not when appendonly is off)
            log.info("Calling fsync() on the AOF file.")
        self.close_file()
        self.release_all()
        self.fsyncs.shutdown()

    # -- rewrites -------------------------------------------------------------------------
    def start_rewrite(self) -> bool:
        """BGREWRITEAOF: False if it could not start (one is running already)."""
        if self.rewrite is not None:
            return False
        try:
            self.rewrite = BackgroundRewrite(self)
        except OSError as exc:
            log.warning("Can't rewrite the append only file in background: %s",
                        exc.strerror)
            self.rewrite_refused = f"Can't rewrite the append only file: {exc.strerror}"
            self.rewrite = None
            self.last_rewrite_ok = False
            self._last_failed_rewrite = time.monotonic()
            return False
        self.rewrite_scheduled = False
        self.recording_changed()  # record what happens meanwhile, even with the AOF off
        log.info("Background append only file rewriting started")
        return True

    def rewrite_done(self, rewrite: BackgroundRewrite, new_fd: int | None,
                     error: str | None) -> None:
        """Called by the rewrite when it ends: `new_fd` is the new file, open and
        renamed over the old one (None on error, or if the AOF is off)."""
        self.rewrite = None
        self.sync_cap = None
        self.last_rewrite_seconds = round(time.monotonic() - rewrite.started)
        if error is not None:
            self.last_rewrite_ok = False
            self._last_failed_rewrite = time.monotonic()
            log.warning("Background AOF rewrite terminated with error: %s", error)
            if self.state == WAIT_REWRITE:
                self.rewrite_scheduled = True
        else:
            self.last_rewrite_ok = True
            if new_fd is not None:
                self.codec = rewrite.codec
                self._adopt(new_fd, os.path.dirname(rewrite.target_path))
            log.info("Background AOF rewrite finished successfully")
        if self.state == OFF:
            self.recording_changed()
            self.buffer = []
        self.fsyncs.maybe_start()
        self.release()

    def _adopt(self, new_fd: int, directory: str) -> None:
        """The rewritten file is the AOF now: append to it from here on."""
        old_fd = self.fd
        self.fd = new_fd
        self.directory = directory
        self.generation += 1
        self.current_size = self.base_size = os.fstat(new_fd).st_size
        self.written = self._taken
        self._unwritten = []
        if self.state == WAIT_REWRITE:
            self.state = ON
            log.info("AOF enabled: the first file is written")
        if self.write_errno:
            # the new file holds every record, including those a failed write kept in
            # memory or a failed fsync may have lost: the replies wait for its own
            # fsync, write commands are accepted again
            log.warning("AOF rewritten after a write error, Disque can write again.")
            self.fsync_failed = False
            self.set_error(0)
        self.fsyncs.file_replaced(old_fd, self.config.appendfsync, directory)

    # -- INFO -------------------------------------------------------------------------------
    def info(self) -> list[str]:
        rewrite = self.rewrite
        lines = [
            f"aof_enabled:{int(self.state != OFF)}",
            f"aof_state:{self.state}",
            f"aof_rewrite_in_progress:{int(rewrite is not None)}",
            f"aof_rewrite_scheduled:{int(self.rewrite_scheduled)}",
            f"aof_last_rewrite_time_sec:{self.last_rewrite_seconds}",
            "aof_current_rewrite_time_sec:"
            f"{int(time.monotonic() - rewrite.started) if rewrite is not None else -1}",
            f"aof_last_bgrewrite_status:{'ok' if self.last_rewrite_ok else 'err'}",
            f"aof_last_write_status:{'err' if self.write_errno else 'ok'}",
        ]
        if self.state != OFF:
            pending = sum(map(len, self.buffer)) + sum(map(len, self._unwritten))
            lines += [
                f"aof_current_size:{self.current_size}",
                f"aof_base_size:{self.base_size}",
                f"aof_pending_rewrite:{int(self.rewrite_scheduled)}",
                f"aof_buffer_length:{pending}",
                f"aof_rewrite_buffer_length:{rewrite.buffered() if rewrite else 0}",
                f"aof_pending_bio_fsync:{int(self.fsyncs.running)}",
                f"aof_delayed_fsync:{self.fsyncs.delayed}",
            ]
        return lines
