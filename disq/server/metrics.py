"""Prometheus metrics (`--metrics-port N`, off by default).

Nothing is counted for Prometheus on the hot path: at scrape time the HTTP thread asks
the event loop for a snapshot of the counters the node keeps anyway (INFO reads the
same ones) and turns it into metric families.

A scrape is let in as the HTTP port's /metrics lets it in (the node's users, bearer
token or basic auth; the user must be allowed INFO). Beyond loopback it always needs
the password of a user who has one, and the start is refused without requirepass or
an aclfile to ask for (exposure.py).
"""

from __future__ import annotations

import asyncio
import socket
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Iterator
from http import HTTPStatus
from socketserver import ThreadingMixIn
from typing import TYPE_CHECKING, Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import CollectorRegistry, generate_latest, make_wsgi_app
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, SummaryMetricFamily
from prometheus_client.registry import Collector

from ..exposure import is_loopback
from .http.auth import CHALLENGE, Authenticator, AuthRefused, command_refusal

if TYPE_CHECKING:
    from .app import Server

WSGIApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]

MAX_QUEUES_EXPORTED = 10_000
SCRAPE_TIMEOUT = 5.0


def snapshot(server: Server) -> dict[str, Any]:
    """Read every counter; runs on the event loop so the values are consistent."""
    node = server.node
    stats = node.stats
    queues = sorted(node.queues.values(), key=lambda q: -len(q.jobs))[:MAX_QUEUES_EXPORTED]
    return {
        "jobs": stats.counters(),
        "registered_jobs": len(node.jobs),
        "registered_queues": len(node.queues),
        "queues": [(q.name.decode("utf-8", "replace"), len(q.jobs), len(q.waiters))
                   for q in queues],
        "clients": len(server.clients),
        "blocked_clients": node.blocked_clients,
        "commands": [(spec.name, spec.calls, spec.usec) for spec in server.commands.values()
                     if spec.calls],
        "memory": server.rss(),
        "used_memory": server.used_memory(),
        "connections_received": server.connections_received,
        "dead_lettered": [(queue.decode("utf-8", "replace"), count) for queue, count
                          in node.failures.dead_lettered.most_common(MAX_QUEUES_EXPORTED)],
        "backoff_requeues": node.failures.backoff_requeues,
        "rate_limited": node.failures.rate_limited,
        "acl_denied": {"auth": server.acl.denied_auth, "cmd": server.acl.denied_cmd,
                       "key": server.acl.denied_key,
                       "auth_throttled": server.acl.denied_auth_throttled},
        "auth_pauses": server.auth_throttle.pauses,
        "auth_failing_sources": server.auth_throttle.failing_sources(time.monotonic()),
        "users": [(u.name, u.calls, u.jobs_added, u.jobs_consumed, u.jobs_acked)
                  for u in server.acl.live()],
        "rejected_commands": {"per_ip": server.rejected_commands_per_ip,
                              "rate": server.rejected_commands_rate},
        "peer_clocks": [(node.id, estimate) for node, estimate in
                        (server.bus.peer_clocks() if server.bus is not None else [])
                        if estimate is not None],
    }


class NodeCollector(Collector):
    def __init__(self, server: Server, loop: asyncio.AbstractEventLoop) -> None:
        self.server = server
        self.loop = loop

    def _snapshot(self) -> dict[str, Any]:
        async def take() -> dict[str, Any]:
            return snapshot(self.server)

        return asyncio.run_coroutine_threadsafe(take(), self.loop).result(SCRAPE_TIMEOUT)

    def collect(self) -> Iterator[Any]:
        snap = self._snapshot()
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
        for name, qlen, waiting in snap["queues"]:
            length.add_metric([name], qlen)
            blocked.add_metric([name], waiting)
        yield length
        yield blocked
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


def _user_metrics(users: list[tuple[str, int, int, int, int]]) -> Iterator[Any]:
    """Usage accounting per user (issue #23)."""
    families = [CounterMetricFamily(f"disq_user_{name}", text, labels=["user"]) for name, text in (
        ("commands", "Commands the user ran"),
        ("jobs_added", "Jobs the user added (ADDJOB)"),
        ("jobs_consumed", "Jobs the user took (GETJOB)"),
        ("jobs_acked", "Jobs the user acknowledged (ACKJOB, FASTACK)"))]
    for name, *counts in users:
        for family, count in zip(families, counts, strict=True):
            family.add_metric([name], count)
    yield from families


METRICS_PATH = "/metrics"
_NOT_FOUND = b"Not found: the metrics are at /metrics\n"


def _text(start_response: Callable[..., Any], status: str, body: bytes,
          *headers: tuple[str, str]) -> Iterable[bytes]:
    start_response(status, [("Content-Type", "text/plain; charset=utf-8"),
                            ("Content-Length", str(len(body))), *headers])
    return [body]


def metrics_only(app: WSGIApp, server: Server, loop: asyncio.AbstractEventLoop) -> WSGIApp:
    """`app` at /metrics for the users who may run INFO (the HTTP port's check,
    http/auth.py, made on the loop where the users live: 401 without valid
    credentials, 403 without the permission, 429 after too many failures), 404 on
    every other path (prometheus_client's own app answers whatever the path). Beyond
    loopback no request is let in without the password of a user who has one."""
    authenticator = Authenticator(server.acl, server.auth_throttle)
    anonymous = is_loopback(server.config.metrics_bind)

    async def refusal(header: str, ip: str) -> tuple[str, str] | None:
        try:
            user = authenticator.user(header, ip, anonymous)
        except AuthRefused as refused:
            return f"{refused.status} {HTTPStatus(refused.status).phrase}", refused.message
        denied = command_refusal(server.acl, user, "info")
        return None if denied is None else ("403 Forbidden", denied)

    def dispatch(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        if environ.get("PATH_INFO", "") != METRICS_PATH:
            return _text(start_response, "404 Not Found", _NOT_FOUND)
        refused = asyncio.run_coroutine_threadsafe(
            refusal(environ.get("HTTP_AUTHORIZATION", ""), environ.get("REMOTE_ADDR", "")),
            loop).result(SCRAPE_TIMEOUT)
        if refused is not None:
            status, message = refused
            challenge = [("WWW-Authenticate", CHALLENGE)] if status.startswith("401") else []
            return _text(start_response, status, message.encode() + b"\n", *challenge)
        return app(environ, start_response)

    return dispatch


class _MetricsServer(ThreadingMixIn, WSGIServer):
    daemon_threads = True  # a scrape in progress never holds up the node's exit


class _QuietHandler(WSGIRequestHandler):
    """No line on stderr per request: the node has its own log."""

    def log_message(self, format: str, *args: Any) -> None:
        pass


class _LoopCollector(NodeCollector):
    """The collector of /metrics on the HTTP port, which runs on the loop itself."""

    def _snapshot(self) -> dict[str, Any]:
        return snapshot(self.server)


def metrics_text(server: Server) -> bytes:
    """/metrics in Prometheus's text format, read on the event loop (the HTTP port)."""
    registry = _LOOP_REGISTRIES.get(server)
    if registry is None:
        registry = _LOOP_REGISTRIES[server] = CollectorRegistry()
        registry.register(_LoopCollector(server, asyncio.get_running_loop()))
    return generate_latest(registry)


_LOOP_REGISTRIES: weakref.WeakKeyDictionary[Server, CollectorRegistry] = (
    weakref.WeakKeyDictionary())


def start_metrics_server(server: Server) -> WSGIServer:
    """Serve /metrics on `metrics-bind`:`metrics-port` from a thread of its own (a
    request waits there for the loop's snapshot; the loop never waits for HTTP). A
    port that cannot be had stops the start with one line, as the client port does."""
    registry = CollectorRegistry()
    registry.register(NodeCollector(server, asyncio.get_running_loop()))
    cfg = server.config
    host, port = cfg.metrics_bind, cfg.metrics_port
    try:
        family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM,
                                    flags=socket.AI_PASSIVE)[0][0]
        server_class = type("MetricsServer", (_MetricsServer,), {"address_family": family})
        app = metrics_only(make_wsgi_app(registry), server, asyncio.get_running_loop())
        httpd: WSGIServer = make_server(host, port, app, server_class,
                                        handler_class=_QuietHandler)
    except OSError as exc:
        raise SystemExit(f"Could not create metrics listening socket {host}:{port}: "
                         f"{exc.strerror or exc}") from None
    threading.Thread(target=httpd.serve_forever, name="disq-metrics", daemon=True).start()
    return httpd
