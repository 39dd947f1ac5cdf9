"""Who may hold a connection to the HTTP port, and for how long.

Every connection counts in `maxclients` with the RESP ones (file descriptors are one
pool: maxclients is sized to the open files limit, process.py), but HTTP may take only
half of it (HTTP_SHARE): a flood of HTTP connections, which need no password to be
opened, leaves RESP the other half. It counts in `maxclients-per-ip` too. A connection
beyond any of them gets a 503 at once and is closed (there is no session to keep
refusing requests on, as RESP's -BUSY does). The bookkeeping is the client registry's
(clients.py: http_admission).

Deadlines (`http-read-timeout`): aiohttp's keep-alive timer, armed when a connection
is made and after each answer, closes one that has not sent a whole request's headers
by then (it never fires while a request is being handled: a long poll waits as long as
it asks); a body must arrive within as long again (jsonbody.py answers 408), and after
an answer the node reads the rest of a body it did not need for that long at most.

`HttpConnection` is the asyncio protocol the listening sockets make: it admits the
connection, then hands every event to aiohttp's own protocol for it.
"""

from __future__ import annotations

import asyncio
import ssl
from typing import TYPE_CHECKING, Any

from aiohttp import web

from ... import tls
from .problems import Problem

if TYPE_CHECKING:
    from ..app import Server

HTTP_SHARE = 2  # HTTP connections may take 1/HTTP_SHARE of maxclients


def http_limit(maxclients: int) -> int:
    """How many connections the HTTP port may hold at once."""
    return max(maxclients // HTTP_SHARE, 1)


class HttpConnection(asyncio.Protocol):
    """One connection to the HTTP port: refused at once, or served by aiohttp."""

    __slots__ = ("server", "make_handler", "handler", "ip")

    def __init__(self, server: Server, make_handler: web.Server) -> None:
        self.server = server
        self.make_handler = make_handler
        self.handler: Any = None  # aiohttp's RequestHandler, once admitted
        self.ip = ""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        peer = transport.get_extra_info("peername")
        self.ip = peer[0] if isinstance(peer, tuple) else ""
        refusal = self.admission()
        if refusal is not None:
            code, detail = refusal
            transport.write(Problem(503, detail, code).message())  # type: ignore[attr-defined]
            transport.close()
            return
        self.handler = self.make_handler()
        self.handler.connection_made(transport)

    def admission(self) -> tuple[str, str] | None:
        """None if the connection is taken, else the (code, message) of its 503."""
        return self.server.clients.http_admission(self, self.ip)

    def data_received(self, data: bytes) -> None:
        if self.handler is not None:
            self.handler.data_received(data)

    def eof_received(self) -> bool | None:
        return self.handler.eof_received() if self.handler is not None else None

    def connection_lost(self, exc: Exception | None) -> None:
        handler, self.handler = self.handler, None
        if handler is not None:
            self.server.clients.http_connection_closed(self, self.ip)
            handler.connection_lost(exc)

    def pause_writing(self) -> None:
        if self.handler is not None:
            self.handler.pause_writing()

    def resume_writing(self) -> None:
        if self.handler is not None:
            self.handler.resume_writing()

    def set_over_ip_limit(self, over: bool) -> None:
        """The registry's word when maxclients-per-ip changes (clients.py): nothing to
        do, an HTTP connection is refused when it comes, and an open one ends soon
        (http-read-timeout once idle)."""


class HttpPort:
    """The HTTP port's listening sockets and aiohttp's runner, stopped together."""

    def __init__(self, runner: web.AppRunner) -> None:
        self.runner = runner
        self.listeners: list[asyncio.AbstractServer] = []

    async def listen(self, server: Server, host: str, port: int,
                     context: ssl.SSLContext | None) -> None:
        make_handler = self.runner.server
        assert make_handler is not None  # (runner.setup() made it)
        extra: dict[str, Any] = ({"ssl": context, "ssl_handshake_timeout":
                                  tls.HANDSHAKE_TIMEOUT} if context is not None else {})
        loop = asyncio.get_running_loop()
        self.listeners.append(await loop.create_server(
            lambda: self.connection(server, make_handler), host, port,
            backlog=server.config.tcp_backlog, reuse_address=True, **extra))

    def connection(self, server: Server, make_handler: web.Server) -> HttpConnection:
        """The protocol of a new connection (the metrics port has its own)."""
        return HttpConnection(server, make_handler)

    async def cleanup(self) -> None:
        for listener in self.listeners:
            listener.close()
        await self.runner.cleanup()

