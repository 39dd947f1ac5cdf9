"""One client connection: bytes in, parsed by hiredis, dispatched, bytes out.

Every request parsed from one read is executed in order and all their replies leave
in a single `transport.write`. A request that parks the client (blocking GETJOB)
stops execution; later requests wait in `_pending` until the client is answered, as
Redis does for blocked clients. An ADDJOB waiting for its copies does not park the
client: its reply keeps its place (`defer`) while the next requests run, so a
pipeline of replicated ADDJOBs is replicated in parallel, in one bus write per peer.

Inline commands (`PING\\r\\n` typed in telnet) are parsed here; multibulk requests
go to hiredis. As in Redis each request picks its format by its first byte (`*` =
multibulk). hiredis accepts only canonical lengths, so the size of every request it
returns is known: `_mb_pending` counts the bytes it holds beyond complete requests,
0 means a request boundary, and when hiredis refuses what follows a complete request
in the same read (an inline request), the rest is parsed afresh.

A client that has not authenticated yet (a password being required) is first held to
Redis's limits for it, from each request's headers (resp.UnauthenticatedRequests);
once it has, its reads go straight to the parser.

Elsewhere: the reply queue and the parked GETJOB are `LaterReplies` (pending.py, a
part of Client); inline splitting and Redis's protocol error texts are in resp.py.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from typing import TYPE_CHECKING, Final

import hiredis
from mypy_extensions import mypyc_attr

from ..errors import OOM, DisqError
from ..queue import Queue
from . import reply
from .guard import NOPERM_KEY, user_may_use_all
from .hotstate import HotState
from .limits import TokenBucket
from .pending import LaterReplies, Pending
from .resp import (
    ProtocolError,
    UnauthenticatedRequests,
    check_bulk_lengths,
    multibulk_error,
    not_a_bulk,
    redis_protocol_message,
    split_inline,
)
from .table import COMMANDS, LOOKUP, CommandSpec

if TYPE_CHECKING:
    from .app import Server

INLINE_MAX: Final = 64 * 1024
_perf_ns: Final = time.perf_counter_ns
_STAR: Final = 42  # b"*"
_MINUS: Final = 45  # b"-"
_CR: Final = 13  # b"\r"
FEED_PIECE: Final = 16 * 1024  # _parse
_HEAD_KEPT: Final = 64 * 1024  # bytes of an unfinished multibulk whose headers are checked
# Encoded size of a `*<n>\r\n` / `$<n>\r\n` header, by n (the parser's byte accounting).
_SIZE_TABLE: Final = 10_000
_HEADER_SIZE: Final = [3 + len(str(n)) for n in range(_SIZE_TABLE)]
_BULK_SIZE: Final = [n + size + 2 for n, size in enumerate(_HEADER_SIZE)]

ERR_NOAUTH: Final = b"-NOAUTH Authentication required.\r\n"
ERR_LOADING: Final = b"-LOADING Disque is loading the dataset in memory\r\n"
ERR_OOM: Final = OOM.REPLY
_EVERY_USERS_SUBCOMMANDS: Final = {"acl": (b"whoami", b"cat"),
                            "client": (b"id", b"getname", b"setname", b"setinfo")}


# The HTTP port's Exchange (http/bridge.py) and tests subclass Client in Python.
@mypyc_attr(allow_interpreted_subclasses=True)
class Client(LaterReplies, asyncio.Protocol):
    """A connected client; command handlers receive it as their context."""

    def __init__(self, server: Server) -> None:
        self.server = server
        self.node = server.node
        self.hot: HotState = server.hot
        self.transport: asyncio.Transport | None = None
        self.id = 0
        self.addr = ""
        self.laddr = ""
        self.local_ip = ""
        self.ip = ""  # the peer's IP ("" on the unix socket)
        self.name = b""
        self.ctime = time.time()
        self.last_interaction = self.ctime
        # ACL (disq/acl.py): the user the client acts as (the default one until AUTH)
        # and whether it authenticated (failed AUTHs are throttled per address:
        # auth_throttle.py).
        self.user = server.acl.default
        self.authenticated = not server.acl.auth_required
        # Until it first authenticates, Redis's limits for an unauthenticated client,
        # checked from the requests' headers (None: none apply, nothing checked).
        self._unauthenticated: UnauthenticatedRequests | None = (
            None if self.authenticated else UnauthenticatedRequests())
        self.resp3 = False  # HELLO 3: CONFIG GET answers a map, COMMAND Redis 6 entries
        self.last_command = b"NULL"
        self.closing = False
        self.close_after_reply = False
        self._reader = hiredis.Reader()
        self._inline_part = b""  # an inline request begun, until its newline (not `_inline`:
        # mypyc names the C field after the attribute, and `__inline` is a keyword of gcc)
        self._mb_pending = 0  # bytes of an unfinished multibulk request held by hiredis
        self._mb_head = b""  # the first bytes of that request (see check_bulk_lengths)
        self._refused = b""  # a request hiredis refused, until Redis would refuse it
        self._pending: deque[list[bytes]] = deque()
        # Replies held back behind one still awaited (see `defer`): bytes or slots.
        self._replies: deque[bytes | Pending] = deque()
        self._flush_scheduled = False
        self._held_requests_limit = 100_000
        self._reading_paused = False
        # blocking state
        self.blocked = False
        self._parked: Pending | None = None  # the reply of the parked GETJOB
        self.blocked_queues: list[Queue] = []
        self.block_timer: asyncio.TimerHandle | None = None
        self.block_with_counters = False
        # client limits (limits.py): `limited` is the one test a request pays when
        # none applies: over maxclients-per-ip, or a client-rate-limit bucket.
        self.limited = False
        self.over_ip_limit = False
        self.bucket: TokenBucket | None = None

    # -- asyncio callbacks -----------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.addr, self.laddr, self.local_ip, self.ip = _addresses(transport)
        self.server.client_connected(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closing = True
        self.server.hot.monitors.discard(self)
        if self.blocked:
            self._cancel_block()
        for item in self._replies:
            if type(item) is Pending and item.reply is None:
                if item.on_cancel is not None:
                    item.on_cancel(item.cancel_arg)
        self._replies.clear()
        self.server.client_disconnected(self)
        self.transport = None
        # The parser keeps what it read (a 100 MB job body) until its next feed; the
        # client object may wait for the cycle collector, which an idle node never runs.
        self._reader = hiredis.Reader()

    def pause_writing(self) -> None:
        # The client is not reading its replies: stop reading its requests.
        if self.transport is not None and not self._reading_paused:
            self._reading_paused = True
            self.transport.pause_reading()
        self.server.output_backlogged(self)  # client-output-buffer-limit

    def resume_writing(self) -> None:
        self.server.output_drained(self)
        if self.transport is not None and self._reading_paused and not self.blocked:
            self._reading_paused = False
            self.transport.resume_reading()

    def data_received(self, data: bytes) -> None:
        if self._unauthenticated is not None:
            self._received_unauthenticated(self._unauthenticated, data)
        else:
            self._received(data)

    def _received(self, data: bytes) -> None:
        hot = self.hot
        self.last_interaction = hot.unixtime
        hot.net_input_bytes += len(data)
        requests: list[list[bytes]] = []
        try:
            self._parse(data, requests)
        except (ProtocolError, hiredis.ProtocolError) as exc:
            # As Redis does: the requests before the bad one are answered first.
            if requests and not (self.blocked or self._pending):
                self._execute(requests)
            if not self.close_after_reply:
                self._protocol_error(redis_protocol_message(str(exc)))
            return
        if self.blocked or self._pending:
            self._pending.extend(requests)
            if len(self._pending) > self._held_requests_limit and not self._reading_paused:
                self._reading_paused = True
                self.transport.pause_reading()  # type: ignore[union-attr]
            return
        self._execute(requests)

    def _received_unauthenticated(self, limits: UnauthenticatedRequests, data: bytes) -> None:
        """Bytes from a client not authenticated yet: the requests before the first one
        over the limits (if any) run, then it is closed, as Redis does, unless one of
        them authenticated it (a pipelined AUTH lifts the limits for what follows)."""
        if not self.authenticated and self.server.acl.auth_required:
            hot = self.hot
            cut = limits.scan(data, hot.proto_max_bulk_len, hot.proto_max_multibulk_len)
            if cut < 0:
                self._received(data)
                return
            if cut:
                self._received(data[:cut])
            if self.closing or self.close_after_reply:
                return
            if not self.authenticated and self.server.acl.auth_required:
                self._protocol_error(limits.message)
                return
            data = data[cut:]
        self._unauthenticated = None  # for good: its stream is not followed any more
        self._received(data)

    # -- parsing ---------------------------------------------------------------------
    def _parse(self, data: bytes, out: list[list[bytes]]) -> None:
        """Append the complete requests in `data` to `out`, fed to hiredis in pieces of
        about FEED_PIECE bytes, as if they had come in so many reads: hiredis moves what
        it holds unread to the front of its buffer each time it has consumed 1 KiB,
        which over a 256 KiB read of pipelined ADDJOBs costs more than parsing them. A
        piece ends where a request seems to start (`\r\n*`), so that no request is
        left unfinished at its end, whose headers would be checked again with the next
        piece (a big request, an ACKJOB of 1,000 IDs, goes whole)."""
        size = len(data)
        if size <= FEED_PIECE:
            self._parse_piece(data, out)
            return
        start = 0
        while start < size:
            cut = data.find(b"\r\n*", start + FEED_PIECE) if start + FEED_PIECE < size else -1
            end = cut + 2 if cut >= 0 else size  # (no request starts further: the rest)
            self._parse_piece(data[start:end] if start or end < size else data, out)
            start = end

    def _parse_piece(self, data: bytes, out: list[list[bytes]]) -> None:
        reader = self._reader
        limits = self.hot
        if self._refused:
            self._wait_for_the_error(data)
            return
        started = self._mb_head
        if self._mb_pending and self._mb_pending == len(started) and b"\r\n" not in started:
            # The last read ended inside a new multibulk's header line (`*`, `*-1`):
            # parse it again with this read, so that its count is checked (a negative
            # one skipped) as if the bytes had come at once.
            data = started + data
            self._reader = reader = hiredis.Reader()
            self._mb_pending = 0
            self._mb_head = b""
        while data:
            if self._inline_part or (
                self._mb_pending == 0 and data[0] != _STAR
            ):
                buf = self._inline_part + data if self._inline_part else data
                nl = buf.find(b"\n")
                if nl < 0:
                    if len(buf) > INLINE_MAX:
                        raise ProtocolError("too big inline request")
                    self._inline_part = buf
                    return
                self._inline_part = b""
                data = buf[nl + 1:]
                args = split_inline(buf[:nl])
                if args:
                    out.append(args)
                continue
            if self._mb_pending == 0 and data[0] == _STAR and (
                    len(data) < 3 or data[2] != _CR or data[1] == _MINUS):
                # Check the header of a new multibulk before buffering its body: a
                # negative count, or one of 4+ digits (which may be over the limit).
                # (A one-digit count, the usual case, needs no check here.)
                eol = data.find(b"\r\n", 0, 24)
                if eol > 4 or (eol > 0 and data[1] == _MINUS):
                    # Redis's string2ll: an optional '-' and digits, nothing else (int()
                    # would also take '+', '_' and white space: `*-11\n\r\n`).
                    text = data[1:eol]
                    if not (text[1:] if text[:1] == b"-" else text).isdigit():
                        raise ProtocolError("invalid multibulk length")
                    count = int(text)
                    if count < -1:  # Redis skips a negative count
                        data = data[eol + 2:]
                        continue
                    if count > limits.proto_max_multibulk_len:
                        raise ProtocolError("invalid multibulk length")
            reader.feed(data)
            chunk, fed, data = data, len(data), b""
            # Bytes fed to hiredis that no returned request accounts for yet. hiredis
            # only accepts canonical lengths, so a request's size follows from it.
            held = pending = self._mb_pending + fed
            max_args = limits.proto_max_multibulk_len
            may_be_too_big = held > limits.proto_max_bulk_len
            while True:
                try:
                    req = reader.gets()
                except hiredis.ProtocolError as exc:
                    if pending < held and 0 < pending <= fed:
                        # Not a multibulk after the last complete request: Redis picks
                        # the format per request, so parse the rest of the chunk afresh
                        # (an inline request, or a multibulk header hiredis refuses).
                        data = chunk[-pending:]
                        self._reader = reader = hiredis.Reader()
                        pending = 0
                        break
                    # The request's bytes, from its start, say what Redis would answer.
                    request = self._request_bytes(chunk, pending, fed)
                    message = multibulk_error(request, limits.proto_max_bulk_len)
                    if message is None and request:
                        # Redis answers only once the bad header's CR arrives.
                        self._refused = request
                        self._mb_pending = 0
                        return
                    raise ProtocolError(message or redis_protocol_message(str(exc))) from None
                if req is False:
                    break
                if type(req) is not list:
                    start = self._request_bytes(chunk, pending, fed)
                    if start:
                        if start[0] == _STAR:  # *-1: skipped, as Redis does
                            pending -= 5
                            if not 0 < pending <= fed or chunk[-pending] == _STAR:
                                continue
                            start = chunk[-pending:]  # then an inline request
                        # A reply-shaped line after a request (`:5`, `+OK`, `$-1`): in
                        # Redis a request not starting with '*' is an inline one.
                        data = start
                        self._reader = reader = hiredis.Reader()
                        pending = 0
                        break
                    raise ProtocolError("expected '*', got something else")
                n = len(req)
                if n > max_args:
                    raise ProtocolError("invalid multibulk length")
                size = _HEADER_SIZE[n] if n < _SIZE_TABLE else 3 + len(str(n))  # *<n>\r\n
                for arg in req:
                    if type(arg) is not bytes:  # (Redis names the first bad byte)
                        raise ProtocolError(multibulk_error(
                            self._request_bytes(chunk, pending, fed),
                            limits.proto_max_bulk_len) or not_a_bulk(arg))
                    n = len(arg)  # $<n>\r\n<arg>\r\n
                    size += _BULK_SIZE[n] if n < _SIZE_TABLE else n + 5 + len(str(n))
                pending -= size
                if pending < 0:
                    # Counted as bulk strings but shorter: a '+' element, which hiredis
                    # returns as bytes too (seen here at the latest at the end of the
                    # input that contains it).
                    raise ProtocolError("expected '$', got '+'")
                if req:
                    if may_be_too_big and max(map(len, req)) > limits.proto_max_bulk_len:
                        raise ProtocolError("invalid bulk length")
                    out.append(req)
                if not pending:
                    break  # every byte fed is accounted for: hiredis holds nothing
                if chunk[-pending] != _STAR:
                    # The next request is not a multibulk: hiredis would read it as a
                    # RESP3 reply (`#`, `,`, `%`...) and wait for more. An inline one.
                    data = chunk[-pending:]
                    self._reader = reader = hiredis.Reader()
                    pending = 0
                    break
            self._mb_pending = pending
            if pending > limits.client_query_buffer_limit:
                raise ProtocolError("client reached the max query buffer length")
            if pending:
                # The unfinished request's first bytes (its headers, as far as they
                # go), kept across reads so that a huge `$<len>` is refused whatever
                # the reads, as Redis does.
                if pending <= len(chunk):
                    offset = len(chunk) - pending
                    head: bytes | None = chunk[offset:offset + _HEAD_KEPT]
                elif len(self._mb_head) < _HEAD_KEPT:
                    head = self._mb_head + chunk[:_HEAD_KEPT - len(self._mb_head)]
                else:
                    head = None  # checked already, as far as it is kept
                if head is not None:
                    self._mb_head = head
                    check_bulk_lengths(head, limits.proto_max_bulk_len)

    def _request_bytes(self, chunk: bytes, pending: int, fed: int) -> bytes:
        """The bytes of the request being parsed, from its start, when known (b"" if
        not): in this read, or begun in an earlier one (its first bytes: _mb_head)."""
        if 0 < pending <= fed:
            return chunk[-pending:]
        if pending > fed and len(self._mb_head) < _HEAD_KEPT:
            return self._mb_head + chunk
        return b""

    def _wait_for_the_error(self, data: bytes) -> None:
        """A request hiredis refused, held until Redis would see what is wrong."""
        request = self._refused + data
        message = multibulk_error(request, self.hot.proto_max_bulk_len)
        if message is None and len(request) > INLINE_MAX:
            message = "too big bulk count string"
        if message is not None:
            raise ProtocolError(message)
        self._refused = request

    def _protocol_error(self, message: str) -> None:
        self.server.log_verbose(f"Protocol error ({message}) from client: {self.addr}")
        if self.transport is not None:
            self.transport.write(b"-ERR Protocol error: " + message.encode("latin-1", "replace")
                                 + b"\r\n")
            self.transport.close()
        self.closing = True

    # -- execution -------------------------------------------------------------------
    def _execute(self, requests: list[list[bytes]]) -> None:
        out: list[bytes | Pending] = []
        hot = self.hot
        deferred = False
        aof = self.node.aof
        logged = aof.appended if aof is not None else 0
        i = 0
        n = len(requests)
        while i < n:
            if hot.clients_paused_until and time.monotonic() < hot.clients_paused_until:
                # CLIENT PAUSE: this request and the ones after it wait for its end.
                self._pending.extend(requests[i:])
                self.server.paused_clients.add(self)
                break
            args = requests[i]
            i += 1
            if self.limited:
                refused = self._limit_refusal(args)
                if refused is not None:
                    out.append(refused)
                    continue
            rep = self.dispatch(args)
            if type(rep) is Pending:  # answered later: it keeps its place
                out.append(rep)
                deferred = True
                if rep.holds:  # parked: the rest waits for the answer
                    self._pending.extend(requests[i:])
                    break
                continue
            out.append(rep)
            if self.close_after_reply:
                break
        if aof is not None and aof.appended != logged and not aof.commit():
            # What these requests logged is not as safe as the AOF policy promises
            # yet (appendfsync always: not fsynced; or a write error): their replies
            # wait behind an empty one, answered when it is.
            gate = self.pending(durable=True)
            out.insert(0, gate)
            gate.answer(b"")
            deferred = True
        if deferred or self._replies:
            replies = self._replies
            replies.extend(out)
            head = replies[0]
            if type(head) is not Pending or head.reply is not None:
                self._flush_replies()  # else nothing can leave yet (an ADDJOB waits)
            return
        if out and self.transport is not None:  # all bytes: no Pending among them
            data = out[0] if len(out) == 1 else b"".join(out)  # type: ignore[arg-type]
            hot.net_output_bytes += len(data)  # type: ignore[arg-type]
            self.transport.write(data)  # type: ignore[arg-type]
        if self.close_after_reply and self.transport is not None:
            self.transport.close()

    def dispatch(self, args: list[bytes]) -> bytes | Pending:
        spec = LOOKUP.get(args[0]) or COMMANDS.get(args[0].lower())
        server = self.server
        if spec is None:
            if args[0].lower() == b"quit":
                self.close_after_reply = True
                return reply.OK
            return b"-ERR unknown command '%s'\r\n" % _printable(args[0])
        # Checks in Disque's order: unknown command, arity, authentication, -OOM (not
        # while loading), AOF write error (-MISCONF), loading.
        argc, arity = len(args), spec.arity
        if (argc != arity) if arity > 0 else (argc < -arity):
            return b"-ERR wrong number of arguments for '%s' command\r\n" % spec.bname
        if not self.authenticated and not spec.noauth and server.acl.auth_required:
            return ERR_NOAUTH
        user = self.user
        if user.restricted and not spec.noauth and spec.name not in user.allowed:
            refused = self._acl_refusal(spec, args)
            if refused is not None:
                return refused
        if not user.all_queues and spec.queues is not None and not user_may_use_all(
                user, spec.queues.find(args)):
            server.acl.denied_key += 1
            return NOPERM_KEY.REPLY
        if spec.denyoom and self.node.job_bytes > self.node.full_bytes and (
                not server.loading and not self.node.make_room(0)):
            return ERR_OOM
        hot = self.hot
        if hot.refusing:
            refused = server.refusal(spec.flags, spec.name)
            if refused is not None:
                return refused
        self.last_command = spec.bname
        if hot.monitors:
            server.feed_monitors(self, args)
        start = _perf_ns()
        try:
            rep = spec.handler(self, args)
        except DisqError as exc:
            rep = exc.reply()
        except Exception as exc:  # a bug must not take the node down
            server.log_exception(f"Error while executing {spec.name}", exc)
            rep = b"-ERR internal error while executing '%s'\r\n" % spec.bname
        usec = (_perf_ns() - start) // 1000
        spec.calls += 1
        user.calls += 1
        spec.usec += usec
        if usec >= hot.slow_usec:  # for SLOWLOG or LATENCY
            server.slow_command(usec, args)
        return rep

    def _acl_refusal(self, spec: CommandSpec, args: list[bytes]) -> bytes | None:
        """-NOPERM for a command the user may not run. Only asked for a restricted
        user. The subcommands Redis puts in @connection, not @admin, are allowed to
        every user: ACL WHOAMI and CAT, CLIENT ID, GETNAME, SETNAME and SETINFO (which
        client libraries send on connecting)."""
        if len(args) > 1:
            allowed = _EVERY_USERS_SUBCOMMANDS.get(spec.name)
            if allowed is not None and args[1].lower() in allowed:
                return None
        self.server.acl.denied_cmd += 1
        return b"-NOPERM User %s has no permissions to run the '%s' command\r\n" % (
            _printable(self.user.name.encode()), spec.bname)

    # -- client limits (maxclients-per-ip, client-rate-limit) ----------------------------
    def _limit_refusal(self, args: list[bytes]) -> bytes | None:
        """The -BUSY reply of a request a client limit refuses (None: it runs). Only
        asked while `limited`. QUIT is never refused and takes no token."""
        if args[0].lower() == b"quit":
            return None
        server = self.server
        if self.over_ip_limit:
            server.rejected_commands_per_ip += 1
            return b"-BUSY too many connections from %s (maxclients-per-ip is %d)\r\n" % (
                self.ip.encode(), server.config.maxclients_per_ip)
        bucket = self.bucket
        if bucket is not None and not bucket.take(time.monotonic()):
            server.rejected_commands_rate += 1
            return b"-BUSY client-rate-limit reached (%d commands per second)\r\n" % (
                server.config.client_rate_limit)
        return None

    def set_over_ip_limit(self, over: bool) -> None:
        """The registry's word: this connection is (no longer) over maxclients-per-ip."""
        self.over_ip_limit = over
        self.limited = over or self.bucket is not None

    def set_rate_limit(self, rate: int) -> None:
        """client-rate-limit: `rate` commands a second (0: none), from now on."""
        if not rate:
            self.bucket = None
        elif self.bucket is None:
            self.bucket = TokenBucket(rate, time.monotonic())
        else:
            self.bucket.set_rate(rate, time.monotonic())
        self.limited = self.over_ip_limit or self.bucket is not None

    # -- closing -----------------------------------------------------------------------
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
            f"cmd={self.last_command.decode().lower()} "
            f"user={self.user.name}"
        )


def _printable(name: bytes) -> bytes:
    return name[:128].replace(b"\r", b" ").replace(b"\n", b" ")


def _addresses(transport: asyncio.BaseTransport) -> tuple[str, str, str, str]:
    """(addr, laddr, the local IP, the peer's IP or "" on the unix socket)"""
    def fmt(a: object) -> str:
        if isinstance(a, tuple) and len(a) >= 2:
            host = a[0]
            return f"[{host}]:{a[1]}" if ":" in host else f"{host}:{a[1]}"
        return str(a or "/unixsocket") + ":0"

    peer = transport.get_extra_info("peername")
    sock = transport.get_extra_info("sockname")
    local_ip = sock[0] if isinstance(sock, tuple) else "127.0.0.1"
    peer_ip = peer[0] if isinstance(peer, tuple) else ""
    return fmt(peer), fmt(sock), local_ip, peer_ip

