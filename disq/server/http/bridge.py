"""One implementation, two front ends: an HTTP route runs its command through the very
path a RESP client's request takes. `Exchange` is a `Client` (connection.py) whose
transport is a sink in memory: the route builds the command's arguments (from JSON,
through the options table the RESP parser and the Python client share), and
`Client._execute` does the rest as for any connection: the command table, arity,
authentication, the client limits, -OOM, -LOADING, the handler (its typed request,
the core operation), a reply now or a `Pending` later (an ADDJOB waiting for its
copies, a parked GETJOB, the AOF's durability gate), SLOWLOG, MONITOR, INFO's
commandstats. The reply's bytes come back here and hiredis reads them into Python
values; a RESP error becomes `CommandError`.

An exchange counts as a connected client while it runs (CLIENT LIST shows it as
`name=http`); it is not a connection of its own, though: maxclients and
maxclients-per-ip counted its HTTP connection when it came (http/connections.py). (A
long poll does not come here: it waits as a `LongPoll`, http/longpoll.py, counted in
INFO's blocked_clients and QSTAT's blocked, not listed by CLIENT LIST.)
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

import hiredis

from ..connection import Client, _addresses

if TYPE_CHECKING:
    from ..app import Server


class CommandError(Exception):
    """A RESP error reply: its code (NOJOB, ERR, ...) and message."""

    def __init__(self, text: str) -> None:
        code, _, message = text.partition(" ")
        if not (code.isupper() and code.isalpha()):
            code, message = "ERR", text
        super().__init__(text)
        self.code = code
        self.message = message


class _Sink(asyncio.Transport):
    """The exchange's transport: what the client writes lands in `replies`."""

    def __init__(self, peer: tuple[str, int] | None, local: tuple[str, int] | None) -> None:
        super().__init__()
        self.data = bytearray()
        self.wrote = asyncio.Event()
        self.closed = False
        self._extra = {"peername": peer, "sockname": local, "socket": None}

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.data += data
        self.wrote.set()

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return self._extra.get(name, default)

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True
        self.wrote.set()  # a caller waiting for a reply learns it will not come

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


class Exchange(Client):
    """A client that runs one HTTP request's commands, one at a time."""

    def __init__(self, server: Server, peer: tuple[str, int] | None = None,
                 local: tuple[str, int] | None = None, authenticated: bool = True) -> None:
        super().__init__(server)
        self.name = b"http"
        self.sink = _Sink(peer, local)
        self.connection_made(self.sink)
        self.authenticated = authenticated  # the HTTP layer checked the password

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.addr, self.laddr, self.local_ip, self.ip = _addresses(transport)
        self.server.clients.exchange_connected(self)

    async def call(self, *args: object) -> Any:
        """Run one command; its reply as Python values (bytes, int, list, None).
        Raises CommandError for an error reply, ConnectionError if the node closed
        this client (CLIENT KILL, maxclients)."""
        (value,) = await self.call_many([args])
        if isinstance(value, CommandError):
            raise value
        return value

    async def call_many(self, commands: list[tuple[object, ...]]) -> list[Any]:
        """Run commands pipelined, as one read of a RESP client's; their replies in
        order, an error reply as a CommandError value (not raised)."""
        requests = [[a if isinstance(a, bytes) else str(a).encode() for a in args]
                    for args in commands]
        reader = hiredis.Reader()
        sink = self.sink
        sink.wrote.clear()
        self._execute(requests)
        replies: list[Any] = []
        while True:
            if sink.data:
                reader.feed(bytes(sink.data))
                del sink.data[:]
            while len(replies) < len(requests):
                value = reader.gets()
                if value is False:
                    break
                replies.append(CommandError(str(value))
                               if isinstance(value, hiredis.ReplyError) else value)
            if len(replies) == len(requests):
                return replies
            if sink.closed or self.closing:
                raise ConnectionError("the node closed the connection")
            sink.wrote.clear()
            await sink.wrote.wait()

    def finish(self) -> None:
        """The HTTP request is over (answered, or its client went away): a parked
        GETJOB leaves its queues, a pending reply is dropped, the client is gone."""
        if self.transport is not None:
            self.sink.closed = True
            self.connection_lost(None)
