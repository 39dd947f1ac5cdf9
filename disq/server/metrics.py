"""Prometheus metrics: the text of /metrics, on the metrics port (`--metrics-port N`,
off by default: http/metricsport.py serves it) and on the HTTP port.

Nothing is counted for Prometheus on the hot path: at scrape time the event loop takes
a snapshot of the counters the node keeps anyway (INFO reads the same ones), and a
thread of its own turns it into metric families and text. One scrape runs at a time;
those that come meanwhile share its text.
"""

from __future__ import annotations

import asyncio
import time
import weakref
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    SummaryMetricFamily,
)
from prometheus_client.registry import Collector

from ..clock import now_ms
from .histograms import BOUNDS_US

if TYPE_CHECKING:
    from ..queue import Queue
    from .app import Server

MAX_QUEUES_EXPORTED = 10_000
# The latency histograms (histograms.py): their metric names and what they measure
LATENCY_HELP = {
    "addjob": ("disq_addjob_duration_seconds",
               "ADDJOB from its request to its answer, its synchronous replication "
               "included"),
    "getjob": ("disq_getjob_duration_seconds",
               "GETJOB from its request to its answer, a blocked consumer's wait included "
               "(until a job or its timeout)"),
    "delivery_lag": ("disq_job_delivery_lag_seconds",
                     "A job's first delivery after it was due (its ADDJOB, or its AT / "
                     "DELAY-MS time; a job added on another node: across the clocks)"),
}


def _head_age(queue: Queue, now: int) -> float | None:
    """Seconds since the job GETJOB takes next was created (in a queue without
    priorities or groups, the oldest queued: jobs are in creation order), None if the
    queue is empty."""
    job = queue.jobs.first()
    return None if job is None else max(0, now - job.ctime // 1_000_000) / 1000


def snapshot(server: Server) -> dict[str, Any]:
    """Read every counter; runs on the event loop so the values are consistent."""
    node = server.node
    stats = node.stats
    queues = sorted(node.queues.values(), key=lambda q: -len(q.jobs))[:MAX_QUEUES_EXPORTED]
    now = now_ms()
    ends = node.ends
    phases = [0, 0, 0]
    for batch in node.batches.batches.values():
        phases[batch.phase] += 1
    return {
        "jobs": stats.counters(),
        "registered_jobs": len(node.jobs),
        "registered_queues": len(node.queues),
        "queues": [(q.name.decode("utf-8", "replace"), len(q.jobs), len(q.waiters),
                    _head_age(q, now)) for q in queues],
        "results": (len(ends), ends.bytes, ends.expired, ends.evicted),
        "latencies": {name: getattr(server.latencies, name).snapshot()
                      for name in LATENCY_HELP},
        "batches": phases,
        "clients": len(server.clients.connected),
        "blocked_clients": node.blocked_clients,
        "commands": [(spec.name, spec.calls, spec.usec) for spec in server.commands.values()
                     if spec.calls],
        "memory": server.stats.rss(),
        "used_memory": server.stats.used_memory(),
        "connections_received": server.clients.connections_received,
        "dead_lettered": [(queue.decode("utf-8", "replace"), count) for queue, count
                          in node.failures.dead_lettered.most_common(MAX_QUEUES_EXPORTED)],
        "backoff_requeues": node.failures.backoff_requeues,
        "rate_limited": node.failures.rate_limited,
        "acl_denied": {"auth": server.acl.denied_auth, "cmd": server.acl.denied_cmd,
                       "key": server.acl.denied_key,
                       "auth_throttled": server.acl.denied_auth_throttled},
        "auth_pauses": server.auth_throttle.pauses,
        "auth_failing_sources": server.auth_throttle.failing_sources(time.monotonic()),
        "users": [u.usage() for u in server.acl.live()],
        "rejected_commands": {"per_ip": server.clients.rejected_commands_per_ip,
                              "rate": server.clients.rejected_commands_rate},
        "peer_clocks": [(node.id, estimate) for node, estimate in
                        (server.bus.peer_clocks() if server.bus is not None else [])
                        if estimate is not None],
    }


class _SnapshotCollector(Collector):
    """The metric families of one snapshot (a registry is made per scrape)."""

    def __init__(self, snap: dict[str, Any]) -> None:
        self.snap = snap

    def collect(self) -> Iterator[Any]:
        snap = self.snap
        jobs = snap["jobs"]
        for name, help_text in (
            ("added", "Jobs created by ADDJOB on this node"),
            ("delivered", "Jobs handed to consumers by GETJOB"),
            ("acked", "Jobs acknowledged (ACKJOB/FASTACK)"),
            ("requeued", "Jobs queued again after their RETRY time or ENQUEUE"),
            ("expired", "Jobs removed because their TTL elapsed"),
            ("nacked", "Jobs put back by NACK"),
            ("deleted", "Jobs removed by DELJOB"),
            ("imported", "Jobs received from other nodes by federation"),
            ("exported", "Jobs sent to other nodes by federation"),
        ):
            yield CounterMetricFamily(f"disq_jobs_{name}", help_text, value=jobs[f"jobs_{name}"])
        yield GaugeMetricFamily("disq_registered_jobs", "Jobs held in memory",
                                value=snap["registered_jobs"])
        yield GaugeMetricFamily("disq_registered_queues", "Queues held in memory",
                                value=snap["registered_queues"])
        length = GaugeMetricFamily("disq_queue_length", "Jobs queued (QLEN)", labels=["queue"])
        blocked = GaugeMetricFamily("disq_queue_blocked_clients",
                                    "Consumers blocked on the queue", labels=["queue"])
        age = GaugeMetricFamily(
            "disq_queue_oldest_job_age_seconds",
            "Age of the job GETJOB takes next, since its ADDJOB (the oldest queued, "
            "unless priorities or groups order the queue); empty queues have none",
            labels=["queue"])
        for name, qlen, waiting, head_age in snap["queues"]:
            length.add_metric([name], qlen)
            blocked.add_metric([name], waiting)
            if head_age is not None:
                age.add_metric([name], head_age)
        yield length
        yield blocked
        yield age
        for name, (metric, help_text) in LATENCY_HELP.items():
            counts, sum_us = snap["latencies"][name]
            buckets = [(str(bound / 1e6), count)
                       for bound, count in zip(BOUNDS_US, counts[:-1], strict=True)]
            buckets.append(("+Inf", counts[-1]))
            yield HistogramMetricFamily(metric, help_text, buckets=buckets,
                                        sum_value=sum_us / 1e6)
        kept, kept_bytes, expired, evicted = snap["results"]
        yield GaugeMetricFamily("disq_results_kept", "Results kept (ACKJOB ... RESULT)",
                                value=kept)
        yield GaugeMetricFamily("disq_results_bytes", "Memory the results kept take",
                                value=kept_bytes)
        yield CounterMetricFamily("disq_results_expired", "Results gone by their RESULT-TTL",
                                  value=expired)
        yield CounterMetricFamily("disq_results_evicted", "Results dropped for memory",
                                  value=evicted)
        phases = GaugeMetricFamily("disq_batches", "Batches this node holds, by phase",
                                   labels=["phase"])
        for phase, count in zip(("open", "closed", "done"), snap["batches"], strict=True):
            phases.add_metric([phase], count)
        yield phases
        dead = CounterMetricFamily("disq_dead_lettered_jobs",
                                   "Jobs that became dead letters here, by the queue they "
                                   "came from", labels=["queue"])
        for name, count in snap["dead_lettered"]:
            dead.add_metric([name], count)
        yield dead
        yield CounterMetricFamily("disq_backoff_requeues",
                                  "NACKs and RETRY requeues delayed by a back-off",
                                  value=snap["backoff_requeues"])
        yield CounterMetricFamily("disq_rate_limited_getjobs",
                                  "GETJOBs that found jobs but no token of the queue's RATE",
                                  value=snap["rate_limited"])
        yield GaugeMetricFamily("disq_connected_clients", "Connected clients",
                                value=snap["clients"])
        yield GaugeMetricFamily("disq_blocked_clients", "Clients blocked in GETJOB",
                                value=snap["blocked_clients"])
        yield GaugeMetricFamily("disq_memory_rss_bytes", "Resident memory",
                                value=snap["memory"])
        yield GaugeMetricFamily("disq_used_memory_bytes",
                                "Memory in use as INFO used_memory counts it (memory levels)",
                                value=snap["used_memory"])
        yield CounterMetricFamily("disq_connections_received", "Connections accepted",
                                  value=snap["connections_received"])
        rejected = CounterMetricFamily(
            "disq_rejected_commands",
            "Commands refused with -BUSY by a client limit (maxclients-per-ip, "
            "client-rate-limit)", labels=["limit"])
        for limit, count in snap["rejected_commands"].items():
            rejected.add_metric([limit], count)
        yield rejected
        denied = CounterMetricFamily(
            "disq_acl_access_denied",
            "Refusals of users and permissions: failed AUTH (auth), AUTH refused unchecked "
            "after too many failures (auth_throttled), command (cmd), queue or job (key)",
            labels=["reason"])
        for reason, count in snap["acl_denied"].items():
            denied.add_metric([reason], count)
        yield denied
        yield CounterMetricFamily(
            "disq_acl_auth_pauses",
            "Times a source address reached 10 failed authentications (AUTH, HTTP) and "
            "had its next ones refused unchecked for a second", value=snap["auth_pauses"])
        yield GaugeMetricFamily(
            "disq_acl_auth_failing_sources",
            "Source addresses with a failed authentication in the last minute "
            "(at most 10,000 are remembered)", value=snap["auth_failing_sources"])
        yield from _user_metrics(snap["users"])
        latency = SummaryMetricFamily("disq_command_duration_seconds",
                                      "Time spent executing commands", labels=["command"])
        for name, calls, usec in snap["commands"]:
            latency.add_metric([name], count_value=calls, sum_value=usec / 1e6)
        yield latency
        offset = GaugeMetricFamily(
            "disq_peer_clock_offset_seconds",
            "The peer's clock minus this node's, from bus PING/PONG round trips",
            labels=["peer"])
        uncertainty = GaugeMetricFamily(
            "disq_peer_clock_uncertainty_seconds",
            "How far the peer's clock offset may be off (half a round trip, and drift)",
            labels=["peer"])
        rtt = GaugeMetricFamily("disq_peer_round_trip_seconds",
                                "Bus PING/PONG round trip the clock offset was measured over",
                                labels=["peer"])
        for peer, (offset_ms, uncertainty_ms, rtt_us) in snap["peer_clocks"]:
            offset.add_metric([peer], offset_ms / 1e3)
            uncertainty.add_metric([peer], uncertainty_ms / 1e3)
            rtt.add_metric([peer], rtt_us / 1e6)
        yield offset
        yield uncertainty
        yield rtt


def _user_metrics(users: list[tuple[str, int, int, int, int, int, int]]) -> Iterator[Any]:
    """Usage accounting per user, on this node (`sum by (user)` over the nodes gives
    the cluster's; GET /api/v1/usage sums them too)."""
    families = [CounterMetricFamily(f"disq_user_{name}", text, labels=["user"]) for name, text in (
        ("commands", "Commands the user ran"),
        ("jobs_added", "Jobs the user added (ADDJOB)"),
        ("jobs_consumed", "Jobs the user took (GETJOB)"),
        ("jobs_acked", "Jobs the user acknowledged (ACKJOB, FASTACK)"),
        ("bytes_in", "Bytes the user's connections sent (RESP; HTTP request bodies)"),
        ("bytes_out", "Bytes the user's connections received (RESP; HTTP response bodies)"))]
    for name, *counts in users:
        for family, count in zip(families, counts, strict=True):
            family.add_metric([name], count)
    yield from families


class _Scrapes:
    """One scrape at a time per node: scrapes that come while one runs share its text
    (any number of them cost one snapshot), and the text is written by one thread of
    its own, so that formatting thousands of queues never holds the loop."""

    __slots__ = ("executor", "running")

    def __init__(self) -> None:
        self.executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="disq-metrics")
        self.running: asyncio.Future[bytes] | None = None


def snapshot_collector(snap: dict[str, Any]) -> Collector:
    """The metric families of a snapshot (the reference page lists an empty one's)."""
    return _SnapshotCollector(snap)


def _text_of(snap: dict[str, Any]) -> bytes:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_SnapshotCollector(snap))
    return generate_latest(registry)


async def metrics_text(server: Server) -> bytes:
    """/metrics in Prometheus's text format: the counters read on the event loop (one
    consistent snapshot), the text written in the scrapes' thread."""
    scrapes = _SCRAPES.get(server)
    if scrapes is None:
        scrapes = _SCRAPES[server] = _Scrapes()
    running = scrapes.running
    if running is None:
        loop = asyncio.get_running_loop()
        running = scrapes.running = loop.run_in_executor(scrapes.executor, _text_of,
                                                         snapshot(server))
        running.add_done_callback(lambda _: setattr(scrapes, "running", None))
    return await asyncio.shield(running)  # (a scrape that is cancelled leaves it to others)


_SCRAPES: weakref.WeakKeyDictionary[Server, _Scrapes] = weakref.WeakKeyDictionary()
