"""Replaying an AOF into a node, as Disque's loadAppendOnlyFile and LOADJOB do.

A LOADJOB registers the job unless it expired or is known already; a job using disq's
extensions has their fields as a second argument (serialize.serialize_ext). A job stored
queued comes back active and is queued again by its retry timer (after DELAY + RETRY,
from its due time if that is later, as a copy received from another node); with
`aof-enqueue-jobs-once` it goes straight back into its queue. RETRY 0 jobs are never
queued again after a restart: they may have been delivered after their record was
written. DELJOB removes the job.

LOADRESULT keeps a job's result (ACKJOB ... RESULT) until its recorded expiry time,
unless that time passed or the job has a result already (the first stays, as at run
time); never longer than its TTL from now (a clock set back). FLUSHRESULTS forgets
every result. A record that does not decode is damage, as a LOADJOB's.

`AofLoader.run()` is a generator that yields every few thousand records, so the server
can answer -LOADING between two slices; DEBUG LOADAOF simply runs it to the end.
"""

from __future__ import annotations

import logging
import mmap
import os
import time
from collections.abc import Generator, Iterator, Mapping

from .. import lifecycle
from ..job import ACTIVE, BCAST_WILLQUEUE, QUEUED, job_orderkey, with_holders
from ..node import Node, now_ms
from ..policies import QueuePolicy
from .fileformat import (
    FormatError,
    RecordReader,
    cronset_schedule,
    loadresult_end,
    qpolicyset_policy,
)
from .frames import FramedReader, KeyFileError, WrongKey, load_key, reader_for
from .serialize import CorruptJob, deserialize_ext, deserialize_job

log = logging.getLogger("disq")

RECORDS_PER_SLICE = 2000


class AofLoadError(Exception):
    """Loading cannot go on; the message is what the log says."""


class AofLoader:
    def __init__(self, node: Node, path: str, *, enqueue_jobs: bool, load_truncated: bool,
                 known_ids: Mapping[str, str], key_file: str = "",
                 load_corrupt: str = "refuse") -> None:
        self.node = node
        self.path = path
        self.enqueue_jobs = enqueue_jobs
        self.load_truncated = load_truncated
        self.key_file = key_file  # aof-encryption-key-file
        self.load_corrupt = load_corrupt  # aof-load-corrupt: refuse or truncate
        self.format = "plain"  # what the file was: plain RESP records, or its frames
        self.known_ids = known_ids
        self.start_time = time.time()
        self.total_bytes = 0
        self.loaded_bytes = 0
        self.jobs_loaded = 0
        self.size_after = 0  # the file's size once loaded (after a truncation)

    def run(self) -> Iterator[None]:
        """Load the file, yielding between slices. A missing file is an empty one."""
        started = time.monotonic()
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except FileNotFoundError:
            return
        except OSError as exc:
            raise AofLoadError("Fatal error: can't open the append log file for reading: "
                               f"{exc.strerror}") from None
        try:
            self.total_bytes = os.fstat(fd).st_size
            if self.total_bytes == 0:
                return
            with mmap.mmap(fd, 0, access=mmap.ACCESS_READ) as data:
                reader = self._reader(data)
                damage = yield from self._replay(reader)
                cut_off = reader.cut_off
                valid_up_to = reader.pos
        finally:
            os.close(fd)
        self.node.ends.order_expiry()
        self.size_after = self.total_bytes
        if damage is not None:
            self._truncate_damage(damage, valid_up_to)
        elif cut_off is not None:
            self._truncate(valid_up_to, cut_off)
        results = len(self.node.ends)  # (kept: a later FLUSHRESULTS leaves none)
        log.info("DB loaded from append only file: %.3f seconds (%d jobs%s)",
                 time.monotonic() - started, self.jobs_loaded,
                 f", {results} results" if results else "")

    def _reader(self, data: mmap.mmap) -> RecordReader | FramedReader:
        """The file's reader: plain records, or frames (encrypted ones need the key of
        aof-encryption-key-file, read again now: a rewrite may have changed it)."""
        try:
            key = load_key(self.key_file) if self.key_file else None
            reader = reader_for(data, key)
        except KeyFileError as exc:
            raise AofLoadError(f"Can't load the append only file: {exc.strerror}") from None
        except WrongKey as exc:
            raise AofLoadError(f"Can't load the append only file {self.path}: {exc}. The "
                               "file is left as it is.") from None
        except FormatError as exc:
            raise AofLoadError(f"Bad file format reading the append only file at offset "
                               f"{exc.offset}: {exc.reason}") from None
        if isinstance(reader, FramedReader):
            self.format = reader.header.describe()
        return reader

    def _replay(self, reader: RecordReader | FramedReader
                ) -> Generator[None, None, FormatError | None]:
        """Apply every record. Returns the damage found, if `aof-load-corrupt
        truncate` says to load up to it; raises AofLoadError otherwise."""
        apply = self._apply
        count = 0
        try:
            for offset, args in reader:
                apply(offset, args)
                count += 1
                if count == RECORDS_PER_SLICE:
                    count = 0
                    self.loaded_bytes = reader.pos
                    yield
        except FormatError as exc:
            if self.load_corrupt == "truncate":
                return exc
            raise AofLoadError(
                f"Bad file format reading the append only file at offset {exc.offset}: "
                f"{exc.reason}. Make a backup of your AOF file, then use "
                f"disq-check-aof --fix {self.path}, or set 'aof-load-corrupt truncate' "
                "to load the records before that offset and cut the file there") from None
        self.loaded_bytes = reader.pos
        return None

    def _apply(self, offset: int, args: list[bytes]) -> None:
        name = args[0].upper()
        if name == b"LOADJOB" and 2 <= len(args) <= 3:
            self._load_job(offset, args[1], args[2] if len(args) == 3 else None)
        elif name in (b"CRONSET", b"QPOLICYSET") and len(args) == 2:
            entry = (cronset_schedule if name == b"CRONSET" else qpolicyset_policy)(args[1])
            if entry is None:
                raise AofLoadError(f"Unrecoverable error loading AOF: corrupted "
                                   f"{name.decode()} data at offset {offset}")
            if isinstance(entry, QueuePolicy):
                self.node.load_policy(entry, now_ms())
            else:
                self.node.wakeups.load_schedule(entry, now_ms())
        elif name == b"LOADRESULT":
            end = loadresult_end(args, offset)
            now = now_ms()
            end.expires = min(end.expires, now + end.ttl)
            self.node.load_result(end, now)
        elif name == b"FLUSHRESULTS":
            if len(args) != 1:
                raise FormatError(offset, "FLUSHRESULTS with arguments")
            self.node.ends.clear()
        elif name == b"DELJOB" and len(args) >= 2:
            node = self.node
            for job_id in args[1:]:
                job = node.lookup(job_id)
                if job is not None:
                    node.unregister(job)
        else:
            raise AofLoadError(f"Unknown command '{args[0][:64].decode('latin-1')}' "
                               f"reading the append only file at offset {offset}")

    def _load_job(self, offset: int, payload: bytes, ext: bytes | None) -> None:
        try:
            job = deserialize_job(payload, self.known_ids)
            if ext is not None:  # a job using disq's extensions (serialize_ext)
                job.ext = deserialize_ext(ext)
        except CorruptJob as exc:  # (aof-load-corrupt decides, as for other damage)
            raise FormatError(offset, f"corrupted LOADJOB data: {exc}") from None
        if job.state not in (ACTIVE, QUEUED):
            raise FormatError(offset, f"a LOADJOB record in state {job.state}")
        node = self.node
        now = now_ms()
        if job.etime <= now:
            return  # expired while the node was down
        enqueue = job.state == QUEUED and self.enqueue_jobs
        lifecycle.loaded(job)
        delivered = job.nodes_delivered
        if delivered is not None:
            if len(delivered) == 0 or delivered == {node.id}:
                job.nodes_delivered = None  # only this node holds it: the compact form
            else:
                job.nodes_delivered = with_holders(delivered, (node.id,))
        queue = node.queues.get(job.queue)
        if queue is not None:
            job.queue = queue.name  # one name object per queue
        if job.retry:
            job.flags |= BCAST_WILLQUEUE
            job.qtime = node.first_requeue_time(job, now)
        else:
            job.qtime = 0
        if not node.register(job):
            return  # known already: the first record wins, as in Disque
        self.jobs_loaded += 1
        if job_orderkey(job) is not None:
            enqueue = False  # an ORDERKEY's: its owner is not known yet (after its RETRY)
        if not (enqueue and node.enqueue(job, nack=False, now=now)):
            node.update_awake(job)

    def _truncate_damage(self, damage: FormatError, at: int) -> None:
        """aof-load-corrupt truncate: the records before the damage are loaded; the
        file is cut at the start of its record (of its frame, in a framed file), so the
        node appends whole records after them."""
        log.warning("!!! Damaged record in the AOF at offset %d: %s !!!", damage.offset,
                    damage.reason)
        log.warning("!!! aof-load-corrupt truncate: the records before it are loaded, "
                    "the file is truncated at offset %d (%d bytes dropped) !!!",
                    at, self.total_bytes - at)
        self._cut(at)

    def _cut(self, offset: int) -> None:
        try:
            os.truncate(self.path, offset)
        except OSError as exc:
            raise AofLoadError(f"Error truncating the AOF file: {exc.strerror}") from None
        self.size_after = offset

    def _truncate(self, valid_up_to: int, cut_off: str) -> None:
        if not self.load_truncated:
            raise AofLoadError(
                f"Unexpected end of file reading the append only file ({cut_off} at offset "
                f"{valid_up_to}). You can: 1) Make a backup of your AOF file, then use "
                f"disq-check-aof --fix {self.path}. 2) Alternatively you can set the "
                "'aof-load-truncated' configuration option to yes and restart the server.")
        log.warning("!!! Warning: short read while loading the AOF file !!!")
        log.warning("!!! Truncating the AOF at offset %d (the last whole record ends "
                    "there; after it: %s) !!!", valid_up_to, cut_off)
        self._cut(valid_up_to)
        log.warning("AOF loaded anyway because aof-load-truncated is enabled")
