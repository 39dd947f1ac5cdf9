"""A worker: handlers per queue, N jobs at a time, ack on success, nack on exception.

Shape: one asyncio loop with an `AsyncClient`. A fetch loop asks for as many jobs as
there are free slots (GETJOB COUNT free TIMEOUT poll_ms, from every queue that has a
handler) and starts one task per job. Coroutine handlers run on the loop; plain
functions run in a thread pool of `concurrency` threads. Then:

- the handler returns: ACKJOB (the job is done, once);
- it raises: NACK, so the job is queued again at once and its nack counter grows
  (handlers see it with `job.nacks`, to give up on a job that keeps failing). A task
  registered with `max_deliveries` and/or `backoff` sets its queue's policy (QPOLICY
  queue SET, a disq extension) when the worker starts serving: the server then holds a
  NACKed job back for the back-off and makes it a dead letter (moved to its dead-letter
  queue, `dead:<queue>` by default) after its last delivery. That policy is the
  queue's, shared by every consumer of the queue in the cluster: a later `qpolicy_set`
  or another worker registering other values changes it for all;
- it runs long: WORKING heartbeats keep the job from being queued again while it runs.
  After `heartbeat_after` seconds SHOW gives the job's RETRY and when it would be queued
  again; WORKING is sent before that, then every `heartbeat_fraction` of RETRY. Jobs
  with RETRY 0 (never queued again, seen in their ID) get none.
- SIGTERM or SIGINT (or `stop()`): no new GETJOB; the one in flight (at most `poll_ms`)
  completes and its jobs run; running jobs get `grace` seconds to finish and be acked.
  Jobs still running then are given back with ENQUEUE (queued again now, counted as an
  additional delivery) and `run()` returns. Their threads cannot be stopped: the
  `disq-worker` command then exits without waiting for them.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import inspect
import logging
import os
import signal
import sys
import threading
import time
import traceback
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TypeVar, cast

from .aio import AsyncClient
from .core import DEFAULT_NODE, Nodes
from .errors import DisqError, NoJobError, TooLateError
from .retry import RetryPolicy, is_transient
from .spec import QPOLICY_SET
from .tls import SSLOption
from .types import Job, is_at_most_once

log = logging.getLogger("disq_client.worker")

Handler = Callable[[Job], object]  # a function, or a coroutine function
H = TypeVar("H", bound=Handler)

# GETJOB failing (no node answers, ...): try again for ever, backing off to 2 s.
FETCH_RETRY = RetryPolicy(max_attempts=None, base_delay=0.05, max_delay=2.0)
# ACK or NACK failing (the client already failed over): three tries, 0.1 s then 0.5 s
# apart; then the job comes back after its RETRY anyway.
SETTLE_RETRY = RetryPolicy(max_attempts=3, base_delay=0.1, max_delay=0.5, multiplier=5.0,
                           jitter=0.0)


@dataclass(slots=True)
class _Task:
    queue: str
    handler: Handler
    is_async: bool
    max_deliveries: int | None = None  # the queue policy the worker sets, if any
    backoff: tuple[int, int] | None = None

    @property
    def sets_policy(self) -> bool:
        return self.max_deliveries is not None or self.backoff is not None

    def last_delivery(self, job: Job) -> int | None:
        """The delivery `job` is at (1: the first), if the counters show it is its last
        one (the job's own MAXDELIVERIES, else the task's): a NACK makes it a dead
        letter. None if it is not, or the worker cannot tell."""
        if job.nacks is None or job.additional_deliveries is None:
            return None
        limit = job.max_deliveries or self.max_deliveries
        delivery = job.nacks + job.additional_deliveries + 1
        return delivery if limit and delivery >= limit else None


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


def heartbeat_interval(retry: int, fraction: float) -> float:
    """Seconds between WORKINGs for a job with this RETRY: a fraction of it, and early
    enough for the ±0.5 s the node adds to every requeue time."""
    return max(0.1, min(retry * fraction, retry - 0.75))


class Worker:
    """Register handlers with `@worker.task("queue")`, then `worker.run()` (or the
    `disq-worker module:worker` command). A handler gets the `Job`; its return value
    is ignored. `@worker.task("queue", max_deliveries=5, backoff=(1000, 60000))` also
    sets the queue's policy (see the module's docstring)."""

    def __init__(self, nodes: Nodes = DEFAULT_NODE, *, concurrency: int = 8,
                 password: str | None = None, grace: float = 30.0, poll_ms: int = 1000,
                 heartbeat_after: float = 0.5, heartbeat_fraction: float = 0.5,
                 timeout: float | None = 5.0, ssl: SSLOption = None) -> None:
        if concurrency < 1:
            raise ValueError("concurrency must be at least 1")
        self.nodes = nodes
        self.concurrency = concurrency
        self.password = password
        self.ssl = ssl  # True or an ssl.SSLContext (disq_client.ssl_context(...))
        self.grace = grace
        self.poll_ms = poll_ms
        self.heartbeat_after = heartbeat_after
        self.heartbeat_fraction = heartbeat_fraction
        self.timeout = timeout
        self.tasks: dict[str, _Task] = {}
        self.acked = 0  # jobs acknowledged after their handler returned
        self.nacked = 0  # jobs given back after their handler raised
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
        client = AsyncClient(self.nodes, password=self.password, timeout=self.timeout,
                             ssl=self.ssl)
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
        refusal that will not pass raises."""
        assert self._stop is not None
        stop = self._stop
        for task in self.tasks.values():
            if not task.sets_policy:
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
        log.info("stopping: waiting up to %.1fs for %d running jobs", self.grace, len(running))
        _, late = await asyncio.wait(set(running), timeout=self.grace)
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
        heartbeat: list[asyncio.Task[None]] = []  # started only if the job runs long
        timer = None
        if not is_at_most_once(job.id):
            timer = loop.call_later(self.heartbeat_after, lambda: heartbeat.append(
                loop.create_task(self._heartbeat(client, job))))
        try:
            if task.is_async:
                await cast(Awaitable[object], task.handler(job))
            else:
                await loop.run_in_executor(executor, task.handler, job)
        except Exception:
            log.exception("job %s of queue %s failed: NACK", job.id, job.queue)
            ok = False
        else:
            ok = True
        finally:
            if timer is not None:
                timer.cancel()
            for beat in heartbeat:
                beat.cancel()
        if await self._settle(client, job, ok):
            if ok:
                self.acked += 1
                return
            self.nacked += 1
            last = task.last_delivery(job)
            if last is not None:
                log.warning("job %s of queue %s failed its %s and last delivery: dead letter",
                            job.id, job.queue, ordinal(last))

    async def _settle(self, client: AsyncClient, job: Job, ok: bool) -> bool:
        """ACK or NACK, trying a few times (SETTLE_RETRY) if the error may pass: the
        client already moves to another node if this one fails. If it still fails the
        job comes back after its RETRY."""
        failures = 0
        while True:
            try:
                if ok:
                    await client.ack(job.id)
                else:
                    await client.nack(job.id)
                return True
            except DisqError as exc:
                log.warning("%s of %s failed: %s", "ACK" if ok else "NACK", job.id, exc)
                failures += 1
                if not (is_transient(exc) and SETTLE_RETRY.allows(failures)):
                    return False
                await asyncio.sleep(SETTLE_RETRY.delay(failures))

    async def _heartbeat(self, client: AsyncClient, job: Job) -> None:
        """From `heartbeat_after` seconds into the job until it ends."""
        try:
            info = await client.show(job.id)
        except DisqError as exc:
            log.warning("SHOW %s failed: %s", job.id, exc)
            info = None
        if info is not None:
            if info.state == "acked":
                return
            delay = heartbeat_interval(info.retry, self.heartbeat_fraction)
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
                retry = 1
            delay = heartbeat_interval(retry, self.heartbeat_fraction)
            await asyncio.sleep(max(delay - (time.monotonic() - started), 0.0))


# -- the disq-worker command ---------------------------------------------------------------
def load_worker(spec: str) -> Worker:
    """'package.module:name' -> the Worker that module defines under that name."""
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise SystemExit(f"disq-worker: expected module:attribute, got {spec!r}")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name and (module_name + ".").startswith(exc.name + "."):
            raise SystemExit(f"disq-worker: no module named {exc.name!r} (looked in "
                             f"{os.getcwd()} and sys.path; run it from the directory that "
                             "holds the module, or set PYTHONPATH)") from None
        raise SystemExit(f"disq-worker: cannot import {module_name!r}: "
                         f"{_describe(exc)}") from None
    except Exception as exc:  # the module's own code failed: say where, in one line
        raise SystemExit(f"disq-worker: cannot import {module_name!r}: "
                         f"{_describe(exc)}") from None
    worker = getattr(module, attr, None)
    if not isinstance(worker, Worker):
        raise SystemExit(f"disq-worker: {spec} is not a disq_client.Worker")
    return worker


def _describe(exc: BaseException) -> str:
    """`ValueError: bad value (app/jobs.py, line 3)`: the error and where it was raised."""
    text = f"{type(exc).__name__}: {exc}"
    frames = traceback.extract_tb(exc.__traceback__)
    if frames and not isinstance(exc, SyntaxError):  # a SyntaxError names its line itself
        text += f" ({frames[-1].filename}, line {frames[-1].lineno})"
    return text


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="disq-worker", description="Run the handlers of a disq_client.Worker.")
    parser.add_argument("worker", help="module:attribute of the Worker, e.g. app.jobs:worker")
    parser.add_argument("--nodes", help="seed nodes, host:port[,host:port...] "
                        "(default: the Worker's)")
    parser.add_argument("--concurrency", "-c", type=int, help="jobs run at the same time")
    parser.add_argument("--grace", type=float, help="seconds running jobs get at shutdown")
    parser.add_argument("--password", help="AUTH password (default: $DISQ_PASSWORD)")
    parser.add_argument("--log-level", default="INFO")
    args = parser.parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    worker = load_worker(args.worker)
    if args.nodes:
        worker.nodes = args.nodes
    if args.concurrency:
        worker.concurrency = args.concurrency
    if args.grace is not None:
        worker.grace = args.grace
    password = args.password or os.environ.get("DISQ_PASSWORD")
    if password:
        worker.password = password
    log.info("disq-worker: queues %s, concurrency %d", ", ".join(worker.tasks),
             worker.concurrency)
    worker.run()
    log.info("disq-worker: stopped (%d acked, %d nacked, %d given back)", worker.acked,
             worker.nacked, worker.abandoned)
    if worker.abandoned and any(t.name.startswith("disq-worker")
                                for t in threading.enumerate()):
        sys.stdout.flush()
        sys.stderr.flush()
        logging.shutdown()
        os._exit(0)  # handler threads past the grace period: do not wait for them
    sys.exit(0)
