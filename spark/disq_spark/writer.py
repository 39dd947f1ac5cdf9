"""One partition written as jobs: what runs in each Spark task, without Spark.

`PartitionWriter.write(rows)` turns rows into bodies and DEDUP keys and sends them as
pipelined ADDJOBS requests (disq's batch of ADDJOBs: one request and one array reply a
batch; one ADDJOB a row when rows have their own AT, PRIORITY or GROUP, or with `bulk`
off), `batch_size` jobs per write and `pipeline` writes in flight, over the
connection a `disq_client.Client` gives: the client chooses the node (the partition's
own first, `ClusterView.prefer`, then by HELLO priority and recent failures), and when
a connection breaks the batches in flight go to the next node it picks. The writer
retries the jobs a node refused for now (-NOREPL, -LOADING, -LEAVING, -PAUSED, -MAXLEN, -OOM) after
a back-off (disq_client.retry: the policy and the transient errors the client and its
worker use too), and moves on from a node that is leaving or loading. With DEDUP keys
(the default) sending a job again never adds it twice. Rows that can never become jobs
(a null body, a body over the size limit, a body of a type that has no encoding, a
null key, or a server error that is not transient) are counted as bad rows, with a
few examples, never dropped silently.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import operator
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field, fields
from datetime import datetime
from typing import TYPE_CHECKING, Any

from disq_client.client import Client, Connection
from disq_client.commands import addjob_options, each_job, unix_ms
from disq_client.durations import job_durations
from disq_client.protocol import ErrorReply, to_bytes
from disq_client.retry import (
    CONNECTION_ERRORS,
    MOVE_ON_CODES,
    TRANSIENT_CODES,
    RetryPolicy,
    error_code,
)
from disq_client.spec import MAX_ADDJOBS, MAX_PRIORITY, MIN_PRIORITY

from disq_spark.batches import Batch, Job, rows_of

if TYPE_CHECKING:
    from disq_spark.arrow import ArrowCommands

MAX_EXAMPLES = 5
# a connection that broke, timed out, or failed below the client (a socket option)
SEND_ERRORS = (*CONNECTION_ERRORS, OSError)

Field = Callable[[Any], Any] | str | int  # a function of the row, or its column (name)
Body = Field
Key = Field | None


class WriteError(RuntimeError):
    """A partition could not be written within its retries (the Spark task fails, and
    Spark runs it again: with DEDUP keys that adds nothing twice)."""


@dataclass
class WriteStats:
    """What writing some partitions did. Added together with `+` (a Spark
    accumulator, or the commit messages of a write): `added` counts the rows that have
    their job in the cluster (a row retried after a task failure counts once),
    `bad_rows` the rows that cannot become jobs, with up to MAX_EXAMPLES examples
    `(row key or position, reason)`."""

    added: int = 0
    bad_rows: int = 0
    bad_examples: list[tuple[str, str]] = field(default_factory=list)
    retries: int = 0  # batches or jobs sent again after an error
    partitions: int = 0

    def __add__(self, other: WriteStats) -> WriteStats:
        return WriteStats(self.added + other.added, self.bad_rows + other.bad_rows,
                          (self.bad_examples + other.bad_examples)[:MAX_EXAMPLES],
                          self.retries + other.retries, self.partitions + other.partitions)

    def bad(self, where: str, reason: str) -> None:
        self.bad_rows += 1
        if len(self.bad_examples) < MAX_EXAMPLES:
            self.bad_examples.append((where, reason))

    def as_dict(self) -> dict[str, Any]:
        return {"added": self.added, "bad_rows": self.bad_rows,
                "bad_examples": [list(e) for e in self.bad_examples],
                "retries": self.retries, "partitions": self.partitions}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> WriteStats:
        return cls(data["added"], data["bad_rows"],
                   [(str(w), str(r)) for w, r in data["bad_examples"]], data["retries"],
                   data["partitions"])


@dataclass
class ConnectOptions:
    """How the executors and the driver reach the nodes: the `disq_client.Client`
    options (`password`, TLS) and its timeouts. Every duration, here and in the
    options that extend these, is an int of milliseconds named `*_ms` (`check_ms`)."""

    nodes: Sequence[str]
    password: str | None = None
    ssl: bool = False
    ssl_ca_certs: str | None = None
    ssl_certfile: str | None = None
    ssl_keyfile: str | None = None
    ssl_check_hostname: bool = True
    socket_timeout_ms: int = 30_000  # 0: no limit
    connect_timeout_ms: int = 5_000  # 0: no limit

    def client(self, seeds: Sequence[str] | None = None, *,
               switch_after_jobs: int = 0) -> Client:
        """A Client of `seeds` (all the nodes by default) that fails over to any node
        of the cluster: as many retries as nodes given."""
        nodes = list(seeds if seeds is not None else self.nodes)
        return Client(nodes, password=self.password,
                      timeout_ms=self.socket_timeout_ms,
                      connect_timeout_ms=self.connect_timeout_ms,
                      switch_after_jobs=switch_after_jobs, retries=max(len(self.nodes), 1),
                      ssl=self.ssl, ssl_ca_certs=self.ssl_ca_certs,
                      ssl_certfile=self.ssl_certfile, ssl_keyfile=self.ssl_keyfile,
                      ssl_check_hostname=self.ssl_check_hostname)

    def check_ms(self) -> None:
        """ValueError for a duration (a field named `*_ms`) that is not a whole number
        of milliseconds >= 0 (None: not given)."""
        for f in fields(self):
            value = getattr(self, f.name)
            if not f.name.endswith("_ms") or value is None:
                continue
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ValueError(f"disq: {f.name} must be a whole number of milliseconds "
                                 f">= 0, not {value!r}")


@dataclass
class WriteOptions(ConnectOptions):
    """Everything a task needs; pickled to the executors with the partition function.
    `body`, `key`, `at`, `priority_field` and `group_field` are columns (index or
    name) or functions of the row; the other ADDJOB options are the same for every
    job."""

    queue: str = ""
    body: Body = "body"
    key: Key = None
    job_name: str = ""
    dedup: bool = True
    replicate: int | None = None
    retry_ms: int | None = None  # sent as RETRY, whole seconds rounded up (wire_seconds)
    ttl_ms: int | None = None  # sent as TTL, the same way
    delay_ms: int | None = None  # DELAY if whole seconds, else DELAY-MS (disq_client.durations)
    priority: int | None = None
    group: str | None = None
    max_deliveries: int | None = None
    maxlen: int | None = None
    at: Key = None  # per row: a datetime or Unix ms (None: no AT for that row)
    priority_field: Key = None  # per row: 0..255 (None: the `priority` option)
    group_field: Key = None  # per row: a fairness group (None: the `group` option)
    async_: bool = False
    timeout_ms: int = 10_000  # ADDJOB's replication timeout
    batch_size: int = 1000
    pipeline: int = 2  # batches in flight per task
    bulk: bool = True  # a batch as one ADDJOBS (not with per-row options)
    max_body_bytes: int = 1 << 20
    max_attempts: int = 10  # per batch, over every node
    backoff_ms: int = 50  # first back-off, doubled each time up to backoff_max_ms
    backoff_max_ms: int = 2_000

    def retry_policy(self) -> RetryPolicy:
        """Resending a batch: `max_attempts` sends in all, exponential back-off between
        them (from backoff_ms to backoff_max_ms, ±50 % jitter)."""
        return RetryPolicy(max_attempts=max(self.max_attempts, 1),
                           base_delay=self.backoff_ms / 1000,
                           max_delay=self.backoff_max_ms / 1000)

    def check(self) -> None:
        """Raise ValueError for options that cannot work (on the driver, before any
        task runs)."""
        if not self.nodes:
            raise ValueError("disq: give at least one node (option nodes)")
        if not self.queue:
            raise ValueError("disq: give the queue (option queue)")
        self.check_ms()
        if self.delay_ms is not None and self.at is not None:
            raise ValueError("disq: delay_ms and at are mutually exclusive")
        if not 1 <= self.batch_size <= MAX_ADDJOBS:
            raise ValueError(f"disq: batch_size must be 1..{MAX_ADDJOBS}")
        if self.priority is not None and not MIN_PRIORITY <= self.priority <= MAX_PRIORITY:
            raise ValueError(f"disq: priority must be {MIN_PRIORITY}..{MAX_PRIORITY}")


def encode_body(value: Any) -> bytes | None:
    """A column value (or what a body function returned) as a job body: bytes as they
    are, text as UTF-8, anything else as JSON; None for a null."""
    kind = type(value)  # the usual cases first: this runs once a row
    if kind is str:
        return value.encode("utf-8", "surrogatepass")  # type: ignore[no-any-return]
    if kind is bytes or value is None:
        return value  # type: ignore[no-any-return]
    if isinstance(value, bytes):
        return value
    if isinstance(value, bytearray | memoryview):
        return bytes(value)
    if isinstance(value, str):
        return value.encode("utf-8", "surrogatepass")
    if hasattr(value, "asDict"):  # a pyspark Row
        value = value.asDict(recursive=True)
    return json.dumps(value, default=str, separators=(",", ":")).encode()


def row_key_prefix(job_name: str, queue: str, partition: int) -> bytes:
    """What the DEDUP keys of a partition's rows share: a hash of the write's job name,
    the queue and the partition (80 bits: partitions of one write do not collide)."""
    data = f"{job_name}\0{queue}\0{partition}".encode()
    return b"s:" + hashlib.blake2b(data, digest_size=10).hexdigest().encode() + b":"


def row_key(prefix: bytes, index: int) -> bytes:
    """The DEDUP key of the `index`-th row of a partition (`row_key_prefix`): the same
    on every attempt of the task, as long as the partition's rows come in the same
    order. No hash per row: it is Spark's CPU, on the machine the nodes run on."""
    return b"%s%x" % (prefix, index)


def user_key(job_name: str, value: Any) -> bytes:
    """The DEDUP key from a user's key column or function (hashed with the job name,
    so any value fits the server's 256-byte limit)."""
    raw = value if isinstance(value, bytes) else str(value).encode("utf-8", "surrogatepass")
    return b"u:" + hashlib.blake2b(job_name.encode() + b"\0" + raw,
                                   digest_size=15).hexdigest().encode()


def _field(row: Any, getter: Callable[[Any], Any] | str | int) -> Any:
    if callable(getter):
        return getter(row)
    return row[getter]


def _arg(token: bytes, value: bytes) -> bytes:
    return b"$%d\r\n%s\r\n$%d\r\n%s\r\n" % (len(token), token, len(value), value)


def _getter(field: Field) -> Callable[[Any], Any]:
    """A column (index or name) or a function of the row, as a function of the row."""
    return field if callable(field) else operator.itemgetter(field)


class PartitionWriter:
    """Writes one partition, through a Client that starts on node
    `partition % len(nodes)` and fails over to the others."""

    def __init__(self, options: WriteOptions, partition: int,
                 key_prefix: bytes | None = None) -> None:
        options.check()
        self.o = options
        self.partition = partition
        self.client = options.client()
        self.client.view.prefer(options.nodes[partition % len(options.nodes)])
        self.stats = WriteStats(partitions=1)
        self.key_prefix = key_prefix if key_prefix is not None else row_key_prefix(
            options.job_name, options.queue, partition)
        wire = job_durations(delay_ms=options.delay_ms, retry_ms=options.retry_ms,
                             ttl_ms=options.ttl_ms)
        tail = [to_bytes(a) for a in addjob_options(
            options.timeout_ms, options.replicate, wire.delay, wire.retry, wire.ttl,
            options.maxlen, options.async_, delay_ms=wire.delay_ms,
            priority=options.priority if options.priority_field is None else None,
            group=options.group if options.group_field is None else None,
            max_deliveries=options.max_deliveries)]
        self._argc = 3 + len(tail) + (2 if options.dedup else 0)
        self._body = _getter(options.body)
        self._suffix = b"".join(b"$%d\r\n%s\r\n" % (len(a), a) for a in tail)
        q = options.queue.encode("utf-8", "surrogateescape")
        self._queue = b"$%d\r\n%s\r\n" % (len(q), q)
        self._per_row = (options.at is not None or options.priority_field is not None
                         or options.group_field is not None)
        # ADDJOBS: a job is its arguments ([key] body); a batch's request is the head
        # (argument count: `_bulk_argc` + `_job_argc` a job) and its jobs joined
        self.bulk = options.bulk and not self._per_row
        self._bulk_argc = 2 + len(tail) + 1
        self._job_argc = 2 if options.dedup else 1
        self._bulk_head = b"$7\r\nADDJOBS\r\n%s%s%s" % (
            self._queue, self._suffix,
            b"$10\r\nDEDUP-JOBS\r\n" if options.dedup else b"$4\r\nJOBS\r\n")
        self.backoff = options.retry_policy()
        # batches sent, replies not read yet, with the connection they went on
        self.inflight: deque[tuple[Connection, Batch]] = deque()
        self._move_on = False  # a node said -LEAVING/-LOADING: the next batch elsewhere
        # how long to wait for a batch's replies beyond the socket timeout: the time a
        # synchronous ADDJOB may wait for its copies (a DEDUP check may add up to 2 s)
        self.reply_wait = 0.0 if options.async_ else options.timeout_ms / 1000 + 2.0

    # -- rows -> jobs ---------------------------------------------------------------------
    def write(self, rows: Iterable[Any]) -> WriteStats:
        """Write the rows (tuples, dicts or Rows, as the body and other fields take
        them), in batches of batch_size."""
        return self._send_all(self._row_batches(rows))

    def write_arrow(self, batches: Iterable[Any]) -> WriteStats:
        """Write Arrow record batches (a data source task's rows; columns by position):
        joined by Arrow's kernels when each job is its body and a generated key
        (disq_spark.batches), else row by row."""
        it = iter(batches)
        first = next(it, None)
        chained = itertools.chain([first] if first is not None else [], it)
        commands = self._arrow_commands(first.schema) if first is not None else None
        if commands is None:
            return self.write(rows_of(chained))
        return self._send_all(self._arrow_batches(chained, commands))

    def _send_all(self, batches: Iterator[Batch]) -> WriteStats:
        try:
            for batch in batches:
                self._submit(batch)
            self._flush()
        finally:
            self.close()
        return self.stats

    def _row_batches(self, rows: Iterable[Any]) -> Iterator[Batch]:
        jobs: list[Job] = []
        size = self.o.batch_size
        for index, row in enumerate(rows):
            job = self._job(row, index)
            if job is None:
                continue
            jobs.append(job)
            if len(jobs) >= size:
                yield Batch.of(jobs)
                jobs = []
        if jobs:
            yield Batch.of(jobs)

    def _arrow_commands(self, schema: Any) -> ArrowCommands | None:
        """The Arrow encoder of this write's jobs, or None if a row needs Python (a
        key column, a function, per-row options, a body column that is not bytes)."""
        from disq_spark.arrow import ArrowCommands

        o = self.o
        body = o.body if isinstance(o.body, int) else (
            schema.get_field_index(o.body) if isinstance(o.body, str) else -1)
        if (o.key is not None or self._per_row or not 0 <= body < len(schema)
                or not ArrowCommands.fits(schema.field(body).type)):
            return None
        key_prefix = self.key_prefix if o.dedup else None
        if self.bulk:
            return ArrowCommands(body, schema.field(body).type, b"$", b"", key_prefix,
                                 o.max_body_bytes, key_first=True)
        return ArrowCommands(body, schema.field(body).type,
                             b"*%d\r\n$6\r\nADDJOB\r\n%s$" % (self._argc, self._queue),
                             self._suffix, key_prefix, o.max_body_bytes)

    def _arrow_batches(self, batches: Iterable[Any], commands: ArrowCommands
                       ) -> Iterator[Batch]:
        size = self.o.batch_size
        start = 0
        for record_batch in batches:
            batch, bad = commands.encode(record_batch.column(commands.column), start)
            for position, reason in bad:
                self.stats.bad(self._where(position), reason)
            if batch is not None:
                yield from batch.split(size)
            start += record_batch.num_rows

    def _job(self, row: Any, index: int) -> Job | None:
        key = self._key(row, index)
        if key is None:
            return None
        try:
            body = encode_body(self._body(row))
        except Exception as exc:  # a body function that fails on this row
            self.stats.bad(self._where(index), f"body: {exc!r}"[:200])
            return None
        if body is None:
            self.stats.bad(self._where(index), "null body")
            return None
        if len(body) > self.o.max_body_bytes:
            self.stats.bad(self._where(index),
                           f"body of {len(body)} bytes > max_body_bytes {self.o.max_body_bytes}")
            return None
        extra, count = b"", 0
        if self._per_row:
            try:
                extra, count = self._extra(row)
            except Exception as exc:
                self.stats.bad(self._where(index), f"options: {exc!r}"[:200])
                return None
        if self.bulk:  # ADDJOBS's arguments: [key] body
            return b"%s$%d\r\n%s\r\n" % (
                b"$%d\r\n%s\r\n" % (len(key), key) if self.o.dedup else b"", len(body),
                body), index
        # ADDJOB queue body <timeout and shared options> <the row's options> [DEDUP key]
        return b"*%d\r\n$6\r\nADDJOB\r\n%s$%d\r\n%s\r\n%s%s%s" % (
            self._argc + count, self._queue, len(body), body, self._suffix, extra,
            b"$5\r\nDEDUP\r\n$%d\r\n%s\r\n" % (len(key), key) if self.o.dedup else b""), index

    def _extra(self, row: Any) -> tuple[bytes, int]:
        """The row's own ADDJOB options: AT, PRIORITY, GROUP from its columns."""
        o = self.o
        parts = []
        if o.at is not None:
            at = _field(row, o.at)
            if at is not None:
                if not isinstance(at, datetime | int):
                    raise TypeError(f"at must be a timestamp or Unix ms, not {at!r}")
                parts.append(_arg(b"AT", b"%d" % unix_ms(at)))
        for token, getter, default in ((b"PRIORITY", o.priority_field, o.priority),
                                       (b"GROUP", o.group_field, o.group)):
            if getter is None:
                continue
            value = _field(row, getter)
            if value is None:
                value = default  # a null: the option's value, if any
            if value is not None:
                parts.append(_arg(token, b"%d" % int(value) if token == b"PRIORITY"
                                  else to_bytes(value)))
        return b"".join(parts), 2 * len(parts)

    def _key(self, row: Any, index: int) -> bytes | None:
        o = self.o
        if o.key is None:
            return b"%s%x" % (self.key_prefix, index)  # row_key, inlined: once a row
        try:
            value = _field(row, o.key)
        except Exception as exc:
            self.stats.bad(self._where(index), f"key: {exc!r}"[:200])
            return None
        if value is None:
            self.stats.bad(self._where(index), "null key")
            return None
        return user_key(o.job_name, value)

    def _where(self, index: int) -> str:
        return f"partition {self.partition} row {index}"

    # -- sending ----------------------------------------------------------------------------
    def _submit(self, batch: Batch) -> None:
        """Send a batch without waiting for its replies: up to `pipeline` batches are in
        flight on the connection, so the node never waits for this task between
        batches. The oldest batch's replies are read when the window is full."""
        while len(self.inflight) >= self.o.pipeline:
            self._collect_oldest()
        try:
            conn = self.client.connection()
            conn.send(self._request(batch.payload, batch.size) if self.bulk
                      else batch.payload)
        except SEND_ERRORS as exc:
            self._resend([*self._lost(), batch.jobs()], str(exc))
            return
        self.inflight.append((conn, batch))

    def _flush(self) -> None:
        while self.inflight:
            self._collect_oldest()

    def _read(self) -> list[object]:
        """The oldest batch's replies, on the connection it was sent on."""
        conn, batch = self.inflight[0]
        if self.bulk:
            return each_job(conn.read_many(1, self.reply_wait)[0], batch.size)
        return conn.read_many(batch.size, self.reply_wait)

    def _request(self, jobs: bytes, count: int) -> bytes:
        """The ADDJOBS of `count` jobs (their arguments joined: `jobs`)."""
        return b"*%d\r\n%s%s" % (self._bulk_argc + count * self._job_argc, self._bulk_head,
                                  jobs)

    def _collect_oldest(self) -> None:
        try:
            replies = self._read()
        except SEND_ERRORS as exc:
            self._resend(self._lost(), str(exc))
            return
        _, batch = self.inflight.popleft()
        failed, failure = self._tally(batch.job, batch.size, replies)
        if failed:  # the batches behind it are answered first
            pile = [failed]
            while self.inflight:
                try:
                    replies = self._read()
                except SEND_ERRORS:
                    pile += self._lost()
                    break
                batch = self.inflight.popleft()[1]
                more, _ = self._tally(batch.job, batch.size, replies)
                if more:
                    pile.append(more)
            self._resend(pile, failure)

    def _lost(self) -> list[list[Job]]:
        """The connection broke: every batch in flight goes to the next node."""
        lost = [batch.jobs() for _, batch in self.inflight]
        conns = {conn.addr for conn, _ in self.inflight}
        self.inflight.clear()
        current = self.client.current_node
        for addr in conns | ({current} if current is not None else set()):
            self.client.failed(addr)
        return lost

    def _tally(self, job_at: Callable[[int], Job], count: int, replies: list[object]
               ) -> tuple[list[Job], str]:
        """Count the replies of `count` jobs (the i-th: `job_at(i)`, taken apart only for
        an error reply); the jobs to send again and the last reason."""
        if len(replies) != count:
            raise ValueError(f"{len(replies)} replies for {count} jobs")
        again: list[Job] = []
        failure = ""
        move_on = False
        errors = [i for i, reply in enumerate(replies) if isinstance(reply, ErrorReply)]
        self.stats.added += len(replies) - len(errors)
        for i in errors:
            job, reply = job_at(i), replies[i]
            assert isinstance(reply, ErrorReply)
            message = str(reply.args[0]) if reply.args else "ERR"
            code = error_code(message)
            if code in TRANSIENT_CODES:
                again.append(job)
                failure = message
                move_on = move_on or code in MOVE_ON_CODES
            else:
                self.stats.bad(self._where(job[1]), message[:200])
        if move_on:
            self._move_on = True
        return again, failure

    def _resend(self, pile: list[list[Job]], failure: str) -> None:
        """Send failed batches again, one at a time, after a back-off each round, until
        every job is added or bad; WriteError once the retry policy gives up (past
        max_attempts). Nothing is in flight."""
        client = self.client
        for jobs in pile:
            attempts = self.backoff.attempts()
            while jobs:
                self._leave_if_told()
                pause = attempts.failed()  # the last send of these jobs failed
                if pause is None:
                    raise WriteError(
                        f"partition {self.partition}: {len(jobs)} jobs not added after "
                        f"{attempts.failures} attempts, last error: {failure}")
                self.stats.retries += 1
                time.sleep(pause)
                failovers = client.core.failovers
                try:
                    if self.bulk:
                        replies = each_job(client.execute_pipeline(
                            [self._request(b"".join([args for args, _ in jobs]), len(jobs))],
                            self.reply_wait)[0], len(jobs))
                    else:
                        replies = client.execute_pipeline([command for command, _ in jobs],
                                                          self.reply_wait)
                except SEND_ERRORS as exc:  # no node answered, after the client's failover
                    failure = str(exc)
                    continue
                finally:
                    self.stats.retries += client.core.failovers - failovers
                jobs, why = self._tally(jobs.__getitem__, len(jobs), replies)
                failure = why or failure
        self._leave_if_told()

    def _leave_if_told(self) -> None:
        """The node answered -LEAVING or -LOADING: as HELLO would say (priority 100 for
        now), so that the next batch goes to another node."""
        if self._move_on:
            self._move_on = False
            current = self.client.current_node
            if current is not None:
                self.client.view.leaving(current)

    def close(self) -> None:
        self.client.close()
