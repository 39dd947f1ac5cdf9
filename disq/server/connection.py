"""One client connection: bytes in, parsed by hiredis, dispatched, bytes out.

Every request parsed from one read is executed in order and all their replies leave
in a single `transport.write`. A request that parks the client (blocking GETJOB,
synchronous ADDJOB) stops execution; later requests wait in `_pending` until the
client is answered, as Redis does for blocked clients.

Inline commands (`PING\\r\\n` typed in telnet) are parsed here; multibulk requests
go to hiredis. The reader is idle at a request boundary when it holds no unparsed
bytes and the last byte fed ended a line; then a chunk that starts with neither `*`
nor `$` is inline.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from typing import TYPE_CHECKING

import hiredis

from ..errors import DisqError
from ..job import Job
from ..queue import Queue
from . import reply
from .table import COMMANDS

if TYPE_CHECKING:
    from .app import Server

INLINE_MAX = 64 * 1024
_perf_ns = time.perf_counter_ns
_STAR, _DOLLAR, _NL = 42, 36, 10

ERR_NOAUTH = b"-NOAUTH Authentication required.\r\n"
ERR_LOADING = b"-LOADING Disque is loading the dataset in memory\r\n"


class ProtocolError(Exception):
    pass


def split_inline(line: bytes) -> list[bytes]:
    """Split an inline request like Redis's sdssplitargs: spaces separate words,
    "double" quotes take \\n \\r \\t \\xHH escapes, 'single' quotes are literal."""
    line = line.rstrip(b"\r")
    if b'"' not in line and b"'" not in line:
        return line.split()
    args: list[bytes] = []
    i, n = 0, len(line)
    while True:
        while i < n and line[i] in b" \t\r\n\x0b\x0c":
            i += 1
        if i >= n:
            return args
        cur = bytearray()
        quote = 0
        while True:
            if i >= n:
                if quote:
                    raise ProtocolError("unbalanced quotes in request")
                break
            c = line[i]
            if quote == 0x22:  # "
                if c == 0x5C and i + 1 < n:  # backslash
                    nxt = line[i + 1]
                    if nxt == 0x78 and i + 3 < n:  # \xHH
                        try:
                            cur.append(int(line[i + 2:i + 4], 16))
                            i += 4
                            continue
                        except ValueError:
                            pass
                    cur.append({0x6E: 10, 0x72: 13, 0x74: 9, 0x62: 8, 0x61: 7}.get(nxt, nxt))
                    i += 2
                    continue
                if c == 0x22:
                    if i + 1 < n and line[i + 1] not in b" \t\r\n":
                        raise ProtocolError("unbalanced quotes in request")
                    quote = 0
                    i += 1
                    break
                cur.append(c)
            elif quote == 0x27:  # '
                if c == 0x5C and i + 1 < n and line[i + 1] == 0x27:
                    cur.append(0x27)
                    i += 2
                    continue
                if c == 0x27:
                    if i + 1 < n and line[i + 1] not in b" \t\r\n":
                        raise ProtocolError("unbalanced quotes in request")
                    quote = 0
                    i += 1
                    break
                cur.append(c)
            else:
                if c in b" \t\r\n":
                    break
                if c in (0x22, 0x27) and not cur:
                    quote = c
                    i += 1
                    continue
                cur.append(c)
            i += 1
        args.append(bytes(cur))


class Client(asyncio.Protocol):
    """A connected client; command handlers receive it as their context."""

    def __init__(self, server: Server) -> None:
        self.server = server
        self.node = server.node
        self.transport: asyncio.Transport | None = None
        self.id = 0
        self.addr = ""
        self.laddr = ""
        self.local_ip = ""
        self.name = b""
        self.ctime = time.time()
        self.last_interaction = self.ctime
        self.authenticated = not server.config.requirepass
        self.resp3 = False  # negotiated by HELLO 3 (replies stay RESP2-compatible)
        self.last_command = b"NULL"
        self.closing = False
        self.close_after_reply = False
        self._reader = hiredis.Reader()
        self._inline = b""
        self._last_nl = True
        self._partial = 0
        self._pending: deque[list[bytes]] = deque()
        self._held_requests_limit = 100_000
        self._reading_paused = False
        # blocking state
        self.blocked = False
        self.blocked_queues: list[Queue] = []
        self.block_timer: asyncio.TimerHandle | None = None
        self.block_with_counters = False
        self.on_unblock = None  # optional callable for other kinds of blocking

    # -- asyncio callbacks -----------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.addr, self.laddr, self.local_ip = _addresses(transport)
        self.server.client_connected(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closing = True
        if self.blocked:
            self._cancel_block()
        self.server.client_disconnected(self)
        self.transport = None

    def pause_writing(self) -> None:
        # The client is not reading its replies: stop reading its requests.
        if self.transport is not None and not self._reading_paused:
            self._reading_paused = True
            self.transport.pause_reading()

    def resume_writing(self) -> None:
        if self.transport is not None and self._reading_paused and not self.blocked:
            self._reading_paused = False
            self.transport.resume_reading()

    def data_received(self, data: bytes) -> None:
        self.last_interaction = time.time()
        self.server.net_input_bytes += len(data)
        try:
            requests = self._parse(data)
        except (ProtocolError, hiredis.ProtocolError) as exc:
            self._protocol_error(str(exc))
            return
        if self.blocked or self._pending:
            self._pending.extend(requests)
            if len(self._pending) > self._held_requests_limit and not self._reading_paused:
                self._reading_paused = True
                self.transport.pause_reading()  # type: ignore[union-attr]
            return
        self._execute(requests)

    # -- parsing ---------------------------------------------------------------------
    def _parse(self, data: bytes) -> list[list[bytes]]:
        out: list[list[bytes]] = []
        reader = self._reader
        config = self.server.config
        while data:
            if self._inline or (
                self._last_nl and data[0] != _STAR and data[0] != _DOLLAR
                and not reader.has_data()
            ):
                buf = self._inline + data if self._inline else data
                nl = buf.find(b"\n")
                if nl < 0:
                    if len(buf) > INLINE_MAX:
                        raise ProtocolError("too big inline request")
                    self._inline = buf
                    return out
                self._inline = b""
                data = buf[nl + 1:]
                args = split_inline(buf[:nl])
                if args:
                    out.append(args)
                continue
            reader.feed(data)
            self._last_nl = data[-1] == _NL
            fed, data = len(data), b""
            got = False
            while True:
                req = reader.gets()
                if req is False:
                    break
                got = True
                if req.__class__ is not list:
                    if req is None:
                        continue
                    raise ProtocolError("expected '*', got something else")
                if not req:
                    continue
                for arg in req:
                    if arg.__class__ is not bytes:
                        raise ProtocolError("expected '$', got something else")
                if len(req) > config.proto_max_multibulk_len:
                    raise ProtocolError("invalid multibulk length")
                if self._partial > config.proto_max_bulk_len and max(map(len, req)) > (
                    config.proto_max_bulk_len
                ):
                    raise ProtocolError("invalid bulk length")
                out.append(req)
            # Bytes held for the request still incomplete (an upper bound when
            # requests completed in this chunk, exact while none does).
            self._partial = reader.len() if got else self._partial + fed
            if self._partial > config.client_query_buffer_limit:
                raise ProtocolError("client reached the max query buffer length")
        return out

    def _protocol_error(self, message: str) -> None:
        self.server.log_verbose(f"Protocol error ({message}) from client: {self.addr}")
        if self.transport is not None:
            self.transport.write(b"-ERR Protocol error: " + message.encode() + b"\r\n")
            self.transport.close()
        self.closing = True

    # -- execution -------------------------------------------------------------------
    def _execute(self, requests: list[list[bytes]]) -> None:
        out: list[bytes] = []
        server = self.server
        i = 0
        n = len(requests)
        while i < n:
            args = requests[i]
            i += 1
            rep = self.dispatch(args)
            if rep is None:  # parked: the rest waits for the answer
                if self.blocked:
                    self._pending.extend(requests[i:])
                    break
                continue
            out.append(rep)
            if self.close_after_reply:
                break
        if out and self.transport is not None:
            data = out[0] if len(out) == 1 else b"".join(out)
            server.net_output_bytes += len(data)
            self.transport.write(data)
        if self.close_after_reply and self.transport is not None:
            self.transport.close()

    def dispatch(self, args: list[bytes]) -> bytes | None:
        name = args[0].lower()
        spec = COMMANDS.get(name)
        server = self.server
        server.commands_processed += 1
        if spec is None:
            if name == b"quit":
                self.close_after_reply = True
                return reply.OK
            return b"-ERR unknown command '%s'\r\n" % _printable(args[0])
        if not self.authenticated and "a" not in spec.flags:
            return ERR_NOAUTH
        if server.loading and "l" not in spec.flags:
            return ERR_LOADING
        if not spec.arity_ok(len(args)):
            return b"-ERR wrong number of arguments for '%s' command\r\n" % spec.bname
        self.last_command = spec.bname
        start = _perf_ns()
        try:
            rep = spec.handler(self, args)
        except DisqError as exc:
            rep = exc.reply()
        except Exception as exc:  # a bug must not take the node down
            server.log_exception(f"Error while executing {spec.name}", exc)
            rep = b"-ERR internal error while executing '%s'\r\n" % spec.bname
        spec.calls += 1
        spec.usec += (_perf_ns() - start) // 1000
        return rep

    # -- replies written later ----------------------------------------------------------
    def send(self, data: bytes) -> None:
        if self.transport is not None and not self.closing:
            self.server.net_output_bytes += len(data)
            self.transport.write(data)

    def park(self, queues: list[Queue], timeout_ms: int, with_counters: bool) -> None:
        """Block in GETJOB until a job arrives on one of `queues` or the timeout."""
        self.blocked = True
        self.block_with_counters = with_counters
        self.blocked_queues = queues
        if timeout_ms > 0:
            self.block_timer = asyncio.get_running_loop().call_later(
                timeout_ms / 1000, self._block_timeout)

    def serve_job(self, job: Job) -> None:
        """Called by the node: a job for this blocked consumer (always exactly one)."""
        entry = (reply.job_entry_with_counters(job) if self.block_with_counters
                 else reply.job_entry(job))
        self.unblock(b"*1\r\n" + entry)

    def _block_timeout(self) -> None:
        self.block_timer = None
        if self.blocked:
            self.unblock(reply.NULL_ARRAY)

    def _cancel_block(self) -> None:
        if self.block_timer is not None:
            self.block_timer.cancel()
            self.block_timer = None
        if self.blocked_queues:
            self.node.unblock(self, self.blocked_queues)
            self.blocked_queues = []
        if self.on_unblock is not None:
            callback, self.on_unblock = self.on_unblock, None
            callback()
        self.blocked = False

    def unblock(self, data: bytes) -> None:
        """Answer the parked request and resume the requests that queued behind it."""
        if not self.blocked:
            return
        self._cancel_block()
        self.send(data)
        if self._pending:
            asyncio.get_running_loop().call_soon(self._resume)
        elif self._reading_paused and self.transport is not None:
            self._reading_paused = False
            self.transport.resume_reading()

    def _resume(self) -> None:
        if self.blocked or self.closing:
            return
        pending, self._pending = self._pending, deque()
        self._execute(list(pending))
        if not self.blocked and self._reading_paused and self.transport is not None:
            self._reading_paused = False
            self.transport.resume_reading()

    def close_soon(self, requester: Client) -> None:
        """CLIENT KILL: close after the current batch of replies is written."""
        if requester is self:
            self.close_after_reply = True
        else:
            self.close()

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()
        self.closing = True

    # -- introspection ---------------------------------------------------------------
    def info_line(self) -> str:
        now = time.time()
        flags = "b" if self.blocked else "N"
        return (
            f"id={self.id} addr={self.addr} laddr={self.laddr} fd=-1 "
            f"name={self.name.decode(errors='replace')} age={int(now - self.ctime)} "
            f"idle={int(now - self.last_interaction)} flags={flags} db=0 sub=0 psub=0 "
            f"multi=-1 qbuf={self._reader.len()} qbuf-free=0 obl=0 "
            f"oll={len(self._pending)} omem=0 events=r "
            f"cmd={self.last_command.decode().lower()}"
        )


def _printable(name: bytes) -> bytes:
    return name[:128].replace(b"\r", b" ").replace(b"\n", b" ")


def _addresses(transport: asyncio.Transport) -> tuple[str, str, str]:
    def fmt(a: object) -> str:
        if isinstance(a, tuple) and len(a) >= 2:
            host = a[0]
            return f"[{host}]:{a[1]}" if ":" in host else f"{host}:{a[1]}"
        return str(a or "/unixsocket") + ":0"

    peer = transport.get_extra_info("peername")
    sock = transport.get_extra_info("sockname")
    local_ip = sock[0] if isinstance(sock, tuple) else "127.0.0.1"
    return fmt(peer), fmt(sock), local_ip

