"""What the server measures: commands and their time, ops per second, slow commands
(SLOWLOG and LATENCY's "command" event), the memory in use and the maxmemory marks it
gives the core; CONFIG RESETSTAT clears them. A part of `Server` (`server.stats`)."""

from __future__ import annotations

import asyncio
import time
from collections import deque
from typing import TYPE_CHECKING

from ..replication.stats import NodeStats
from .info import rss_bytes
from .latency import LatencyMonitor
from .reactions import reacts_to

if TYPE_CHECKING:
    from ..config import Config
    from ..node import Node
    from .clients import ClientRegistry
    from .hotstate import HotState
    from .table import CommandSpec

# used_memory of a node without jobs: about what an empty Disque node reports. Like
# Disque's allocator count, used_memory is the data (this plus the jobs' footprint),
# not the interpreter's RSS (INFO used_memory_rss), so maxmemory and the memory
# levels mean what they mean in Disque (its tests run at maxmemory 3mb).
EMPTY_NODE_MEMORY = 1024 * 1024


class Stats:
    """The server's measures (`server.stats`)."""

    __slots__ = ("config", "node", "commands", "hot", "clients", "start_time", "loop",
                 "ops_per_sec", "input_kbps", "output_kbps", "_ops_samples",
                 "memory_peak", "_memory_cache", "baseline_rss", "slowlog", "slowlog_id",
                 "slowlog_threshold", "latency")

    def __init__(self, config: Config, node: Node, commands: dict[bytes, CommandSpec],
                 hot: HotState, clients: ClientRegistry, start_time: float) -> None:
        self.config = config
        self.node = node
        self.commands = commands
        self.hot = hot
        self.clients = clients
        self.start_time = start_time
        self.loop: asyncio.AbstractEventLoop | None = None  # the server's, once it runs
        self.ops_per_sec = 0
        self.input_kbps = 0.0
        self.output_kbps = 0.0
        self._ops_samples: deque[tuple[float, int, int, int]] = deque(maxlen=16)
        self.memory_peak = 0
        self._memory_cache = (0.0, 0)
        self.baseline_rss = 0  # RSS before the data loads (fragmentation_ratio)
        self.slowlog: deque[tuple[int, int, int, list[bytes]]] = deque(
            maxlen=config.slowlog_max_len)
        self.slowlog_id = 0  # id of the next SLOWLOG entry
        self.slowlog_threshold = slowlog_usec(config.slowlog_log_slower_than)
        self.latency = LatencyMonitor()  # LATENCY's events: slow commands, the job timer
        hot.slow_usec = self._slow_usec()  # (this part alone writes it)

    # -- commands and traffic ----------------------------------------------------------
    @property
    def commands_processed(self) -> int:
        """Commands executed: the sum of the per-command counters (so the hot path
        counts once, in the command's spec)."""
        return sum(spec.calls for spec in self.commands.values())

    def sample_ops(self, now: float) -> None:
        samples = self._ops_samples
        samples.append((now, self.commands_processed, self.hot.net_input_bytes,
                        self.hot.net_output_bytes))
        if len(samples) >= 2:
            t0, c0, i0, o0 = samples[0]
            t1, c1, i1, o1 = samples[-1]
            dt = max(t1 - t0, 1e-6)
            self.ops_per_sec = int((c1 - c0) / dt)
            self.input_kbps = (i1 - i0) / dt / 1024
            self.output_kbps = (o1 - o0) / dt / 1024

    # -- slow commands (SLOWLOG, LATENCY) ---------------------------------------------------
    def _slow_usec(self) -> int:
        latency_ms = self.config.latency_monitor_threshold
        return min(self.slowlog_threshold, latency_ms * 1000 if latency_ms else 1 << 62)

    @reacts_to("slowlog-log-slower-than")
    def _slowlog_threshold_changed(self, usec: int) -> None:
        self.slowlog_threshold = slowlog_usec(usec)
        self.hot.slow_usec = self._slow_usec()

    @reacts_to("latency-monitor-threshold")
    def _latency_threshold_changed(self, threshold_ms: int) -> None:
        self.hot.slow_usec = self._slow_usec()

    @reacts_to("slowlog-max-len")
    def _slowlog_max_len_changed(self, length: int) -> None:
        self.slowlog = deque(self.slowlog, maxlen=max(length, 0))

    def slow_command(self, usec: int, args: list[bytes]) -> None:
        """A command took at least `slow_usec`: the slowlog and/or the latency monitor
        ("command" event) keep it."""
        if usec >= self.slowlog_threshold:
            self.slowlog_id += 1
            self.slowlog.append((self.slowlog_id - 1, int(time.time()), usec,
                                 _slowlog_args(args)))
        threshold = self.config.latency_monitor_threshold
        if threshold and usec // 1000 >= threshold:
            self.latency.add("command", usec // 1000)

    # -- memory --------------------------------------------------------------------------
    def used_memory(self) -> int:
        """Memory in use: an empty node's plus what its jobs and the results it keeps
        take (Node.job_bytes).
        Unlike RSS, it falls when jobs are acknowledged, so memory levels and
        maxmemory follow the data, as Disque's allocator count does."""
        return EMPTY_NODE_MEMORY + self.node.job_bytes

    def rss(self) -> int:
        """RSS, sampled at most every 100 ms (it is a /proc read)."""
        now = time.monotonic()
        stamp, value = self._memory_cache
        if now - stamp > 0.1:
            value = rss_bytes()
            self._memory_cache = (now, value)
        return value

    def fragmentation_ratio(self) -> float:
        """INFO's mem_fragmentation_ratio: RSS over the memory the process uses, the
        RSS it had before its data loaded (the interpreter, its modules, an empty
        node) plus its jobs' footprint. About 1 while the jobs' memory is in use; well
        above after a peak of jobs has gone (Python keeps most freed memory, as an
        allocator's fragmentation does). Not RSS over used_memory: that counts an
        empty node as 1 MiB, as Disque does, against an interpreter's tens of MB."""
        in_use = self.baseline_rss + self.node.job_bytes
        return self.rss() / in_use if self.baseline_rss else 1.0

    # -- the dashboard's figures -------------------------------------------------------------
    def node_stats(self) -> NodeStats:
        """This node's stats as its peers and GET /api/v1/cluster/stats get them
        (replication/stats.py): the node's jobs and queues, and what the server counts
        (INFO's used_memory, used_memory_rss, connected_clients,
        instantaneous_ops_per_sec, uptime_in_seconds)."""
        stats = NodeStats.of_node(self.node)
        stats.used_memory = self.used_memory()
        stats.rss = self.rss()
        stats.clients = len(self.clients.connected)
        stats.ops_per_sec = self.ops_per_sec
        stats.uptime = max(0, int(time.time() - self.start_time))
        return stats

    @reacts_to("maxmemory")
    def _maxmemory_changed(self, maxmemory: int) -> None:
        if self.loop is not None:
            self.update_memory_limit()

    def update_memory_limit(self) -> None:
        """Give the core maxmemory's marks (in job bytes) and the eviction policy:
        checked before every command that may add jobs (ADDJOB, ENQUEUE, NACK), and
        against each new job's size, so the levels are always current."""
        config = self.config
        self.node.set_memory_limit(config.maxmemory, EMPTY_NODE_MEMORY,
                                   config.maxmemory_policy != "noeviction")

    def reset_stats(self) -> None:
        self.clients.reset_counters()
        self.hot.net_input_bytes = self.hot.net_output_bytes = 0
        for spec in self.commands.values():
            spec.calls = spec.usec = 0
        self.slowlog.clear()


def _slowlog_args(args: list[bytes]) -> list[bytes]:
    """The arguments as SLOWLOG keeps them: at most 32, each at most 128 bytes; none
    of AUTH, HELLO and ACL (passwords), as Redis redacts them."""
    if args[0].lower() in (b"auth", b"hello", b"acl"):
        return [args[0], b"(redacted)"] if len(args) > 1 else args[:1]
    kept = args if len(args) <= 32 else args[:31]
    out = [a if len(a) <= 128 else a[:128] + b"... (%d more bytes)" % (len(a) - 128)
           for a in kept]
    if len(args) > 32:
        out.append(b"... (%d more arguments)" % (len(args) - 31))
    return out


def slowlog_usec(value: int) -> int:
    """Microseconds from which a command is logged; a negative setting disables it."""
    return value if value >= 0 else 1 << 62
