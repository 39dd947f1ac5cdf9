"""The metrics port (`metrics-port`, off by default; `metrics-bind`, loopback by
default): /metrics alone, served on the node's event loop by aiohttp's server as the
HTTP port is (app.py), with the HTTP port's guards:

- A connection counts in `maxclients` and the HTTP port's share of it (connections.py:
  a 503 beyond; not in `maxclients-per-ip`, see MetricsConnection.admission), and has
  `http-read-timeout` to send a request's headers. The port holds METRICS_MAX_CONNECTIONS at most: a new
  connection beyond them closes the oldest one that is not being answered (a slow or
  idle one, or a scraper's kept-alive connection, which its next scrape reopens), so
  that slow connections cannot keep a scrape out; a scrape being answered is never
  closed for another. No thread per connection: the text of a scrape is written by
  the one thread of metrics.py.
- A request must name the node in Host (421 otherwise: DNS rebinding, the names of
  crosssite.py and metrics-bind's) and not come from another site's page (403).
- The scrape asks for the node's users as the HTTP port's /metrics does (auth.py: a
  user allowed INFO); beyond loopback always the password of a user who has one (the
  start is refused without requirepass or an aclfile to ask for: exposure.py).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST

from ...exposure import is_loopback
from ..metrics import metrics_text
from .auth import CHALLENGE, Authenticator, AuthRefused, command_refusal
from .connections import HttpConnection, HttpPort
from .crosssite import host_refusal, origin_refusal
from .problems import Problem

if TYPE_CHECKING:
    from ..app import Server

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

METRICS_PATH = "/metrics"
METRICS_MAX_CONNECTIONS = 16  # a few Prometheus servers and the odd curl need no more


class MetricsConnection(HttpConnection):
    """A connection to the metrics port: admitted as an HTTP port's is, and closed for
    a newer one while it is not being answered once the port holds its cap."""

    __slots__ = ("port", "transport", "answering")

    def __init__(self, server: Server, make_handler: web.Server, port: MetricsPort) -> None:
        super().__init__(server, make_handler)
        self.port = port
        self.transport: asyncio.BaseTransport | None = None
        self.answering = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport
        super().connection_made(transport)
        if self.handler is not None:
            self.port.held[transport] = self

    def admission(self) -> tuple[str, str] | None:
        """Within the port's cap (the oldest idle connection gives way), then in
        maxclients and the HTTP port's share of it, not in maxclients-per-ip: a
        scraper on a host whose workers take the IP's connections is let in, and a
        scrape never makes a worker's commands -BUSY (the cap bounds one IP here)."""
        port, server = self.port, self.server
        if len(port.held) >= METRICS_MAX_CONNECTIONS and not port.close_oldest_idle():
            server.clients.connections_received += 1
            server.clients.rejected_connections += 1
            return ("MAXCLIENTS", f"the metrics port is answering {METRICS_MAX_CONNECTIONS} "
                                  "requests: try again later")
        return server.clients.http_admission(self, "")

    def connection_lost(self, exc: Exception | None) -> None:
        handler, self.handler = self.handler, None
        if handler is None:
            return
        if self.port.held.pop(self.transport, None) is not None:  # (else closed for another)
            self.server.clients.http_connection_closed(self, "")
        handler.connection_lost(exc)


class MetricsPort(HttpPort):
    """The metrics port's listening socket, its runner and its connections."""

    def __init__(self, runner: web.AppRunner) -> None:
        super().__init__(runner)
        # the admitted connections, oldest first
        self.held: dict[asyncio.BaseTransport | None, MetricsConnection] = {}

    def connection(self, server: Server, make_handler: web.Server) -> HttpConnection:
        return MetricsConnection(server, make_handler, self)

    def close_oldest_idle(self) -> bool:
        """Close the oldest connection not being answered (False: all are): it leaves
        the counts now, so that a new one takes its place."""
        for transport, conn in self.held.items():
            if not conn.answering and transport is not None:
                del self.held[transport]
                conn.server.clients.http_connection_closed(conn, "")
                transport.abort()  # type: ignore[attr-defined]
                return True
        return False


PORT_KEY: web.AppKey[MetricsPort] = web.AppKey("metrics_port")
SERVER_KEY: web.AppKey[Server] = web.AppKey("server")
AUTH_KEY: web.AppKey[Authenticator] = web.AppKey("metrics_authenticator")


@web.middleware
async def _guards(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Host and Origin first, for every path; the connection is not closed for another
    while it is answered."""
    server = request.app[SERVER_KEY]
    conn = request.app[PORT_KEY].held.get(request.transport)
    if conn is not None:
        conn.answering = True
    try:
        refusal = (host_refusal(request, server.config, (server.config.metrics_bind,))
                   or origin_refusal(request, server.config))
        if refusal is not None:
            return refusal.response()
        return await handler(request)
    except web.HTTPNotFound:
        return Problem(404, f"no route {request.path}: the metrics are at {METRICS_PATH}",
                       "NOROUTE").response()
    except web.HTTPMethodNotAllowed:
        return Problem(405, f"{request.method} is not allowed here; try GET").response()
    finally:
        if conn is not None:
            conn.answering = False


async def _metrics(request: web.Request) -> web.Response:
    """401 without valid credentials, 429 after too many failures, 403 for a user
    not allowed INFO."""
    server = request.app[SERVER_KEY]
    try:
        user = request.app[AUTH_KEY].user(request.headers.get("Authorization", ""),
                                          request.remote or "",
                                          is_loopback(server.config.metrics_bind))
    except AuthRefused as refused:
        headers = {"WWW-Authenticate": CHALLENGE} if refused.status == 401 else None
        return Problem(refused.status, refused.message, refused.code).response(headers)
    denied = command_refusal(server.acl, user, "info")
    if denied is not None:
        return Problem(403, denied, "NOPERM").response()
    return web.Response(body=await metrics_text(server),
                        headers={"Content-Type": CONTENT_TYPE_LATEST})


async def start_metrics_port(server: Server) -> MetricsPort:
    """Listen on `metrics-bind`:`metrics-port`; a port that cannot be had stops the
    start with one line, as the client port does."""
    cfg = server.config
    app = web.Application(middlewares=[_guards])
    app[SERVER_KEY] = server
    app[AUTH_KEY] = Authenticator(server.acl, server.auth_throttle)
    app.router.add_get(METRICS_PATH, _metrics)
    # aiohttp's keep-alive timer is the headers' deadline (connections.py)
    runner = web.AppRunner(app, access_log=None, handler_cancellation=True,
                           keepalive_timeout=cfg.http_read_timeout,
                           lingering_time=cfg.http_read_timeout)
    port = app[PORT_KEY] = MetricsPort(runner)
    await runner.setup()
    try:
        await port.listen(server, cfg.metrics_bind, cfg.metrics_port, None)
    except OSError as exc:
        await port.cleanup()
        raise SystemExit(f"Could not create metrics listening socket {cfg.metrics_bind}:"
                         f"{cfg.metrics_port}: {exc.strerror or exc}") from None
    return port
