"""The server's clocks: the job timer (one `loop.call_later` for every job's next
moment), the cron (hz times a second: ops sampling, queue and DEDUP GC, the AOF's
cron, idle and backlogged clients, memory peak) and the software watchdog. A part of
`Server`."""

from __future__ import annotations

import asyncio
import faulthandler
import logging
import time
from typing import TYPE_CHECKING, Any

from ..node import now_ms
from .process import log_stream
from .reactions import reacts_to

if TYPE_CHECKING:
    from ..aof.writer import AppendOnlyFile
    from ..config import Config
    from ..node import Node
    from .connection import Client
    from .hotstate import HotState
    from .latency import LatencyMonitor
    from .records import ConfigRecords

log = logging.getLogger("disq")


class Cron:
    """Server's timers (a mixin: the state is set in Server.__init__)."""

    config: Config
    loop: asyncio.AbstractEventLoop | None
    node: Node
    aof: AppendOnlyFile
    latency: LatencyMonitor
    hot: HotState
    backlogged: dict[Client, float]
    memory_peak: int
    _timer: asyncio.TimerHandle | None
    _timer_when: int
    _cron: asyncio.TimerHandle | None
    replication: Any
    user_sync: Any
    config_records: ConfigRecords

    if TYPE_CHECKING:  # the other parts of Server: Stats, ClientRegistry, Server
        def _sample_ops(self, now: float) -> None: ...
        def used_memory(self) -> int: ...
        def _close_idle_clients(self, now: float) -> None: ...
        def _check_output_limits(self, now: float, clients: Any = None) -> None: ...
        def log_exception(self, message: str, exc: BaseException) -> None: ...

    # -- the job timer -------------------------------------------------------------------
    def _arm_timer(self, when_ms: int) -> None:
        if self._timer is not None:
            if self._timer_when <= when_ms:
                return
            self._timer.cancel()
        delay = max(when_ms - now_ms(), 0) / 1000
        self._timer_when = when_ms
        self._timer = self.loop.call_later(delay, self._on_timer)  # type: ignore[union-attr]

    def _serve_ready_soon(self) -> None:
        """The node marked a queue whose consumers are to be served: at the end of
        this loop turn, unless a command's end serves them first (Client._execute)."""
        loop = self.loop
        if loop is not None:
            loop.call_soon(self.node.serve_ready)

    def _on_timer(self) -> None:
        self._timer = None
        threshold = self.config.latency_monitor_threshold
        start = time.monotonic() if threshold else 0.0
        try:
            deadline = self.node.run_timers()
        except Exception as exc:  # never let one bad job stop every timer
            self.log_exception("Error processing job timers", exc)
            deadline = now_ms() + 100
        if threshold:  # Disque's "jobs-processing" event
            elapsed_ms = int((time.monotonic() - start) * 1000)
            if elapsed_ms >= threshold:
                self.latency.add("jobs-processing", elapsed_ms)
        if deadline is not None:
            self._arm_timer(deadline)

    # -- cron ------------------------------------------------------------------------------
    def _schedule_cron(self) -> None:
        self._cron = self.loop.call_later(  # type: ignore[union-attr]
            1 / self.config.hz, self._run_cron)

    def _run_cron(self) -> None:
        try:
            self.hot.unixtime = now = time.time()
            self._sample_ops(now)
            self.node.gc_queues(int(now * 1000))
            self.node.dedup.sweep(int(now * 1000))
            if self.replication is not None:
                self.replication.recurring.cron(int(now * 1000))
                self.replication.failures.cron(int(now * 1000))
                self.user_sync.cron(int(now * 1000))
            self.node.schedules.sweep(int(now * 1000))  # tombstones
            self.node.policies.sweep(int(now * 1000))
            self.config_records.cron(int(now * 1000))
            self.aof.cron()
            if self.config.timeout:
                self._close_idle_clients(now)
            if self.backlogged:
                self._check_output_limits(now)
            if self.config.watchdog_period:
                self._arm_watchdog()
            used = self.used_memory()
            if used > self.memory_peak:
                self.memory_peak = used
        except Exception as exc:
            self.log_exception("Error in cron", exc)
        self._schedule_cron()

    # -- the software watchdog (watchdog-period) --------------------------------------------
    def _arm_watchdog(self) -> None:
        """Re-armed by every cron run: if the loop does not come back within the period,
        faulthandler's own thread writes every thread's stack to the log, as Redis's
        SIGALRM watchdog does. The period is at least two cron periods (Redis's rule),
        so a healthy loop never trips it."""
        period_ms = max(self.config.watchdog_period, 2000 // self.config.hz)
        faulthandler.dump_traceback_later(period_ms / 1000, file=log_stream())

    @reacts_to("watchdog-period")
    def _watchdog_changed(self, period_ms: int) -> None:
        if self.loop is None:
            return
        if period_ms:
            log.warning("Watchdog period set to %d ms: a stack trace is logged when the "
                        "event loop is blocked that long.", period_ms)
            self._arm_watchdog()
        else:
            faulthandler.cancel_dump_traceback_later()
