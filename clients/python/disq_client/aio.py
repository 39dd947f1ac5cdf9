"""The asyncio client: the same methods as `Client`, as coroutines; like it, an I/O
shell around the sans-I/O `ClientCore` (core.py), which makes every choice.

Each node gets one connection that every task shares (commands are pipelined on it and
their replies matched in order), plus one for blocking GETJOBs, so that a consumer
waiting for jobs does not hold up the ACKs of other tasks.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from types import TracebackType
from typing import TypeVar

from . import commands as cmds
from .bodies import Body
from .client import ClientBase
from .commands import Cmd
from .core import ADD_TIMEOUT_MS, BATCH_SIZE, DEFAULT_SETTINGS, HELLO_REQUEST, ConnectionSettings
from .durations import job_durations, to_seconds
from .errors import DisqConnectionError, DisqTimeoutError, ProtocolError
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

T = TypeVar("T")


class _Pending:
    """The replies one request (a command or a pipelined batch) waits for."""

    __slots__ = ("future", "left", "replies")

    def __init__(self, future: asyncio.Future[list[object]], n: int) -> None:
        self.future = future
        self.left = n
        self.replies: list[object] = []


class AsyncConnection(asyncio.Protocol):
    """One connection to one node: writes go out as they are made, replies resolve the
    oldest pending request. A timeout or a broken link closes it and fails every
    pending request."""

    def __init__(self, addr: Address, settings: ConnectionSettings = DEFAULT_SETTINGS) -> None:
        self.addr = addr
        self.settings = settings
        self._transport: asyncio.Transport | None = None
        self._reader = new_reader()
        self._pending: deque[_Pending] = deque()

    @property
    def connected(self) -> bool:
        return self._transport is not None

    async def connect(self) -> None:
        if self._transport is None:
            await self._open(asyncio.get_running_loop())

    async def _open(self, loop: asyncio.AbstractEventLoop) -> None:
        where = format_address(self.addr)
        settings = self.settings
        try:
            await asyncio.wait_for(
                loop.create_connection(lambda: self, self.addr[0], self.addr[1],
                                       ssl=settings.ssl_context),
                settings.connect_timeout)
        except TimeoutError as exc:
            raise DisqTimeoutError(f"connecting to {where}: timeout") from exc
        except OSError as exc:
            raise DisqConnectionError(f"connecting to {where}: {exc}") from exc
        if settings.password is not None:
            reply = (await self.request([auth_request(settings.password)], 0.0))[0]
            error = auth_failure(reply)
            if error is not None:
                self.close()
                raise error

    # asyncio.Protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._transport = transport
        self._reader = new_reader()

    def data_received(self, data: bytes) -> None:
        reader = self._reader
        pending = self._pending
        try:
            for at in range(0, len(data), FEED_PIECE):  # protocol.FEED_PIECE says why
                reader.feed(data, at, min(FEED_PIECE, len(data) - at))
                reply = reader.gets()
                while reply is not False:
                    request = pending[0]
                    request.replies.append(reply)
                    request.left -= 1
                    if not request.left:
                        pending.popleft()
                        if not request.future.done():
                            request.future.set_result(request.replies)
                    reply = reader.gets()
        except (ProtocolError, IndexError) as exc:
            self._fail(DisqConnectionError(f"{format_address(self.addr)}: {exc!r}"))

    def connection_lost(self, exc: Exception | None) -> None:
        self._transport = None
        self._fail(DisqConnectionError(f"{format_address(self.addr)}: connection closed"
                                       + (f" ({exc})" if exc else "")))

    def _fail(self, exc: Exception) -> None:
        transport, self._transport = self._transport, None
        if transport is not None:
            transport.abort()
        pending, self._pending = self._pending, deque()
        for request in pending:
            if not request.future.done():
                request.future.set_exception(exc)

    def close(self) -> None:
        self._fail(DisqConnectionError(f"{format_address(self.addr)}: closed"))

    async def request(self, payloads: list[bytes], wait: float | None,
                      close_on_cancel: bool = False) -> list[object]:
        """Send encoded commands in one write; their replies in order. `wait` is added
        to the timeout (None: no limit)."""
        transport = self._transport
        if transport is None:
            raise DisqConnectionError(f"{format_address(self.addr)}: not connected")
        future: asyncio.Future[list[object]] = asyncio.get_running_loop().create_future()
        self._pending.append(_Pending(future, len(payloads)))
        transport.write(payloads[0] if len(payloads) == 1 else b"".join(payloads))
        timeout = reply_wait(self.settings.timeout, wait)
        try:
            if timeout is None:
                return await future
            return await asyncio.wait_for(future, timeout)
        except TimeoutError as exc:
            self.close()
            raise DisqTimeoutError(f"{format_address(self.addr)}: no reply in time") from exc
        except asyncio.CancelledError:
            if close_on_cancel:  # a blocked GETJOB: jobs sent now would be lost until RETRY
                self.close()
            raise


class AsyncClient(ClientBase):
    """The asyncio twin of `Client` (same arguments, same cluster behaviour).

    Use it as `async with AsyncClient(...) as client:` or call `close()`.
    """

    def _setup(self) -> None:
        self._conns: dict[Address, AsyncConnection] = {}
        self._blocking: dict[Address, AsyncConnection] = {}
        self._blocking_locks: dict[Address, asyncio.Lock] = {}
        self._reconnecting = asyncio.Lock()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None,
                        exc: BaseException | None, tb: TracebackType | None) -> None:
        await self.close()

    async def close(self) -> None:
        """Close every connection; commands in flight raise DisqConnectionError, later
        ones connect again."""
        self.core.close()  # commands in flight give up instead of failing over
        for conn in [*self._conns.values(), *self._blocking.values()]:
            conn.close()
        self._conns.clear()
        self._blocking.clear()

    async def connect(self) -> Address:
        return (await self._connection()).addr

    # -- connections --------------------------------------------------------------------
    def _new_connection(self, addr: Address) -> AsyncConnection:
        return AsyncConnection(addr, self.settings)

    async def _connection(self) -> AsyncConnection:
        view = self.core.view
        addr = view.current
        if addr is not None:
            conn = self._conns.get(addr)
            if conn is not None and conn.connected:
                return conn
        async with self._reconnecting:  # one task looks for a node, the others wait for it
            addr = view.current
            if addr is not None:
                conn = self._conns.get(addr)
                if conn is not None and conn.connected:
                    return conn
            conn = await self._connect_first(self.core.candidates())
            return await self._switch_to(self.core.better_than(conn.addr)) or conn

    async def _connect_first(self, addrs: Sequence[Address]) -> AsyncConnection:
        failures = []
        for addr in addrs:
            conn = self._conns.get(addr)
            if conn is None or not conn.connected:
                conn = self._conns[addr] = self._new_connection(addr)
            try:
                await conn.connect()
                reply = (await conn.request([HELLO_REQUEST], 0.0))[0]
            except CONNECTION_ERRORS as exc:
                self.core.connect_failed(addr)
                failures.append(str(exc))
                continue
            self.core.hello_reply(addr, reply)
            return conn
        raise self.core.no_node(failures)

    async def _blocking_connection(self, addr: Address) -> AsyncConnection:
        conn = self._blocking.get(addr)
        if conn is None or not conn.connected:
            conn = self._blocking[addr] = self._new_connection(addr)
        await conn.connect()
        return conn

    def _drop(self, addr: Address) -> None:
        for pool in (self._conns, self._blocking):
            conn = pool.get(addr)
            if conn is not None:
                conn.close()

    # -- running commands ---------------------------------------------------------------
    async def _run(self, cmd: Cmd[T]) -> T:
        core = self.core
        payload = [encode(cmd.args)]
        blocking = cmd.gets_jobs and cmd.wait != 0.0
        generation = core.generation
        failures = 0
        while True:
            conn = await self._connection()
            addr = conn.addr
            try:
                if blocking:
                    lock = self._blocking_locks.get(addr)
                    if lock is None:
                        lock = self._blocking_locks[addr] = asyncio.Lock()
                    async with lock:
                        bconn = await self._blocking_connection(addr)
                        reply = (await bconn.request(payload, cmd.wait, True))[0]
                else:
                    reply = (await conn.request(payload, cmd.wait))[0]
            except CONNECTION_ERRORS:
                failures += 1
                if not self._may_retry(addr, generation, failures):
                    raise
                continue
            if isinstance(reply, ErrorReply):
                failures += 1
                core.refused(addr, reply, failures)  # raises unless moving on
                continue
            result = cmd.parse(reply)
            if cmd.gets_jobs:
                target = core.follow(result)  # type: ignore[arg-type]
                if target is not None:
                    await self._switch_to([target])
            return result

    async def _switch_to(self, addrs: Sequence[Address]) -> AsyncConnection | None:
        try:
            return await self._connect_first(addrs)
        except DisqConnectionError:
            return None

    async def _run_pipeline(self, payloads: list[bytes], wait: float | None) -> list[object]:
        generation = self.core.generation
        failures = 0
        while True:
            conn = await self._connection()
            try:
                return await conn.request(payloads, wait)
            except CONNECTION_ERRORS:
                failures += 1
                if not self._may_retry(conn.addr, generation, failures):
                    raise

    async def execute_command(self, *args: Arg) -> object:
        return await self._run(cmds.raw(args))

    # -- jobs ---------------------------------------------------------------------------
    async def add_job(self, queue: str, body: Body, *, timeout_ms: int = ADD_TIMEOUT_MS,
                      replicate: int | None = None, delay: timedelta | None = None,
                      delay_ms: int | None = None, retry: timedelta | None = None,
                      retry_ms: int | None = None, ttl: timedelta | None = None,
                      ttl_ms: int | None = None, maxlen: int | None = None,
                      async_: bool = False, dedup: str | bytes | None = None,
                      at: datetime | int | None = None, priority: int | None = None,
                      group: str | bytes | None = None,
                      max_deliveries: int | None = None, queue_randomly: bool = False,
                      unique: str | bytes | None = None,
                      batch: str | bytes | None = None,
                      after: Iterable[str | bytes] | None = None,
                attrs: Mapping[str | bytes, str | bytes] | None = None,
                orderkey: str | bytes | None = None, strict: bool = False) -> str:
        """As Client.add_job."""
        with self.tracing.publish(queue, attrs) as traced:
            return traced.published(await self._run(cmds.add_job(
                queue, body, timeout_ms, replicate, job_durations(
                    delay=delay, delay_ms=delay_ms, retry=retry, retry_ms=retry_ms, ttl=ttl,
                    ttl_ms=ttl_ms), maxlen, async_, dedup, at=at, priority=priority, group=group,
                max_deliveries=max_deliveries, queue_randomly=queue_randomly, unique=unique,
                batch=batch, after=after, attrs=traced.attrs, orderkey=orderkey,
                strict=strict)))

    async def add_jobs(self, queue: str, bodies: Iterable[Body], *,
                       timeout_ms: int = ADD_TIMEOUT_MS, replicate: int | None = None,
                       delay: timedelta | None = None, delay_ms: int | None = None,
                       retry: timedelta | None = None, retry_ms: int | None = None,
                       ttl: timedelta | None = None, ttl_ms: int | None = None,
                       maxlen: int | None = None,
                       async_: bool = False, batch_size: int = BATCH_SIZE,
                       dedup: Iterable[str | bytes] | None = None,
                       at: datetime | int | None = None,
                       priority: int | None = None, group: str | bytes | None = None,
                       max_deliveries: int | None = None,
                 queue_randomly: bool = False, batch: str | bytes | None = None,
                 after: Iterable[str | bytes] | None = None,
                attrs: Mapping[str | bytes, str | bytes] | None = None,
                orderkey: str | bytes | None = None, strict: bool = False) -> list[str]:
        """As Client.add_jobs."""
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
                    reply = (await self._run_pipeline(plan.bulk(chunk, keys), plan.wait))[0]
                    if not cmds.unknown_command(reply):
                        replies += cmds.each_job(reply, len(chunk))
                        continue
                    self.bulk_adds = False
                replies += await self._run_pipeline(plan.pipelined(chunk, keys), plan.wait)
            return traced.published(cmds.job_ids(replies))

    async def get_jobs(self, *queues: str, count: int = 1, timeout_ms: int = 0,
                       nohang: bool = False, with_counters: bool = False,
                       where: Sequence[Sequence[str | bytes | int]] = ()) -> list[Job]:
        return await self._run(cmds.get_jobs(queues, count, timeout_ms, nohang, with_counters,
                                             where))

    async def get_job(self, *queues: str, timeout_ms: int = 0, nohang: bool = False,
                      with_counters: bool = False) -> Job | None:
        jobs = await self.get_jobs(*queues, timeout_ms=timeout_ms, nohang=nohang,
                                   with_counters=with_counters)
        return jobs[0] if jobs else None

    async def ack(self, *job_ids: str, result: Body | None = None) -> int:
        """As Client.ack."""
        return await self._run(cmds.ack(job_ids, result))

    async def wait(self, *job_ids: str, timeout_ms: int | None = None,
                   any: bool = False) -> list[JobEnd]:
        """As Client.wait."""
        return await self._run(cmds.wait_jobs(job_ids, timeout_ms, any))

    async def fast_ack(self, *job_ids: str) -> int:
        return await self._run(cmds.ids_command("FASTACK", job_ids))

    async def nack(self, *job_ids: str, delay_ms: int | None = None,
                   error: str | bytes | None = None) -> int:
        """As Client.nack."""
        return await self._run(cmds.nack(job_ids, delay_ms, error))

    async def enqueue(self, *job_ids: str) -> int:
        return await self._run(cmds.ids_command("ENQUEUE", job_ids))

    async def dequeue(self, *job_ids: str) -> int:
        return await self._run(cmds.ids_command("DEQUEUE", job_ids))

    async def del_job(self, *job_ids: str) -> int:
        return await self._run(cmds.ids_command("DELJOB", job_ids))

    async def working(self, job_id: str, *, progress: int | None = None,
                      data: Body | None = None) -> int:
        """As Client.working."""
        return await self._run(cmds.working(job_id, progress, data))

    async def set_job(self, job_id: str, *, priority: int | None = None,
                      at: datetime | int | None = None,
                      delay_ms: int | None = None) -> None:
        """JOBSET (a disq extension): a new priority and/or due time (`at`: a datetime
        or Unix ms; or `delay_ms` from now) for a job not acknowledged yet, on every
        node holding it. NoJobError if no reachable node knows it."""
        return await self._run(cmds.set_job(job_id, priority, at, delay_ms))

    async def show(self, job_id: str) -> JobInfo | None:
        return await self._run(cmds.show(job_id))

    # -- queues -------------------------------------------------------------------------
    async def qlen(self, queue: str) -> int:
        return await self._run(cmds.qlen(queue))

    async def qpeek(self, queue: str, count: int) -> list[Job]:
        return await self._run(cmds.qpeek(queue, count))

    async def qstat(self, queue: str) -> QueueStat | None:
        return await self._run(cmds.qstat(queue))

    async def cron_add(self, name: str, queue: str, spec: str, body: Body, *,
                       replicate: int | None = None, retry: timedelta | None = None,
                       retry_ms: int | None = None, ttl: timedelta | None = None,
                       ttl_ms: int | None = None, priority: int | None = None,
                       group: str | bytes | None = None, tz: str | None = None) -> str:
        """As Client.cron_add."""
        return await self._run(cmds.cron_add(name, queue, spec, body, {
            "repl": replicate, "retry": to_seconds("retry", retry, retry_ms),
            "ttl": to_seconds("ttl", ttl, ttl_ms), "priority": priority, "group": group,
            "tz": tz}))

    async def cron_del(self, name: str) -> int:
        return await self._run(cmds.cron_del(name))

    async def cron_list(self) -> list[CronEntry]:
        return await self._run(cmds.cron_list())

    # -- topics (disq's extensions) ------------------------------------------------------
    async def topic_subscribe(self, topic: str | bytes, queue: str | bytes) -> int:
        """TOPIC SUBSCRIBE: `queue` gets a job for each publish to `topic` (1: new)."""
        return await self._run(cmds.topic_change("SUBSCRIBE", topic, queue))

    async def topic_unsubscribe(self, topic: str | bytes, queue: str | bytes) -> int:
        return await self._run(cmds.topic_change("UNSUBSCRIBE", topic, queue))

    async def topic_list(self, topic: str | bytes | None = None) -> dict[str, list[str]]:
        """TOPIC LIST: each topic and its subscribed queues."""
        return await self._run(cmds.topic_list(topic))

    async def topic_publish(self, topic: str | bytes, body: Body, *,
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
        """As Client.topic_publish."""
        with self.tracing.publish(topic, attrs, operation="TOPIC PUBLISH") as traced:
            return traced.published(await self._run(cmds.topic_publish(topic, body, {
                "msgid": msgid, "repl": replicate, **job_durations(
                    delay=delay, delay_ms=delay_ms, retry=retry, retry_ms=retry_ms, ttl=ttl,
                    ttl_ms=ttl_ms).fields(), "maxlen": maxlen, "async_": async_, "at": at,
                "priority": priority, "group": group,
                "max_deliveries": max_deliveries, "queue_randomly": queue_randomly,
                "batch": batch, "after": None if after is None else list(after),
                "attrs": None if traced.attrs is None else list(traced.attrs.items())})))

    # -- batches (disq's extensions) -----------------------------------------------------
    async def batch_new(self, bid: str | bytes, *,
                  ondone: tuple[str | bytes, Body] | None = None,
                  onsuccess: tuple[str | bytes, Body] | None = None,
                  ttl: timedelta | None = None, ttl_ms: int | None = None) -> str:
        """As Client.batch_new."""
        return await self._run(cmds.batch_new(bid, {
            "ondone": ondone, "onsuccess": onsuccess, "ttl": to_seconds("ttl", ttl, ttl_ms)}))

    async def batch_close(self, bid: str | bytes) -> int:
        """BATCH CLOSE: no more members; returns how many the cluster counted."""
        return await self._run(cmds.batch_close(bid))

    async def batch_status(self, bid: str | bytes) -> BatchStatus:
        return await self._run(cmds.batch_status(bid))

    async def batch_list(self, state: str | None = None) -> list[BatchStatus]:
        """BATCH LIST: the batches the node knows whose callback queues the user may
        use, each as batch_status gives it, the newest 1,000 (by creation) first;
        `state`: only those open, closed or done."""
        return await self._run(cmds.batch_list(state))

    async def pause(self, queue: str, *flags: PauseOption, bcast: bool = False) -> str:
        return await self._run(cmds.pause(queue, flags, bcast))

    # -- when jobs fail (disq's extensions, the whole cluster's) ------------------------
    async def qpolicy_set(self, queue: str, *, max_deliveries: int | None = None,
                          deadletter: str | bytes | None = None,
                          backoff: tuple[int, int] | None = None,
                          rate: float | None = None,
                          result_ttl: timedelta | None = None,
                          result_ttl_ms: int | None = None, concurrency: int | None = None,
                          retry: timedelta | None = None, retry_ms: int | None = None,
                          ttl: timedelta | None = None, ttl_ms: int | None = None,
                          replicate: int | None = None, maxlen: int | None = None,
                          group_concurrency: int | None = None,
                          group_rate: float | None = None, retain: timedelta | None = None,
                          retain_ms: int | None = None, retain_bytes: int | None = None
                          ) -> str:
        """As Client.qpolicy_set."""
        return await self._run(cmds.qpolicy_set(
            queue, max_deliveries, deadletter, backoff, rate,
            to_seconds("result_ttl", result_ttl, result_ttl_ms), concurrency,
            retry=to_seconds("retry", retry, retry_ms), ttl=to_seconds("ttl", ttl, ttl_ms),
            replicate=replicate, maxlen=maxlen, group_concurrency=group_concurrency,
            group_rate=group_rate, retain=to_seconds("retain", retain, retain_ms),
            retain_bytes=retain_bytes))

    async def qpolicy_get(self, queue: str) -> QueuePolicy | None:
        return await self._run(cmds.qpolicy_get(queue))

    async def qpolicy_del(self, queue: str) -> bool:
        return await self._run(cmds.qpolicy_del(queue))

    async def qdel(self, queue: str) -> int:
        """As Client.qdel."""
        return await self._run(cmds.qdel(queue))

    async def qpurge(self, queue: str) -> int:
        """As Client.qpurge."""
        return await self._run(cmds.qpurge(queue))

    async def replay(self, queue: str, start: int, end: int | None = None,
               into: str | None = None, where: Sequence[Sequence[Arg]] = ()
               ) -> dict[str, int]:
        """As Client.replay."""
        return await self._run(cmds.replay(queue, start, end, into, where))

    async def retained(self, queue: str, start: int, end: int | None = None,
                 after: str | None = None, count: int | None = None,
                 shard: tuple[int, int] | None = None,
                 where: Sequence[Sequence[Arg]] = ()
                 ) -> tuple[str, list[RetainedJob]]:
        """As Client.retained."""
        return await self._run(cmds.retained(queue, start, end, after, count, shard, where))

    async def requeue_dead(self, dlq: str, count: int | None = None) -> int:
        """As Client.requeue_dead."""
        return await self._run(cmds.requeue_dead(dlq, count))

    async def requeue_dead_jobs(self, ids: Iterable[str]) -> int:
        """As Client.requeue_dead_jobs."""
        return await self._run(cmds.requeue_dead_jobs(ids))

    async def _scan(self, make: Callable[[int], Cmd[tuple[int, list[object]]]]
                    ) -> AsyncIterator[list[object]]:
        scan = self.core.scan()
        while not scan.done:
            cursor, items = await self._run(make(scan.next()))
            if scan.answered(cursor):
                yield items

    async def qscan(self, *, count: int | None = None, minlen: int | None = None,
                    maxlen: int | None = None, importrate: int | None = None
                    ) -> AsyncIterator[str]:
        async for items in self._scan(
                lambda c: cmds.qscan(c, count, minlen, maxlen, importrate)):
            for name in cmds.scan_names(items):
                yield name

    async def jscan(self, *, queue: str | None = None, states: Sequence[str] = (),
                    count: int | None = None) -> AsyncIterator[str]:
        async for items in self._scan(lambda c: cmds.jscan(c, count, queue, states, False)):
            for job_id in cmds.scan_names(items):
                yield job_id

    async def jscan_info(self, *, queue: str | None = None, states: Sequence[str] = (),
                         count: int | None = None) -> AsyncIterator[JobInfo]:
        async for items in self._scan(lambda c: cmds.jscan(c, count, queue, states, True)):
            for info in cmds.scan_infos(items):
                yield info

    # -- server -------------------------------------------------------------------------
    async def hello(self) -> Hello:
        hello = await self._run(cmds.hello())
        self.core.hello_answered(hello)
        return hello

    async def info(self, section: str | None = None
                   ) -> dict[str, dict[str, str | int | float]]:
        return await self._run(cmds.info(section))

    async def ping(self) -> str:
        return await self._run(cmds.ping())
