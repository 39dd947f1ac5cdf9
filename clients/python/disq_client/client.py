"""The blocking client: sockets around the sans-I/O `ClientCore` (core.py), which makes
every choice (nodes, failover, replies); this module only connects, sends and waits."""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from datetime import datetime, timedelta
from types import TracebackType
from typing import TYPE_CHECKING, TypeVar

from . import commands as cmds
from .bodies import Body
from .cluster import ClusterView
from .commands import Cmd
from .core import (
    ADD_TIMEOUT_MS,
    BATCH_SIZE,
    DEFAULT_NODE,
    DEFAULT_SETTINGS,
    HELLO_REQUEST,
    ClientCore,
    ConnectionSettings,
    Nodes,
    seed_list,
)
from .durations import job_durations, socket_wait, to_seconds
from .errors import DisqConnectionError, DisqTimeoutError
from .protocol import (
    FEED_PIECE,
    Address,
    Arg,
    ErrorReply,
    auth_failure,
    auth_request,
    encode,
    format_address,
    new_reader,
    reply_wait,
)
from .retry import CONNECTION_ERRORS
from .tls import SSLOption, ssl_context
from .tracing import JobTracing
from .types import (
    BatchStatus,
    CronEntry,
    Hello,
    Job,
    JobEnd,
    JobInfo,
    PauseOption,
    QueuePolicy,
    QueueStat,
    RetainedJob,
)

if TYPE_CHECKING:
    from opentelemetry.trace import TracerProvider

__all__ = ["ADD_TIMEOUT_MS", "BATCH_SIZE", "DEFAULT_NODE", "Client", "ClientBase",
           "Connection", "ConnectionSettings", "Nodes", "seed_list"]

T = TypeVar("T")


class ClientBase:
    """What Client and AsyncClient share: their options and their `core` (the cluster
    view and every choice, core.py). They differ only in how they send and wait."""

    def __init__(self, nodes: Nodes = DEFAULT_NODE, *, password: str | None = None,
                 timeout_ms: int | None = None, timeout: timedelta | None = None,
                 connect_timeout_ms: int | None = None,
                 connect_timeout: timedelta | None = None, switch_after_jobs: int = 100, retries: int = 3, ssl: SSLOption = None,
                 ssl_ca_certs: str | None = None, ssl_certfile: str | None = None,
                 ssl_keyfile: str | None = None, ssl_check_hostname: bool = True,
                 tracing: bool | None = None,
                 tracer_provider: TracerProvider | None = None) -> None:
        self.core = ClientCore(nodes, switch_after_jobs=switch_after_jobs, retries=retries)
        # add_jobs sends a batch as one ADDJOBS (disq's) until a server does not know it
        # (Disque): pipelined ADDJOBs from then on
        self.bulk_adds = True
        self.settings = ConnectionSettings(
            socket_wait("timeout", timeout, timeout_ms, DEFAULT_SETTINGS.timeout),
            socket_wait("connect_timeout", connect_timeout, connect_timeout_ms,
                        DEFAULT_SETTINGS.connect_timeout), password, ssl_context(
            ssl, ca_certs=ssl_ca_certs, certfile=ssl_certfile, keyfile=ssl_keyfile,
            check_hostname=ssl_check_hostname))
        # OpenTelemetry (tracing.py): spans and trace context in jobs when it is
        # installed and a tracer provider is set; `tracing=False` switches it off
        self.tracing = JobTracing(tracing, tracer_provider)
        self._setup()

    def _setup(self) -> None:
        """The connections' state, per client kind."""

    def _drop(self, addr: Address) -> None:
        """Close the connections to `addr`."""
        raise NotImplementedError

    def _may_retry(self, addr: Address, generation: int, failures: int) -> bool:
        """A connection to `addr` broke or timed out: whether to try again (on the next
        node), unless the client was closed meanwhile or the retries are spent."""
        if self.core.closed_since(generation):
            return False
        self._drop(addr)
        return self.core.broken(addr, failures)

    @property
    def view(self) -> ClusterView:
        return self.core.view

    @property
    def retries(self) -> int:
        """Tries after the first one, each on the next node, when a node fails."""
        return self.core.retries

    @retries.setter
    def retries(self, retries: int) -> None:
        self.core.retries = retries

    @property
    def current_node(self) -> Address | None:
        return self.core.view.current

    @property
    def current_node_id(self) -> str | None:
        return self.core.view.current_id

    def __repr__(self) -> str:
        view = self.core.view
        current = format_address(view.current) if view.current else None
        return f"<{type(self).__name__} current={current} nodes={len(view.nodes)}>"


class Connection:
    """One blocking TCP connection to one node. Not thread-safe: the Client guards it.

    `timeout` bounds every wait for a reply; commands that block on the server
    (GETJOB, synchronous ADDJOB) pass how much longer they may take. A connection that
    timed out or broke is closed, since the replies that may still come would be out of
    step with the next command.
    """

    def __init__(self, addr: Address, settings: ConnectionSettings = DEFAULT_SETTINGS) -> None:
        self.addr = addr
        self.settings = settings
        self._sock: socket.socket | None = None
        self._reader = new_reader()
        self._sock_timeout: float | None = -1.0  # what the socket is set to now
        self._unfed = b""  # the last read, fed to the reader up to _unfed_at
        self._unfed_at = 0

    @property
    def connected(self) -> bool:
        return self._sock is not None

    def connect(self) -> None:
        if self._sock is not None:
            return
        settings = self.settings
        try:
            sock = socket.create_connection(self.addr, timeout=settings.connect_timeout)
            if settings.ssl_context is not None:
                try:  # the handshake, within connect_timeout
                    sock = settings.ssl_context.wrap_socket(sock, server_hostname=self.addr[0])
                except BaseException:
                    sock.close()
                    raise
        except TimeoutError as exc:
            raise DisqTimeoutError(f"connecting to {format_address(self.addr)}: timeout") \
                from exc
        except OSError as exc:
            raise DisqConnectionError(f"connecting to {format_address(self.addr)}: {exc}") \
                from exc
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
        self._sock = sock
        self._sock_timeout = settings.connect_timeout
        self._reader = new_reader()
        self._unfed, self._unfed_at = b"", 0
        if settings.password is not None:
            try:
                reply = self.request(auth_request(settings.password))
            except BaseException:
                self.close()
                raise
            error = auth_failure(reply)
            if error is not None:
                self.close()
                raise error

    def close(self) -> None:
        sock, self._sock = self._sock, None
        self._unfed, self._unfed_at = b"", 0
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)  # wakes a thread blocked reading it
            except OSError:
                pass
            sock.close()

    def execute(self, args: Sequence[Arg], extra_wait: float | None = 0.0) -> object:
        """Send one command, return its reply (an ErrorReply for an error reply).
        `extra_wait` None waits for ever (a GETJOB without TIMEOUT)."""
        return self.request(encode(args), extra_wait)

    def request(self, payload: bytes, extra_wait: float | None = 0.0) -> object:
        """Send one encoded command, return its reply."""
        self.send(payload)
        return self.read(extra_wait)

    def execute_many(self, commands: Iterable[Sequence[Arg]],
                     extra_wait: float | None = 0.0) -> list[object]:
        """Pipeline: one write for every command, then their replies in order."""
        payload = [encode(args) for args in commands]
        self.send(b"".join(payload))
        return self.read_many(len(payload), extra_wait)

    def send(self, data: bytes) -> None:
        self.connect()
        assert self._sock is not None
        try:
            self._sock.sendall(data)
        except OSError as exc:
            self.close()
            raise DisqConnectionError(f"{format_address(self.addr)}: {exc}") from exc

    def read(self, extra_wait: float | None = 0.0) -> object:
        gets = self._reader.gets
        reply = gets()
        if reply is False:
            wait = reply_wait(self.settings.timeout, extra_wait)
            while reply is False:
                self._recv(wait)
                reply = gets()
        return reply

    def read_many(self, n: int, extra_wait: float | None = 0.0) -> list[object]:
        replies: list[object] = []
        gets = self._reader.gets
        wait = reply_wait(self.settings.timeout, extra_wait)
        while True:
            reply = gets()
            while reply is not False:
                replies.append(reply)
                if len(replies) == n:
                    return replies
                reply = gets()
            self._recv(wait)

    def _recv(self, wait: float | None) -> None:
        """Feed the reader the next FEED_PIECE bytes of the last read, or else what the
        socket has, waiting at most `wait` seconds."""
        data, at = self._unfed, self._unfed_at
        if at < len(data):
            self._unfed_at = at + FEED_PIECE
            self._reader.feed(data, at, min(FEED_PIECE, len(data) - at))
            return
        sock = self._sock
        if sock is None:
            raise DisqConnectionError(f"{format_address(self.addr)}: not connected")
        if wait != self._sock_timeout:
            sock.settimeout(wait)
            self._sock_timeout = wait
        try:
            data = sock.recv(262144)
        except TimeoutError as exc:
            self.close()
            raise DisqTimeoutError(f"{format_address(self.addr)}: no reply in time") from exc
        except OSError as exc:
            self.close()
            raise DisqConnectionError(f"{format_address(self.addr)}: {exc}") from exc
        if not data:
            self.close()
            raise DisqConnectionError(f"{format_address(self.addr)}: connection closed")
        if len(data) > FEED_PIECE:
            self._unfed, self._unfed_at = data, FEED_PIECE
            self._reader.feed(data, 0, FEED_PIECE)
        else:
            self._reader.feed(data)


class Client(ClientBase):
    """A blocking client of a disq (or Disque) cluster.

    `nodes` are seed addresses ("host:port", a comma-separated string of them, or
    (host, port) tuples). The client connects to one, learns the others from HELLO,
    and sends every command to its current node; when that node stops answering (or
    says it is leaving) the command is sent again to the next node by HELLO priority.
    Retrying is safe for every command but may add a job twice if the node died after
    taking it (at-least-once). A consumer moves to the node that produced most of the
    jobs it got (see `ClusterView`).

    `timeout` bounds every wait for a reply, in seconds (GETJOB and synchronous ADDJOB
    get their own timeout on top); `password` is sent with AUTH on every connection.
    `ssl=True` (or an `ssl.SSLContext`, or any of `ssl_ca_certs`, `ssl_certfile` +
    `ssl_keyfile`) connects over TLS, to nodes' `tls-port`.
    A Client may be shared by threads: it runs one command at a time.
    """

    def _setup(self) -> None:
        self._conns: dict[Address, Connection] = {}
        self._lock = threading.RLock()

    # -- connections --------------------------------------------------------------------
    def __enter__(self) -> Client:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def close(self) -> None:
        """Close every connection. A call blocked in another thread (a GETJOB) is woken
        and raises DisqConnectionError; later calls connect again."""
        self.core.close()  # commands in flight give up instead of failing over
        for conn in list(self._conns.values()):
            conn.close()
        with self._lock:
            self._conns.clear()
            self.core.view.current = None

    def connect(self) -> Address:
        """Connect now rather than at the first command; returns the node's address."""
        with self._lock:
            return self._connection().addr

    def connection(self) -> Connection:
        """The connection to the current node, choosing and connecting to one first
        if needed, for a caller that pipelines on it itself (disq_spark's writer keeps
        batches in flight). Keep it to one thread; tell `failed()` when it breaks."""
        with self._lock:
            return self._connection()

    def failed(self, addr: Address) -> None:
        """A connection from `connection()` broke or timed out: the node goes last for
        a while (as when a command fails over, counted in `core.failovers`), and the
        next `connection()` is to another node."""
        with self._lock:
            self._drop(addr)
            self.core.view.failed(addr)
            self.core.failovers += 1

    def _connection(self) -> Connection:
        addr = self.core.view.current
        if addr is not None:
            conn = self._conns.get(addr)
            if conn is not None and conn.connected:
                return conn
        conn = self._connect_first(self.core.candidates())
        # a better node (e.g. the seed is leaving), if one answers
        return self._switch_to(self.core.better_than(conn.addr)) or conn

    def _connect_first(self, addrs: Sequence[Address]) -> Connection:
        """Connect to the first of `addrs` that answers HELLO and make it current."""
        failures = []
        for addr in addrs:
            conn = self._conns.get(addr)
            if conn is None:
                conn = self._conns[addr] = Connection(addr, self.settings)
            try:
                reply = conn.request(HELLO_REQUEST)
            except CONNECTION_ERRORS as exc:
                self.core.connect_failed(addr)
                failures.append(str(exc))
                continue
            self.core.hello_reply(addr, reply)
            return conn
        raise self.core.no_node(failures)

    def _drop(self, addr: Address) -> None:
        conn = self._conns.get(addr)
        if conn is not None:
            conn.close()

    def _switch_to(self, addrs: Sequence[Address]) -> Connection | None:
        """Move to the first of `addrs` that answers; stay where we are (None) otherwise."""
        try:
            return self._connect_first(addrs)
        except DisqConnectionError:
            return None

    # -- running commands ---------------------------------------------------------------
    def _run(self, cmd: Cmd[T]) -> T:
        core = self.core
        with self._lock:
            generation = core.generation
            failures = 0
            while True:
                conn = self._connection()
                try:
                    reply = conn.execute(cmd.args, cmd.wait)
                except CONNECTION_ERRORS:
                    failures += 1
                    if not self._may_retry(conn.addr, generation, failures):
                        raise
                    continue
                if isinstance(reply, ErrorReply):
                    failures += 1
                    core.refused(conn.addr, reply, failures)  # raises unless moving on
                    continue
                result = cmd.parse(reply)
                if cmd.gets_jobs:
                    target = core.follow(result)  # type: ignore[arg-type]
                    if target is not None:
                        self._switch_to([target])
                return result

    def _run_pipeline(self, payloads: list[bytes], wait: float | None) -> list[object]:
        """Send encoded commands with one write and read their replies; on a broken
        connection, send them all again to the next node."""
        data = b"".join(payloads)
        with self._lock:
            generation = self.core.generation
            failures = 0
            while True:
                conn = self._connection()
                try:
                    conn.send(data)
                    return conn.read_many(len(payloads), wait)
                except CONNECTION_ERRORS:
                    failures += 1
                    if not self._may_retry(conn.addr, generation, failures):
                        raise

    def execute_command(self, *args: Arg) -> object:
        """Any command, its reply as hiredis gives it (bytes, int, lists, None)."""
        return self._run(cmds.raw(args))

    def execute_pipeline(self, payloads: list[bytes],
                         extra_wait: float | None = 0.0) -> list[object]:
        """Commands already encoded in RESP (e.g. `commands.encode_addjobs`), sent in
        one write; their replies in order, error replies as `ErrorReply` values (not
        raised). A broken connection sends them all again to the next node, as any
        command: use it for commands that may run twice (ADDJOBs with DEDUP keys,
        ACKJOB). `extra_wait`: how much longer than the timeout the replies may take
        (a synchronous ADDJOB's replication timeout)."""
        return self._run_pipeline(payloads, extra_wait)

    # -- jobs ---------------------------------------------------------------------------
    def add_job(self, queue: str, body: Body, *, timeout_ms: int = ADD_TIMEOUT_MS,
                replicate: int | None = None, delay: timedelta | None = None,
                delay_ms: int | None = None, retry: timedelta | None = None,
                retry_ms: int | None = None, ttl: timedelta | None = None,
                ttl_ms: int | None = None, maxlen: int | None = None,
                async_: bool = False, dedup: str | bytes | None = None,
                at: datetime | int | None = None,
                priority: int | None = None, group: str | bytes | None = None,
                max_deliveries: int | None = None, queue_randomly: bool = False,
                unique: str | bytes | None = None, batch: str | bytes | None = None,
                after: Iterable[str | bytes] | None = None,
                attrs: Mapping[str | bytes, str | bytes] | None = None,
                orderkey: str | bytes | None = None, strict: bool = False) -> str:
        """ADDJOB; returns the job ID. `timeout_ms` bounds synchronous replication (0:
        no limit). Durations (durations.py) in ms as `delay_ms`, `retry_ms`, `ttl_ms`,
        or as timedeltas under `delay`, `retry`, `ttl`; RETRY and TTL are whole seconds
        on the wire, rounded up; a delay not of whole seconds is sent as DELAY-MS (a disq
        extension). disq's extensions: `dedup`, a
        key: if the cluster added a job with it already, that job's ID, nothing added;
        `unique`, a key: if a job added with it is still queued or running (not acked,
        not a dead letter, not deleted or expired), that job's ID, nothing added
        (not with `dedup`);
        `at` (not with a delay), when to deliver it (a datetime, naive: local
        time, or Unix ms; never before it); `priority` 0 (most urgent) .. 255 (default
        128); `group`, a fairness group (ready jobs are handed out round-robin by group);
        `max_deliveries` (1..65535), deliveries after which the job is not queued again
        but moved to its dead-letter queue (over the queue policy's). `queue_randomly`
        (QUEUE-RANDOMLY): queued on a random node among those it is replicated to.
        `batch`: a member of that batch (batch_new); `after`: parents, job IDs or batch
        IDs, the job waits until each is acked (a batch: done), and goes to its dead
        letters if one goes dead. `attrs`: attributes, key -> value (at most 16, keys
        of 1 to 64 bytes, values of at most 256), which GETJOB's `where` filters on.
        `orderkey`: the jobs of one key in the queue are delivered one at a time, in
        the order they were added (the next once the one before is acked, dead or its
        RETRY ran out); `strict`: never on a side of a partition without a majority
        (ADDJOB there fails with NOMAJORITY). With OpenTelemetry tracing (tracing.py)
        the job also carries its trace context as `traceparent` (and `tracestate`),
        unless `attrs` has them."""
        with self.tracing.publish(queue, attrs) as traced:
            return traced.published(self._run(cmds.add_job(
                queue, body, timeout_ms, replicate, job_durations(
                    delay=delay, delay_ms=delay_ms, retry=retry, retry_ms=retry_ms, ttl=ttl,
                    ttl_ms=ttl_ms), maxlen, async_, dedup, at=at, priority=priority, group=group,
                max_deliveries=max_deliveries, queue_randomly=queue_randomly, unique=unique,
                batch=batch, after=after, attrs=traced.attrs, orderkey=orderkey,
                strict=strict)))

    def add_jobs(self, queue: str, bodies: Iterable[Body], *,
                 timeout_ms: int = ADD_TIMEOUT_MS, replicate: int | None = None,
                 delay: timedelta | None = None, delay_ms: int | None = None,
                 retry: timedelta | None = None, retry_ms: int | None = None,
                 ttl: timedelta | None = None, ttl_ms: int | None = None,
                 maxlen: int | None = None, async_: bool = False,
                 batch_size: int = BATCH_SIZE,
                 dedup: Iterable[str | bytes] | None = None,
                 at: datetime | int | None = None, priority: int | None = None,
                 group: str | bytes | None = None,
                 max_deliveries: int | None = None,
                 queue_randomly: bool = False, batch: str | bytes | None = None,
                 after: Iterable[str | bytes] | None = None,
                attrs: Mapping[str | bytes, str | bytes] | None = None,
                orderkey: str | bytes | None = None, strict: bool = False) -> list[str]:
        """ADDJOB for each body, `batch_size` jobs per request: one ADDJOBS (disq's batch
        of ADDJOBs), or pipelined ADDJOBs on a server without it (Disque). Returns the
        IDs in order; if any job was refused, raises BatchError once every batch was
        sent, with each job's ID or exception in `results`. `dedup`: one DEDUP key per
        body (see add_job), which also makes sending a batch again after a broken
        connection add nothing twice. Traced as one span for all the jobs, which all
        carry its context (see add_job)."""
        with self.tracing.publish(queue, attrs, operation="ADDJOBS") as traced:
            plan = cmds.add_jobs(queue, bodies, timeout_ms, replicate, job_durations(
                delay=delay, delay_ms=delay_ms, retry=retry, retry_ms=retry_ms, ttl=ttl,
                ttl_ms=ttl_ms), maxlen, async_, batch_size, dedup, at=at,
                                 priority=priority, group=group,
                                 max_deliveries=max_deliveries, queue_randomly=queue_randomly,
                                 batch=batch, after=after, attrs=traced.attrs,
                                 orderkey=orderkey, strict=strict)
            replies: list[object] = []
            for chunk, keys in plan.chunks:
                if self.bulk_adds:  # one ADDJOBS a batch, until a server does not know it
                    reply = (self._run_pipeline(plan.bulk(chunk, keys), plan.wait))[0]
                    if not cmds.unknown_command(reply):
                        replies += cmds.each_job(reply, len(chunk))
                        continue
                    self.bulk_adds = False
                replies += self._run_pipeline(plan.pipelined(chunk, keys), plan.wait)
            return traced.published(cmds.job_ids(replies))

    def get_jobs(self, *queues: str, count: int = 1, timeout_ms: int = 0,
                 nohang: bool = False, with_counters: bool = False,
                 where: Sequence[Sequence[str | bytes | int]] = ()) -> list[Job]:
        """GETJOB: up to `count` jobs, oldest first. Blocks until a job comes unless
        `nohang`; `timeout_ms` 0 waits for ever; [] when nothing came. `where` (a disq
        extension): only jobs whose attributes (add_job's `attrs`) match every filter,
        each (key, op, value), op one of =, !=, PREFIX, <, > (numbers), or (key,
        "EXISTS"); blocked, it gets only the jobs queued later that match."""
        return self._run(cmds.get_jobs(queues, count, timeout_ms, nohang, with_counters,
                                       where))

    def get_job(self, *queues: str, timeout_ms: int = 0, nohang: bool = False,
                with_counters: bool = False) -> Job | None:
        jobs = self.get_jobs(*queues, timeout_ms=timeout_ms, nohang=nohang,
                             with_counters=with_counters)
        return jobs[0] if jobs else None

    def ack(self, *job_ids: str, result: Body | None = None) -> int:
        """ACKJOB: the number of jobs that were known and not yet acknowledged. With
        `result` (one job; a disq extension), its result is kept on the job's holders
        for `wait` (WAITJOB)."""
        return self._run(cmds.ack(job_ids, result))

    def wait(self, *job_ids: str, timeout_ms: int | None = None,
             any: bool = False) -> list[JobEnd]:
        """WAITJOB (a disq extension): block until every job (`any`: one) has ended,
        wherever it is held, or `timeout_ms`; one JobEnd per ID, in order: acked with
        its result, dead with its last error, or the state it had at the timeout."""
        return self._run(cmds.wait_jobs(job_ids, timeout_ms, any))

    def fast_ack(self, *job_ids: str) -> int:
        """FASTACK: delete the jobs everywhere without the acknowledgement protocol."""
        return self._run(cmds.ids_command("FASTACK", job_ids))

    def nack(self, *job_ids: str, delay_ms: int | None = None,
             error: str | bytes | None = None) -> int:
        """NACK: queue delivered jobs again, counting a failed attempt: at once, or after
        the queue policy's back-off, or after `delay_ms` (a disq extension). A job at its
        last delivery (MAXDELIVERIES) becomes a dead letter instead. `error` (a disq
        extension, at most 1024 bytes) is kept with each job: SHOW's `errors` (the last
        5), and a dead letter's error for `wait`."""
        return self._run(cmds.nack(job_ids, delay_ms, error))

    def enqueue(self, *job_ids: str) -> int:
        return self._run(cmds.ids_command("ENQUEUE", job_ids))

    def dequeue(self, *job_ids: str) -> int:
        return self._run(cmds.ids_command("DEQUEUE", job_ids))

    def del_job(self, *job_ids: str) -> int:
        """DELJOB: remove the jobs from the current node only."""
        return self._run(cmds.ids_command("DELJOB", job_ids))

    def working(self, job_id: str, *, progress: int | None = None,
                data: Body | None = None) -> int:
        """WORKING: postpone the next requeue by the job's RETRY, which it returns (ms).
        `progress` (0..100) and `data` (at most 4096 bytes), disq extensions, are kept
        with the job on its holders: SHOW's `progress`, and `wait`'s `progress_data`
        for a job still active."""
        return self._run(cmds.working(job_id, progress, data))

    def set_job(self, job_id: str, *, priority: int | None = None,
                at: datetime | int | None = None,
                delay_ms: int | None = None) -> None:
        """JOBSET (a disq extension): a new priority and/or due time (`at`: a datetime
        or Unix ms; or `delay_ms` from now) for a job not acknowledged yet, on every
        node holding it. NoJobError if no reachable node knows it."""
        return self._run(cmds.set_job(job_id, priority, at, delay_ms))

    def show(self, job_id: str) -> JobInfo | None:
        return self._run(cmds.show(job_id))

    # -- queues (the current node's) ----------------------------------------------------
    def qlen(self, queue: str) -> int:
        return self._run(cmds.qlen(queue))

    def qpeek(self, queue: str, count: int) -> list[Job]:
        """Jobs without taking them: the oldest `count`, or the newest if negative."""
        return self._run(cmds.qpeek(queue, count))

    def qstat(self, queue: str) -> QueueStat | None:
        return self._run(cmds.qstat(queue))

    def cron_add(self, name: str, queue: str, spec: str, body: Body, *,
                 replicate: int | None = None, retry: timedelta | None = None,
                 retry_ms: int | None = None, ttl: timedelta | None = None,
                 ttl_ms: int | None = None, priority: int | None = None,
                 group: str | bytes | None = None, tz: str | None = None) -> str:
        """CRON ADD (a disq extension): `spec` in cron syntax (six fields: seconds first);
        each tick adds a job with these options, as add_job's (`tz`: the zone `spec` is
        read in)."""
        return self._run(cmds.cron_add(name, queue, spec, body, {
            "repl": replicate, "retry": to_seconds("retry", retry, retry_ms),
            "ttl": to_seconds("ttl", ttl, ttl_ms), "priority": priority, "group": group,
            "tz": tz}))

    def cron_del(self, name: str) -> int:
        return self._run(cmds.cron_del(name))

    def cron_list(self) -> list[CronEntry]:
        return self._run(cmds.cron_list())

    # -- topics (disq's extensions) ------------------------------------------------------
    def topic_subscribe(self, topic: str | bytes, queue: str | bytes) -> int:
        """TOPIC SUBSCRIBE: `queue` gets a job for each publish to `topic` (1: new)."""
        return self._run(cmds.topic_change("SUBSCRIBE", topic, queue))

    def topic_unsubscribe(self, topic: str | bytes, queue: str | bytes) -> int:
        return self._run(cmds.topic_change("UNSUBSCRIBE", topic, queue))

    def topic_list(self, topic: str | bytes | None = None) -> dict[str, list[str]]:
        """TOPIC LIST: each topic and its subscribed queues."""
        return self._run(cmds.topic_list(topic))

    def topic_publish(self, topic: str | bytes, body: Body, *,
                      msgid: str | bytes | None = None, replicate: int | None = None,
                      delay: timedelta | None = None, delay_ms: int | None = None,
                      retry: timedelta | None = None, retry_ms: int | None = None,
                      ttl: timedelta | None = None, ttl_ms: int | None = None,
                      maxlen: int | None = None, async_: bool = False,
                      at: datetime | int | None = None,
                      priority: int | None = None, group: str | bytes | None = None,
                      max_deliveries: int | None = None, queue_randomly: bool = False,
                      batch: str | bytes | None = None,
                      after: Iterable[str | bytes] | None = None,
                      attrs: Mapping[str | bytes, str | bytes] | None = None
                      ) -> dict[str, str | ErrorReply]:
        """TOPIC PUBLISH: one job in each subscribed queue, with ADDJOB's options;
        each queue's job ID, or its error. `msgid`: a retried publish with it adds
        nothing twice to any queue. Traced as add_job (the topic as the destination)."""
        with self.tracing.publish(topic, attrs, operation="TOPIC PUBLISH") as traced:
            return traced.published(self._run(cmds.topic_publish(topic, body, {
                "msgid": msgid, "repl": replicate, **job_durations(
                    delay=delay, delay_ms=delay_ms, retry=retry, retry_ms=retry_ms, ttl=ttl,
                    ttl_ms=ttl_ms).fields(), "maxlen": maxlen, "async_": async_, "at": at, "priority": priority, "group": group,
                "max_deliveries": max_deliveries, "queue_randomly": queue_randomly,
                "batch": batch, "after": None if after is None else list(after),
                "attrs": None if traced.attrs is None else list(traced.attrs.items())})))

    # -- batches (disq's extensions) -----------------------------------------------------
    def batch_new(self, bid: str | bytes, *,
                  ondone: tuple[str | bytes, Body] | None = None,
                  onsuccess: tuple[str | bytes, Body] | None = None,
                  ttl: timedelta | None = None, ttl_ms: int | None = None) -> str:
        """BATCH NEW: a batch; add its jobs with add_job(..., batch=bid), then
        batch_close(bid). Once every member ended, `ondone` (queue, body) is added as a
        job, once in the cluster, and `onsuccess` too if none went dead. `ttl` (a
        timedelta) or `ttl_ms`: how long the batch is kept (default a week; whole
        seconds, rounded up)."""
        return self._run(cmds.batch_new(bid, {"ondone": ondone, "onsuccess": onsuccess,
                                                 "ttl": to_seconds("ttl", ttl, ttl_ms)}))

    def batch_close(self, bid: str | bytes) -> int:
        """BATCH CLOSE: no more members; returns how many the cluster counted."""
        return self._run(cmds.batch_close(bid))

    def batch_status(self, bid: str | bytes) -> BatchStatus:
        return self._run(cmds.batch_status(bid))

    def batch_list(self, state: str | None = None) -> list[BatchStatus]:
        """BATCH LIST: the batches the node knows whose callback queues the user may
        use, each as batch_status gives it, the newest 1,000 (by creation) first;
        `state`: only those open, closed or done."""
        return self._run(cmds.batch_list(state))

    def pause(self, queue: str, *flags: PauseOption, bcast: bool = False) -> str:
        """PAUSE queue in|out|all|none; no flag only reads the state. Returns the state;
        `bcast` sends it to every node."""
        return self._run(cmds.pause(queue, flags, bcast))

    # -- when jobs fail (disq's extensions, the whole cluster's) ------------------------
    def qpolicy_set(self, queue: str, *, max_deliveries: int | None = None,
                    deadletter: str | bytes | None = None,
                    backoff: tuple[int, int] | None = None,
                    rate: float | None = None, result_ttl: timedelta | None = None,
                    result_ttl_ms: int | None = None, concurrency: int | None = None,
                    retry: timedelta | None = None, retry_ms: int | None = None,
                    ttl: timedelta | None = None, ttl_ms: int | None = None,
                    replicate: int | None = None, maxlen: int | None = None,
                    group_concurrency: int | None = None, group_rate: float | None = None,
                    retain: timedelta | None = None, retain_ms: int | None = None,
                    retain_bytes: int | None = None) -> str:
        """QPOLICY queue SET: the fields given replace the queue policy's, the others
        stay. `max_deliveries` (1..65535): deliveries before a job becomes a dead
        letter; `deadletter`: where dead letters go (default `dead:<queue>`);
        `backoff` (base_ms, max_ms): a NACKed or requeued job waits min(max,
        base * 2^(n-1)) +-20% after its n-th failure; `rate`: at most that many jobs per
        second delivered from the queue; `concurrency`: at most that many of its jobs
        delivered and not yet ended at a time, cluster-wide. Durations are timedeltas or
        `*_ms` ints (whole seconds on the wire, rounded up): `result_ttl`, how long a job's
        result is kept once it ended (default an hour; 0: none). `retry`, `ttl`,
        `replicate`, `maxlen`: the defaults of an ADDJOB to the queue that does not give
        them (its own win); `group_concurrency`, `group_rate`: `concurrency` and `rate`
        for each GROUP of the queue. `retain`: how long its acked jobs are kept on disk
        for `replay`, at most `retain_bytes` of them on each node. Returns "OK"."""
        return self._run(cmds.qpolicy_set(
            queue, max_deliveries, deadletter, backoff, rate,
            to_seconds("result_ttl", result_ttl, result_ttl_ms), concurrency,
            retry=to_seconds("retry", retry, retry_ms), ttl=to_seconds("ttl", ttl, ttl_ms),
            replicate=replicate, maxlen=maxlen, group_concurrency=group_concurrency,
            group_rate=group_rate, retain=to_seconds("retain", retain, retain_ms),
            retain_bytes=retain_bytes))

    def qpolicy_get(self, queue: str) -> QueuePolicy | None:
        """QPOLICY queue GET: the queue's policy, None if it has none."""
        return self._run(cmds.qpolicy_get(queue))

    def qpolicy_del(self, queue: str) -> bool:
        """QPOLICY queue DEL: whether the queue had a policy."""
        return self._run(cmds.qpolicy_del(queue))

    def qdel(self, queue: str) -> int:
        """QDEL (a disq extension): delete the queue on every node: every job of it
        added before, its policy, its topics' subscriptions; copies that arrive late
        are refused. Returns the jobs deleted on the node asked, once every reachable
        node deleted its own (else raises NOREPL)."""
        return self._run(cmds.qdel(queue))

    def qpurge(self, queue: str) -> int:
        """QPURGE (a disq extension): as `qdel`, the queue's policy and subscriptions
        kept."""
        return self._run(cmds.qpurge(queue))

    def replay(self, queue: str, start: int, end: int | None = None,
               into: str | None = None, where: Sequence[Sequence[Arg]] = ()
               ) -> dict[str, int]:
        """REPLAY: the retained jobs of `queue` (QPOLICY ... RETAIN) created from
        `start` to `end` (Unix ms; None: now), on every reachable node, added again to
        `into` (default: the queue) in creation order, those matching `where` ((key, op,
        value) as get_jobs'); a retry adds none twice. Returns added, skipped, failed,
        nodes, unreached."""
        return self._run(cmds.replay(queue, start, end, into, where))

    def retained(self, queue: str, start: int, end: int | None = None,
                 after: str | None = None, count: int | None = None,
                 shard: tuple[int, int] | None = None,
                 where: Sequence[Sequence[Arg]] = ()
                 ) -> tuple[str, list[RetainedJob]]:
        """RETAINED: a page of the connected node's retained jobs of the window, and
        the cursor of the next page (give it as `after`; "" after the last). `shard`:
        (i, n): only the jobs whose ID is in shard i of n (one part of a read split
        in n, each part reading every node and merging by ID)."""
        return self._run(cmds.retained(queue, start, end, after, count, shard, where))

    def requeue_dead(self, dlq: str, count: int | None = None) -> int:
        """DEADLETTER REQUEUE: put up to `count` (None: all) dead letters of the queue
        `dlq` back on the queues they came from, their counters reset, across the
        cluster; returns how many."""
        return self._run(cmds.requeue_dead(dlq, count))

    def requeue_dead_jobs(self, ids: Iterable[str]) -> int:
        """DEADLETTER REQUEUE-JOB: these dead letters (those the node asked holds) back
        on the queues they came from, their counters reset; returns how many."""
        return self._run(cmds.requeue_dead_jobs(ids))

    def _scan(self, make: Callable[[int], Cmd[tuple[int, list[object]]]]
              ) -> Iterator[list[object]]:
        """Follow a cursor to its end (see core.ScanCursor)."""
        scan = self.core.scan()
        while not scan.done:
            with self._lock:
                cursor, items = self._run(make(scan.next()))
                if not scan.answered(cursor):
                    continue
            yield items

    def qscan(self, *, count: int | None = None, minlen: int | None = None,
              maxlen: int | None = None, importrate: int | None = None) -> Iterator[str]:
        """The names of the current node's queues, page by page."""
        for items in self._scan(lambda c: cmds.qscan(c, count, minlen, maxlen, importrate)):
            yield from cmds.scan_names(items)

    def jscan(self, *, queue: str | None = None, states: Sequence[str] = (),
              count: int | None = None) -> Iterator[str]:
        """The IDs of the current node's jobs (of `queue`, in one of `states`)."""
        for items in self._scan(lambda c: cmds.jscan(c, count, queue, states, False)):
            yield from cmds.scan_names(items)

    def jscan_info(self, *, queue: str | None = None, states: Sequence[str] = (),
                   count: int | None = None) -> Iterator[JobInfo]:
        """As jscan, with every job's SHOW fields (JSCAN REPLY all)."""
        for items in self._scan(lambda c: cmds.jscan(c, count, queue, states, True)):
            yield from cmds.scan_infos(items)

    # -- server -------------------------------------------------------------------------
    def hello(self) -> Hello:
        """HELLO; the client also takes the node list from it."""
        hello = self._run(cmds.hello())
        with self._lock:
            self.core.hello_answered(hello)
        return hello

    def info(self, section: str | None = None) -> dict[str, dict[str, str | int | float]]:
        """INFO, by section (lower case) then field."""
        return self._run(cmds.info(section))

    def ping(self) -> str:
        return self._run(cmds.ping())
