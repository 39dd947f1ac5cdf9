"""One partition written as jobs: what runs in each Spark task, without Spark.

`PartitionWriter.write(rows)` turns rows into bodies and DEDUP keys, sends them to one
node as pipelined ADDJOBs, `batch_size` per write, and retries what failed for a
passing reason: a broken connection sends the batch again to the next node, and the
jobs a node refused for now (-NOREPL, -LOADING, -LEAVING, -PAUSED, -MAXLEN, -OOM) are
sent again after a back-off (disq_client.retry: the policy and the transient errors the
client and its worker use too). With DEDUP keys (the default) sending a job again never
adds it twice. Rows that can never become jobs (a null body, a body over the size
limit, a body of a type that has no encoding, or a server error that is not
transient) are counted as bad rows, with a few examples, never dropped silently.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from disq_client.client import Connection, ConnectionSettings
from disq_client.commands import addjob_options, encode_addjobs
from disq_client.protocol import ErrorReply, parse_address
from disq_client.retry import (
    CONNECTION_ERRORS,
    MOVE_ON_CODES,
    TRANSIENT_CODES,
    RetryPolicy,
    error_code,
)

MAX_EXAMPLES = 5
# a connection that broke, timed out, or failed below the client (a socket option)
SEND_ERRORS = (*CONNECTION_ERRORS, OSError)

Body = Callable[[Any], Any] | str | int  # a function of the row, or its column (name)
Key = Callable[[Any], Any] | str | int | None


class WriteError(RuntimeError):
    """A partition could not be written within its retries (the Spark task fails, and
    Spark runs it again: with DEDUP keys that adds nothing twice)."""


@dataclass
class WriteStats:
    """What writing some partitions did. Added together with `+` (a Spark
    accumulator): `added` counts the rows that have their job in the cluster (a row
    retried after a task failure counts once), `bad_rows` the rows that cannot become
    jobs, with up to MAX_EXAMPLES examples `(row key or position, reason)`."""

    added: int = 0
    bad_rows: int = 0
    bad_examples: list[tuple[str, str]] = field(default_factory=list)
    retries: int = 0  # batches or jobs sent again after a transient error
    partitions: int = 0

    def __add__(self, other: WriteStats) -> WriteStats:
        return WriteStats(self.added + other.added, self.bad_rows + other.bad_rows,
                          (self.bad_examples + other.bad_examples)[:MAX_EXAMPLES],
                          self.retries + other.retries, self.partitions + other.partitions)

    def bad(self, where: str, reason: str) -> None:
        self.bad_rows += 1
        if len(self.bad_examples) < MAX_EXAMPLES:
            self.bad_examples.append((where, reason))


@dataclass
class WriteOptions:
    """Everything a task needs; pickled to the executors with the partition function."""

    queue: str
    nodes: Sequence[str]
    body: Body
    key: Key = None
    job_name: str = ""
    dedup: bool = True
    replicate: int | None = None
    retry: int | None = None
    ttl: int | None = None
    delay: int | None = None
    async_: bool = False
    timeout_ms: int = 10_000  # ADDJOB's replication timeout
    batch_size: int = 1000
    pipeline: int = 2  # batches in flight per connection
    max_body_bytes: int = 1 << 20
    password: str | None = None
    max_attempts: int = 10  # per batch, over every node
    backoff_s: float = 0.05  # first back-off, doubled each time up to backoff_max_s
    backoff_max_s: float = 2.0
    socket_timeout_s: float = 30.0

    def retry_policy(self) -> RetryPolicy:
        """Resending a batch: `max_attempts` sends in all, exponential back-off between
        them (from backoff_s to backoff_max_s, ±50 % jitter)."""
        return RetryPolicy(max_attempts=max(self.max_attempts, 1), base_delay=self.backoff_s,
                           max_delay=self.backoff_max_s)


def encode_body(value: Any) -> bytes | None:
    """A column value (or what a body function returned) as a job body: bytes as they
    are, text as UTF-8, anything else as JSON; None for a null."""
    if value is None:
        return None
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


class PartitionWriter:
    """Writes one partition. Node `partition % len(nodes)` first, the others in turn
    when it cannot be reached."""

    def __init__(self, options: WriteOptions, partition: int) -> None:
        if not options.nodes:
            raise ValueError("write_jobs needs at least one disq node")
        self.o = options
        self.partition = partition
        self.addrs = [parse_address(n) for n in options.nodes]
        self.node_index = partition % len(self.addrs)
        self.conns: dict[int, Connection] = {}
        self.stats = WriteStats(partitions=1)
        self.key_prefix = row_key_prefix(options.job_name, options.queue, partition)
        self.inflight: deque[tuple[list[bytes], list[bytes]]] = deque()  # sent, unread
        self._flush_then_move = False  # a node said -LEAVING/-LOADING: use the next one
        self.options = addjob_options(options.timeout_ms, options.replicate, options.delay,
                                      options.retry, options.ttl, None, options.async_)
        self.backoff = options.retry_policy()
        # how long to wait for a batch's replies: the socket timeout, plus the time
        # ADDJOB may wait for its copies (a DEDUP check may add up to 2 s)
        self.reply_wait = options.timeout_ms / 1000 + 2.0

    # -- rows -> (body, key) --------------------------------------------------------------
    def write(self, rows: Iterable[Any]) -> WriteStats:
        o = self.o
        batch_bodies: list[bytes] = []
        batch_keys: list[bytes] = []
        for index, row in enumerate(rows):
            key = self._key(row, index)
            if key is None:
                continue
            try:
                body = encode_body(_field(row, o.body))
            except Exception as exc:  # a body function that fails on this row
                self.stats.bad(self._where(index), f"body: {exc!r}"[:200])
                continue
            if body is None:
                self.stats.bad(self._where(index), "null body")
                continue
            if len(body) > o.max_body_bytes:
                self.stats.bad(self._where(index),
                               f"body of {len(body)} bytes > max_body_bytes {o.max_body_bytes}")
                continue
            batch_bodies.append(body)
            batch_keys.append(key)
            if len(batch_bodies) >= o.batch_size:
                self._submit(batch_bodies, batch_keys)
                batch_bodies, batch_keys = [], []
        if batch_bodies:
            self._submit(batch_bodies, batch_keys)
        self._flush()
        self.close()
        return self.stats

    def _key(self, row: Any, index: int) -> bytes | None:
        o = self.o
        if o.key is None:
            return row_key(self.key_prefix, index)
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
    def _submit(self, bodies: list[bytes], keys: list[bytes]) -> None:
        """Send a batch without waiting for its replies: up to `pipeline` batches are in
        flight on the connection, so the node never waits for this task between
        batches. The oldest batch's replies are read when the window is full."""
        while len(self.inflight) >= self.o.pipeline:
            self._collect_oldest()
        try:
            self._connection().send(self._encode(bodies, keys))
        except SEND_ERRORS as exc:
            self._resend([*self._lost(), (bodies, keys)], str(exc))
            return
        self.inflight.append((bodies, keys))

    def _flush(self) -> None:
        while self.inflight:
            self._collect_oldest()

    def _collect_oldest(self) -> None:
        bodies, keys = self.inflight[0]
        try:
            replies = self._connection().read_many(len(bodies), self.reply_wait)
        except SEND_ERRORS as exc:
            self._resend(self._lost(), str(exc))
            return
        self.inflight.popleft()
        failed = self._tally(bodies, keys, replies)
        if failed is not None:  # the batches behind it are answered first
            pile = [failed[:2]]
            while self.inflight:
                bodies, keys = self.inflight[0]
                try:
                    replies = self._connection().read_many(len(bodies), self.reply_wait)
                except SEND_ERRORS:
                    pile += self._lost()
                    break
                self.inflight.popleft()
                more = self._tally(bodies, keys, replies)
                if more is not None:
                    pile.append(more[:2])
            self._resend(pile, failed[2])

    def _lost(self) -> list[tuple[list[bytes], list[bytes]]]:
        """The connection broke: every batch in flight goes to the next node."""
        lost = list(self.inflight)
        self.inflight.clear()
        self._next_node()
        return lost

    def _tally(self, bodies: list[bytes], keys: list[bytes], replies: list[object]
               ) -> tuple[list[bytes], list[bytes], str] | None:
        """Count a batch's replies; the jobs to send again and the last reason, if any."""
        retry_bodies: list[bytes] = []
        retry_keys: list[bytes] = []
        failure = ""
        move_on = False
        for body, key, reply in zip(bodies, keys, replies, strict=True):
            if not isinstance(reply, ErrorReply):
                self.stats.added += 1
                continue
            message = str(reply.args[0]) if reply.args else "ERR"
            code = error_code(message)
            if code in TRANSIENT_CODES:
                retry_bodies.append(body)
                retry_keys.append(key)
                failure = message
                move_on = move_on or code in MOVE_ON_CODES
            else:
                self.stats.bad(f"partition {self.partition} key {key.decode()}", message[:200])
        if move_on:
            self._flush_then_move = True
        if not retry_bodies:
            return None
        return retry_bodies, retry_keys, failure

    def _resend(self, pile: list[tuple[list[bytes], list[bytes]]], failure: str) -> None:
        """Send failed batches again, one at a time, after a back-off each round, until
        every job is added or bad; WriteError once the retry policy gives up (past
        max_attempts). Nothing is in flight."""
        if self._flush_then_move:
            self._flush_then_move = False
            self._next_node()
        for bodies, keys in pile:
            attempts = self.backoff.attempts()
            while bodies:
                pause = attempts.failed()  # the last send of these jobs failed
                if pause is None:
                    raise WriteError(
                        f"partition {self.partition}: {len(bodies)} jobs not added after "
                        f"{attempts.failures} attempts, last error: {failure}")
                self.stats.retries += 1
                time.sleep(pause)
                try:
                    conn = self._connection()
                    conn.send(self._encode(bodies, keys))
                    replies = conn.read_many(len(bodies), self.reply_wait)
                except SEND_ERRORS as exc:
                    failure = str(exc)
                    self._next_node()
                    continue
                failed = self._tally(bodies, keys, replies)
                if self._flush_then_move:
                    self._flush_then_move = False
                    self._next_node()
                if failed is None:
                    break
                bodies, keys, failure = failed

    def _encode(self, bodies: list[bytes], keys: list[bytes]) -> bytes:
        return b"".join(encode_addjobs(self.o.queue, bodies, self.options,
                                       keys if self.o.dedup else None))

    def _connection(self) -> Connection:
        conn = self.conns.get(self.node_index)
        if conn is None:
            conn = self.conns[self.node_index] = Connection(
                self.addrs[self.node_index], ConnectionSettings(
                    timeout=self.o.socket_timeout_s, password=self.o.password))
        return conn

    def _next_node(self) -> None:
        conn = self.conns.pop(self.node_index, None)
        if conn is not None:
            conn.close()
        self.node_index = (self.node_index + 1) % len(self.addrs)

    def close(self) -> None:
        for conn in self.conns.values():
            conn.close()
        self.conns.clear()
