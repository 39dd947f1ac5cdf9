"""A worker: handlers per queue, N jobs at a time, ack on success, nack on exception.

Shape: one asyncio loop with an `AsyncClient`. A fetch loop asks for as many jobs as
there are free slots (GETJOB COUNT free TIMEOUT poll_ms, from every queue that has a
handler) and starts one task per job. Coroutine handlers run on the loop; plain
functions run in a thread pool of `concurrency` threads. Then:

- the handler returns: ACKJOB (the job is done, once), with its return value as the
  job's RESULT (a disq extension, read with WAITJOB): bytes and str as they are, None
  for no result (a plain ACKJOB), anything else as JSON;
- while it runs it may call `report_progress(percent, data)`: WORKING ... PROGRESS /
  DATA (disq extensions, kept with the job: SHOW, WAITJOB), sent in the background;
- it raises: NACK ERROR "Type: message" (a disq extension, kept with the job: SHOW's
  errors, a dead letter's WAITJOB answer; cut to 1024 bytes: work_reports.py)
  DELAY-MS, the job's failures so far backing it off (the worker's `retry_backoff`,
  1 s doubling up to 10 min, +-20%), and its nack counter grows (handlers see it
  with `job.nacks`). A job that fails its `delivery_limit`th delivery
  (25) is given up: added to its dead-letter queue (the queue policy's DEADLETTER,
  else `dead:<queue>`) with its body, then acknowledged, so a failing job neither
  loops nor is lost. The server's own limits and back-off come first: where the job
  has MAXDELIVERIES or the queue's policy (QPOLICY, a disq extension) has
  MAXDELIVERIES or BACKOFF, a plain NACK leaves it to them (the server then makes it a
  dead letter itself, with its ID). A task registered with `max_deliveries` and/or
  `backoff` sets its queue's policy (QPOLICY queue SET) when the worker starts serving.
  That policy is the queue's, shared by every consumer of the queue in the cluster: a
  later `qpolicy_set` or another worker registering other values changes it for all.
  A handler's traceback is logged once per job (again only if it changes); its other
  failures are one line each;
- it runs long: WORKING heartbeats keep the job from being queued again while it runs.
  After `heartbeat_after_ms` SHOW gives the job's RETRY and when it would be queued
  again; WORKING is sent before that, then every `heartbeat_fraction` of RETRY. Jobs
  with RETRY 0 (never queued again, seen in their ID) get none.
- SIGTERM or SIGINT (or `stop()`): no new GETJOB; the one in flight (at most `poll_ms`)
  completes and its jobs run; running jobs get `grace_ms` to finish and be acked.
  Jobs still running then are given back with ENQUEUE (queued again now, counted as an
  additional delivery) and `run()` returns. Their threads cannot be stopped: the
  `disq-worker` command then exits without waiting for them.
- with OpenTelemetry installed and a tracer provider set (tracing.py), each handler
  runs in a CONSUMER span, child of the producer's span whose context the job
  carries (`traceparent`); a handler that raises leaves its exception and an error
  status on the span. `tracing=False` (or DISQ_TRACING=0) switches it off.
"""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import logging
import random
import signal
import time
import traceback
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, TypeVar, cast

from .aio import AsyncClient
from .core import DEFAULT_NODE, Nodes
from .durations import to_ms
from .errors import DisqError, NoJobError, TooLateError
from .retry import RetryPolicy, is_transient
from .spec import QPOLICY_SET
from .tls import SSLOption
from .tracing import JobTracing
from .types import Job, QueuePolicy, is_at_most_once
from .work_reports import RUNNING, Running, error_text, report_progress, result_body

if TYPE_CHECKING:
    from opentelemetry.trace import TracerProvider

__all__ = ["Worker", "report_progress"]

log = logging.getLogger("disq_client.worker")

Handler = Callable[[Job], object]  # a function, or a coroutine function
H = TypeVar("H", bound=Handler)

# GETJOB failing (no node answers, ...): try again for ever, backing off to 2 s.
FETCH_RETRY = RetryPolicy(max_attempts=None, base_delay=0.05, max_delay=2.0)
# ACK or NACK failing (the client already failed over): three tries, 0.1 s then 0.5 s
# apart; then the job comes back after its RETRY anyway.
SETTLE_RETRY = RetryPolicy(max_attempts=3, base_delay=0.1, max_delay=0.5, multiplier=5.0,
                           jitter=0.0)
# A failing job: given up after its 25th delivery (as Faktory's 25 retries), NACKed
# meanwhile with a delay doubling from 1 s up to 10 min (about 3 hours in all).
DELIVERY_LIMIT = 25
GRACE_MS = 30_000  # running jobs' time to finish at shutdown
HEARTBEAT_AFTER_MS = 500  # a job running this long starts its WORKING heartbeats
RETRY_BACKOFF = (1000, 600_000)
# Jobs whose last traceback is remembered (logged again only if it changes).
TRACEBACKS_KEPT = 10_000


@dataclass(slots=True)
class _Task:
    queue: str
    handler: Handler
    is_async: bool
    max_deliveries: int | None = None  # the queue policy the worker sets, if any
    backoff: tuple[int, int] | None = None
    policy: QueuePolicy | None = None  # the queue's policy when the worker started

    @property
    def sets_policy(self) -> bool:
        return self.max_deliveries is not None or self.backoff is not None

    def server_limit(self, job: Job) -> int | None:
        """The deliveries after which the server makes `job` a dead letter: the job's
        own MAXDELIVERIES, else the queue policy's (the task's or the one found)."""
        policy = self.policy
        return job.max_deliveries or self.max_deliveries or (
            policy.max_deliveries if policy is not None else None)

    @property
    def server_backs_off(self) -> bool:
        return self.backoff is not None or (
            self.policy is not None and self.policy.backoff is not None)

    @property
    def deadletter_queue(self) -> str:
        return self.policy.deadletter if self.policy is not None else f"dead:{self.queue}"

    def last_delivery(self, job: Job) -> int | None:
        """The delivery `job` is at (1: the first), if the counters show it is its last
        one for the server: a NACK makes it a dead letter. None if it is not, or the
        worker cannot tell."""
        delivery = delivery_of(job)
        limit = self.server_limit(job)
        return delivery if delivery is not None and limit and delivery >= limit else None


def delivery_of(job: Job) -> int | None:
    """The delivery `job` is at (1: the first), from its counters, if fetched."""
    if job.nacks is None or job.additional_deliveries is None:
        return None
    return job.nacks + job.additional_deliveries + 1


def backoff_ms(backoff: tuple[int, int], delivery: int) -> int:
    """The wait after a job's `delivery`th failed delivery: min(max, base * 2^(n-1))
    ms, +-20% so that jobs which failed together do not all come back together (the
    server's BACKOFF policy waits the same)."""
    base, top = backoff
    return int(min(top, base * 2 ** min(delivery - 1, 40)) * random.uniform(0.8, 1.2))


def check_retry_options(delivery_limit: int | None,
                        retry_backoff: tuple[int, int] | None) -> None:
    """ValueError for a worker's delivery_limit or retry_backoff out of range (the
    bounds of the server's MAXDELIVERIES and BACKOFF)."""
    option = QPOLICY_SET.by_field["max_deliveries"]
    if delivery_limit is not None and not option.low <= delivery_limit <= option.high:
        raise ValueError(f"delivery_limit must be between {option.low} and {option.high}")
    option = QPOLICY_SET.by_field["backoff"]
    if retry_backoff is not None:
        base, top = retry_backoff
        if not option.low <= base <= top <= option.high:
            raise ValueError("retry_backoff needs base-ms and max-ms with "
                             f"{option.low} <= base-ms <= max-ms <= {option.high}")


def check_policy(max_deliveries: int | None, backoff: tuple[int, int] | None) -> None:
    """ValueError, with the server's message, for a task's policy QPOLICY SET would
    refuse: found when the task is registered rather than when the worker starts."""
    option = QPOLICY_SET.by_field["max_deliveries"]
    if max_deliveries is not None and not option.low <= max_deliveries <= option.high:
        raise ValueError(option.error)
    option = QPOLICY_SET.by_field["backoff"]
    if backoff is not None:
        base, top = backoff
        if not option.low <= base <= top <= option.high:
            raise ValueError(option.error)


def ordinal(n: int) -> str:
    """1st, 2nd, 3rd, 4th, 11th, 21st..."""
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def heartbeat_interval(retry_ms: int, fraction: float) -> float:
    """Seconds between WORKINGs for a job with this RETRY: a fraction of it, and early
    enough for the ±0.5 s the node adds to every requeue time."""
    retry = retry_ms / 1000
    return max(0.1, min(retry * fraction, retry - 0.75))


class Worker:
    """Register handlers with `@worker.task("queue")`, then `worker.run()` (or the
    `disq-worker module:worker` command). A handler gets the `Job`; its return value
    is the job's result (see the module's docstring), and it may report its progress
    with `report_progress`. `@worker.task("queue", max_deliveries=5, backoff=(1000,
    60000))` also sets the queue's policy (see the module's docstring).

    A job whose handler raised is NACKed after `retry_backoff` ((base_ms, max_ms): the
    wait doubles from base with each failed delivery; None: at once) and given up after
    `delivery_limit` deliveries (moved to its dead-letter queue; None: never), where
    the server has no limit or back-off of its own for it."""

    def __init__(self, nodes: Nodes = DEFAULT_NODE, *, concurrency: int = 8,
                 password: str | None = None, grace_ms: int | None = None,
                 grace: timedelta | None = None, poll_ms: int = 1000,
                 heartbeat_after_ms: int | None = None,
                 heartbeat_after: timedelta | None = None, heartbeat_fraction: float = 0.5,
                 timeout_ms: int | None = None, timeout: timedelta | None = None,
                 ssl: SSLOption = None,
                 delivery_limit: int | None = DELIVERY_LIMIT,
                 retry_backoff: tuple[int, int] | None = RETRY_BACKOFF,
                 tracing: bool | None = None,
                 tracer_provider: TracerProvider | None = None) -> None:
        if concurrency < 1:
            raise ValueError("concurrency must be at least 1")
        check_retry_options(delivery_limit, retry_backoff)
        self.delivery_limit = delivery_limit
        self.retry_backoff = retry_backoff
        self.nodes = nodes
        self.concurrency = concurrency
        self.password = password
        self.ssl = ssl  # True or an ssl.SSLContext (disq_client.ssl_context(...))
        # durations as the client takes them (durations.py): ms, or a timedelta
        given = to_ms("grace", grace, grace_ms)
        self.grace_ms = GRACE_MS if given is None else given
        self.poll_ms = poll_ms
        given = to_ms("heartbeat_after", heartbeat_after, heartbeat_after_ms)
        self.heartbeat_after_ms = HEARTBEAT_AFTER_MS if given is None else given
        self.heartbeat_fraction = heartbeat_fraction
        self.timeout_ms = to_ms("timeout", timeout, timeout_ms)  # None: the client's
        # OpenTelemetry (tracing.py): each handler in a CONSUMER span, child of the
        # producer's context carried in the job, when a tracer provider is set
        self.tracing = JobTracing(tracing, tracer_provider)
        self.tasks: dict[str, _Task] = {}
        self.acked = 0  # jobs acknowledged after their handler returned
        self.nacked = 0  # jobs given back after their handler raised
        self.dead_lettered = 0  # jobs given up at the worker's delivery limit
        # job ID -> where its last traceback was raised (one traceback per job logged)
        self._tracebacks: OrderedDict[str, tuple[str, ...]] = OrderedDict()
        self.abandoned = 0  # jobs still running when the grace period ended
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._stop_requested = False

    def task(self, queue: str, *, max_deliveries: int | None = None,
             backoff: tuple[int, int] | None = None) -> Callable[[H], H]:
        """Decorator: `handler(job)` processes the jobs of `queue`.

        `max_deliveries` (1..65535) and `backoff` ((base_ms, max_ms)) are set as the
        queue's policy (QPOLICY queue SET, only the fields given) when the worker starts
        serving: a job whose handler raised is NACKed and delivered again after
        min(max_ms, base_ms * 2^(n-1)) ms +-20% (n: its failures so far), and after
        `max_deliveries` deliveries it becomes a dead letter (`dead:<queue>`, or the
        policy's DEADLETTER). The policy is the queue's, for every consumer of it in the
        cluster: a later `qpolicy_set`, or another worker with other values, changes it.
        """
        check_policy(max_deliveries, backoff)

        def register(handler: H) -> H:
            if queue in self.tasks:
                raise ValueError(f"queue {queue!r} already has a handler")
            self.tasks[queue] = _Task(queue, handler, inspect.iscoroutinefunction(handler),
                                      max_deliveries, backoff)
            return handler
        return register

    # -- running ------------------------------------------------------------------------
    def run(self, install_signal_handlers: bool = True) -> None:
        """Process jobs until stopped (SIGTERM, SIGINT or `stop()`)."""
        asyncio.run(self.serve(install_signal_handlers))

    def stop(self) -> None:
        """Stop fetching and finish: callable from any thread or a signal handler."""
        self._stop_requested = True
        loop, event = self._loop, self._stop
        if loop is not None and event is not None:
            try:
                loop.call_soon_threadsafe(event.set)
            except RuntimeError:  # the loop is already closed
                pass

    async def serve(self, install_signal_handlers: bool = False) -> None:
        """The worker in the running loop; returns once stopped and drained."""
        if not self.tasks:
            raise RuntimeError("no handler registered: use @worker.task(queue)")
        loop = asyncio.get_running_loop()
        self._loop, self._stop = loop, asyncio.Event()
        if self._stop_requested:
            self._stop.set()
        if install_signal_handlers:
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(sig, self.stop)
        executor = ThreadPoolExecutor(self.concurrency, thread_name_prefix="disq-worker")
        client = AsyncClient(self.nodes, password=self.password, timeout_ms=self.timeout_ms,
                             ssl=self.ssl, tracing=self.tracing.enabled,
                             tracer_provider=self.tracing.provider)
        running: set[asyncio.Task[None]] = set()
        jobs_of: dict[asyncio.Task[None], Job] = {}
        try:
            await self._set_policies(client)
            await self._fetch_loop(client, executor, running, jobs_of)
            await self._drain(client, running, jobs_of)
        finally:
            if install_signal_handlers:
                for sig in (signal.SIGTERM, signal.SIGINT):
                    loop.remove_signal_handler(sig)
            executor.shutdown(wait=False, cancel_futures=True)
            await client.close()
            self._loop = self._stop = None

    async def _set_policies(self, client: AsyncClient) -> None:
        """QPOLICY SET for the tasks with `max_deliveries` or `backoff`, before the first
        GETJOB: tried again while the cluster cannot be reached (or until stopped); a
        refusal that will not pass raises. The other tasks read their queue's policy
        (QPOLICY GET), whose limit and back-off then come before the worker's."""
        assert self._stop is not None
        stop = self._stop
        for task in self.tasks.values():
            if not task.sets_policy:
                try:
                    task.policy = await client.qpolicy_get(task.queue)
                except DisqError as exc:  # Disque has no QPOLICY: the worker's own rules
                    log.debug("QPOLICY GET %s: %s", task.queue, exc)
                continue
            attempts = FETCH_RETRY.attempts()
            while not stop.is_set():
                try:
                    await client.qpolicy_set(task.queue, max_deliveries=task.max_deliveries,
                                             backoff=task.backoff)
                except DisqError as exc:
                    if not is_transient(exc):
                        raise
                    log.warning("setting the policy of queue %s failed: %s", task.queue, exc)
                    pause = attempts.failed()  # never None: FETCH_RETRY has no limit
                    try:
                        await asyncio.wait_for(stop.wait(), pause)
                    except TimeoutError:
                        pass
                    continue
                log.info("queue %s: policy max_deliveries=%s backoff=%s", task.queue,
                         task.max_deliveries, task.backoff)
                break

    async def _fetch_loop(self, client: AsyncClient, executor: ThreadPoolExecutor,
                          running: set[asyncio.Task[None]],
                          jobs_of: dict[asyncio.Task[None], Job]) -> None:
        assert self._stop is not None
        stop = self._stop
        queues = list(self.tasks)
        stop_waiter = asyncio.ensure_future(stop.wait())
        fetching = FETCH_RETRY.attempts()
        try:
            while not stop.is_set():
                free = self.concurrency - len(running)
                if free <= 0:
                    await asyncio.wait([stop_waiter, *running],
                                       return_when=asyncio.FIRST_COMPLETED)
                    continue
                try:
                    jobs = await client.get_jobs(*queues, count=free, timeout_ms=self.poll_ms,
                                                 with_counters=True)
                except DisqError as exc:
                    log.warning("fetching jobs failed: %s", exc)
                    pause = fetching.failed()  # never None: FETCH_RETRY has no limit
                    await asyncio.wait([stop_waiter], timeout=pause)
                    continue
                fetching.succeeded()
                for job in jobs:
                    task = asyncio.create_task(self._process(client, executor, job))
                    running.add(task)
                    jobs_of[task] = job
                    task.add_done_callback(running.discard)
                    task.add_done_callback(lambda t: jobs_of.pop(t, None))
        finally:
            stop_waiter.cancel()

    async def _drain(self, client: AsyncClient, running: set[asyncio.Task[None]],
                     jobs_of: dict[asyncio.Task[None], Job]) -> None:
        if not running:
            return
        log.info("stopping: waiting up to %d ms for %d running jobs", self.grace_ms,
                 len(running))
        _, late = await asyncio.wait(set(running), timeout=self.grace_ms / 1000)
        if not late:
            return
        abandoned = [jobs_of[t] for t in late if t in jobs_of]
        for task in late:
            task.cancel()
        await asyncio.wait(late, timeout=1.0)
        self.abandoned += len(abandoned)
        ids = [job.id for job in abandoned]
        log.warning("grace period over: giving back %d running jobs", len(ids))
        if ids:
            try:
                await client.enqueue(*ids)
            except DisqError as exc:  # they come back after their RETRY anyway
                log.warning("could not give back %s: %s", ids, exc)

    # -- one job ------------------------------------------------------------------------
    async def _process(self, client: AsyncClient, executor: ThreadPoolExecutor,
                       job: Job) -> None:
        task = self.tasks[job.queue]
        loop = asyncio.get_running_loop()
        traced = await self.tracing.processing(client, job)  # (a SHOW, if traced)
        heartbeat: list[asyncio.Task[None]] = []  # started only if the job runs long
        timer = None
        if not is_at_most_once(job.id):
            timer = loop.call_later(self.heartbeat_after_ms / 1000, lambda: heartbeat.append(
                loop.create_task(self._heartbeat(client, job))))
        token = RUNNING.set(Running(client, job, loop))  # (this task's context)
        returned: object = None
        try:
            with traced:  # the span is current in the handler's context (copied below)
                try:
                    if task.is_async:
                        returned = await cast(Awaitable[object], task.handler(job))
                    else:
                        returned = await loop.run_in_executor(
                            executor, contextvars.copy_context().run, task.handler, job)
                except Exception as exc:
                    traced.failed(exc)
                    failure: BaseException | None = exc
                else:
                    failure = None
        finally:
            RUNNING.reset(token)
            if timer is not None:
                timer.cancel()
            for beat in heartbeat:
                beat.cancel()
        if failure is None:
            if await self._settle(client, job, True, result=self._result(job, returned)):
                self.acked += 1
            return
        delivery = delivery_of(job)
        if (delivery is not None and self.delivery_limit is not None
                and not task.server_limit(job) and delivery >= self.delivery_limit):
            self._log_failure(job, failure, f"{ordinal(delivery)} delivery",
                              f"the limit ({self.delivery_limit}): giving it up")
            await self._give_up(client, task, job, delivery)
            return
        delay_ms = None
        if self.retry_backoff is not None and not task.server_backs_off:
            delay_ms = backoff_ms(self.retry_backoff, delivery or 1)
        self._log_failure(job, failure, ordinal(delivery) + " delivery" if delivery else "",
                          f"NACK, again in {delay_ms / 1000:.1f}s" if delay_ms else "NACK")
        if await self._settle(client, job, False, delay_ms, error_text(failure)):
            self.nacked += 1
            last = task.last_delivery(job)
            if last is not None:
                log.warning("job %s of queue %s failed its %s and last delivery: dead letter",
                            job.id, job.queue, ordinal(last))

    def _log_failure(self, job: Job, failure: BaseException, which: str, then: str) -> None:
        """The handler's traceback the first time a job fails here (or when it fails
        elsewhere than the last time); otherwise one line: a job that keeps failing
        writes a line per delivery, not a traceback."""
        frames = traceback.extract_tb(failure.__traceback__)
        where = (type(failure).__qualname__,
                 *(f"{f.filename}:{f.lineno}" for f in frames))
        seen = self._tracebacks.pop(job.id, None) == where
        self._tracebacks[job.id] = where
        if len(self._tracebacks) > TRACEBACKS_KEPT:
            self._tracebacks.popitem(last=False)
        message = f"job %s of queue %s failed{' ' + which if which else ''}: %s"
        if seen:
            log.warning(message + " (%s: %s, traceback as before)", job.id, job.queue, then,
                        type(failure).__name__, failure)
        else:
            log.error(message, job.id, job.queue, then, exc_info=failure)

    async def _give_up(self, client: AsyncClient, task: _Task, job: Job,
                       delivery: int) -> None:
        """The worker's delivery limit: `job` goes to its queue's dead-letter queue (a
        new job with its body), then is acknowledged; if the copy cannot be added the job
        is left to come back after its RETRY, never dropped."""
        target = task.deadletter_queue
        try:
            copy_id = await client.add_job(target, job.body)
        except DisqError as exc:
            log.warning("job %s of queue %s: adding it to %s failed (%s); it comes back "
                        "after its RETRY", job.id, job.queue, target, exc)
            return
        self._tracebacks.pop(job.id, None)
        log.warning("job %s of queue %s failed its %s and last delivery: moved to %s as %s",
                    job.id, job.queue, ordinal(delivery), target, copy_id)
        if await self._settle(client, job, True):
            self.dead_lettered += 1

    @staticmethod
    def _result(job: Job, returned: object) -> bytes | None:
        try:
            return result_body(returned)
        except (TypeError, ValueError) as exc:
            log.warning("job %s of queue %s: its handler's return value is not JSON (%s): "
                        "acknowledged without a result", job.id, job.queue, exc)
            return None

    async def _settle(self, client: AsyncClient, job: Job, ok: bool,
                      delay_ms: int | None = None, error: bytes | None = None,
                      result: bytes | None = None) -> bool:
        """ACK (with RESULT `result`) or NACK (DELAY-MS `delay_ms`, ERROR `error`),
        trying a few times (SETTLE_RETRY) if the error may pass: the client already
        moves to another node if this one fails. If it still fails the job comes back
        after its RETRY. A refusal of an extension (Disque has none; a result over
        job-max-body) is tried again without it."""
        failures = 0
        while True:
            try:
                if ok:
                    await client.ack(job.id, result=result)
                else:
                    await client.nack(job.id, delay_ms=delay_ms, error=error)
                return True
            except DisqError as exc:
                log.warning("%s of %s failed: %s", "ACK" if ok else "NACK", job.id, exc)
                if not is_transient(exc) and (result is not None or error is not None):
                    result = error = None  # without RESULT / ERROR
                    continue
                if delay_ms is not None and not is_transient(exc):
                    delay_ms = None  # a server without NACK DELAY-MS (Disque): at once
                    continue
                failures += 1
                if not (is_transient(exc) and SETTLE_RETRY.allows(failures)):
                    return False
                await asyncio.sleep(SETTLE_RETRY.delay(failures))

    async def _heartbeat(self, client: AsyncClient, job: Job) -> None:
        """From `heartbeat_after_ms` into the job until it ends."""
        try:
            info = await client.show(job.id)
        except DisqError as exc:
            log.warning("SHOW %s failed: %s", job.id, exc)
            info = None
        if info is not None:
            if info.state == "acked":
                return
            delay = heartbeat_interval(info.retry_ms, self.heartbeat_fraction)
            if info.next_requeue_within is not None:
                delay = min(delay, max(info.next_requeue_within / 1000 - 0.75, 0.0))
            await asyncio.sleep(delay)
        while True:
            started = time.monotonic()
            try:
                retry = await client.working(job.id)
            except (NoJobError, TooLateError) as exc:
                log.warning("job %s can no longer be postponed: %s", job.id, exc)
                return
            except DisqError as exc:
                log.warning("WORKING %s failed: %s", job.id, exc)
                retry = 1000
            delay = heartbeat_interval(retry, self.heartbeat_fraction)
            await asyncio.sleep(max(delay - (time.monotonic() - started), 0.0))
