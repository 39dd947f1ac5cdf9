"""The server's clocks: the job timer (one `loop.call_later` for every job's next
moment), the cron (hz times a second: ops sampling, queue and DEDUP GC, the AOF's
cron, idle and backlogged clients, memory peak) and the software watchdog. A part of
`Server` (`server.housekeeping`)."""

from __future__ import annotations

import asyncio
import faulthandler
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from ..node import now_ms
from .process import log_stream
from .reactions import reacts_to

if TYPE_CHECKING:
    from ..aof.writer import AppendOnlyFile
    from ..config import Config
    from ..node import Node
    from .clients import ClientRegistry
    from .records import ConfigRecords
    from .stats import Stats

log = logging.getLogger("disq")


class Housekeeping:
    """The server's timers (`server.housekeeping`): made in Server.prepare, running
    from `start` (the loop and the AOF are made in Server.serve)."""

    __slots__ = ("config", "node", "stats", "clients", "config_records", "loop", "aof",
                 "cluster_ticks", "_timer", "_timer_when", "_cron")

    def __init__(self, config: Config, node: Node, stats: Stats, clients: ClientRegistry,
                 config_records: ConfigRecords) -> None:
        self.config = config
        self.node = node
        self.stats = stats
        self.clients = clients
        self.config_records = config_records
        self.loop: asyncio.AbstractEventLoop | None = None
        self.aof: AppendOnlyFile
        # The cluster's parts' own crons (CRON's ticks, dead letters and rates, the
        # users' sync), given the time in ms: added once the cluster is connected.
        self.cluster_ticks: list[Callable[[int], None]] = []
        self._timer: asyncio.TimerHandle | None = None
        self._timer_when = 0
        self._cron: asyncio.TimerHandle | None = None

    def start(self, loop: asyncio.AbstractEventLoop, aof: AppendOnlyFile) -> None:
        """The job timer may be armed from now on (the cron starts with
        `schedule_cron`, once the node is up)."""
        self.loop = loop
        self.aof = aof

    # -- the job timer -------------------------------------------------------------------
    def arm_timer(self, when_ms: int) -> None:
        if self._timer is not None:
            if self._timer_when <= when_ms:
                return
            self._timer.cancel()
        delay = max(when_ms - now_ms(), 0) / 1000
        self._timer_when = when_ms
        self._timer = self.loop.call_later(delay, self._on_timer)  # type: ignore[union-attr]

    def serve_ready_soon(self) -> None:
        """The node marked a queue whose consumers are to be served: at the end of
        this loop turn, unless a command's end serves them first (Client._execute)."""
        loop = self.loop
        if loop is not None:
            loop.call_soon(self.node.consumers.serve_ready)

    def serve_ends_soon(self) -> None:
        """Jobs that WAITJOBs watch ended: their watchers are told at the end of this
        loop turn."""
        loop = self.loop
        if loop is not None:
            loop.call_soon(self.node.ends.serve_ready)

    def _on_timer(self) -> None:
        self._timer = None
        threshold = self.config.latency_monitor_threshold
        start = time.monotonic() if threshold else 0.0
        try:
            deadline = self.node.wakeups.run()
        except Exception as exc:  # never let one bad job stop every timer
            log.error("Error processing job timers: %r", exc, exc_info=exc)
            deadline = now_ms() + 100
        if threshold:  # Disque's "jobs-processing" event
            elapsed_ms = int((time.monotonic() - start) * 1000)
            if elapsed_ms >= threshold:
                self.stats.latency.add("jobs-processing", elapsed_ms)
        if deadline is not None:
            self.arm_timer(deadline)

    # -- cron ------------------------------------------------------------------------------
    def schedule_cron(self) -> None:
        self._cron = self.loop.call_later(  # type: ignore[union-attr]
            1 / self.config.hz, self._run_cron)

    def _run_cron(self) -> None:
        try:
            stats = self.stats
            stats.hot.unixtime = now = time.time()
            stats.sample_ops(now)
            self.node.gc_queues(int(now * 1000))
            self.node.dedup.sweep(int(now * 1000))
            if self.node.ends.kept:
                self.node.expire_results(int(now * 1000))
            for tick in self.cluster_ticks:
                tick(int(now * 1000))
            self.node.schedules.sweep(int(now * 1000))  # tombstones
            self.node.policies.sweep(int(now * 1000))
            self.config_records.cron(int(now * 1000))
            self.aof.cron()
            clients = self.clients
            if self.config.timeout:
                clients.close_idle(now)
            if clients.backlogged:
                clients.check_output_limits(now)
            if self.config.watchdog_period:
                self.arm_watchdog()
            used = stats.used_memory()
            if used > stats.memory_peak:
                stats.memory_peak = used
        except Exception as exc:
            log.error("Error in cron: %r", exc, exc_info=exc)
        self.schedule_cron()

    # -- the software watchdog (watchdog-period) --------------------------------------------
    def arm_watchdog(self) -> None:
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
            self.arm_watchdog()
        else:
            faulthandler.cancel_dump_traceback_later()
