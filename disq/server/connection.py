"""One client connection, a thin asyncio shell: bytes in, requests out of the parser,
dispatched, replies out.

`data_received` hands each read to the client's `RequestParser` (request_parser.py,
sans I/O: the RESP format, Redis's limits and error texts), runs the requests it
completes in order, and all their replies leave in a single `transport.write`. A
request that parks the client (blocking GETJOB) stops execution; later requests wait
in `_pending` until the client is answered, as Redis does for blocked clients. An
ADDJOB waiting for its copies does not park the client: its reply keeps its place
(`defer`) while the next requests run, so a pipeline of replicated ADDJOBs is
replicated in parallel, in one bus write per peer.

A client that has not authenticated yet (a password being required) is held to
Redis's limits for it: the parser stops before the first request over them, the
requests before it run, and unless one of them authenticated the client, it gets the
protocol error and is closed.

Elsewhere: the reply queue and the parked GETJOB are `LaterReplies` (pending.py, a
part of Client); when the connection stops reading its client is `ReadPause`
(read_pause.py).
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from typing import TYPE_CHECKING, Final

from mypy_extensions import mypyc_attr

from ..errors import DisqError
from ..outcomes import when_durable
from ..queue import Queue
from . import reply
from .guard import printable, refusal
from .hotstate import HotState
from .limits import TokenBucket
from .pending import LaterReplies, Pending
from .read_pause import ReadPause
from .request_parser import RequestParser
from .table import COMMANDS, LOOKUP

if TYPE_CHECKING:
    from ..where import Condition
    from .app import Server

_perf_ns: Final = time.perf_counter_ns

ERR_NOAUTH: Final = b"-NOAUTH Authentication required.\r\n"


# Tests subclass Client in Python.
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
        # Until it first authenticates, the parser holds it to Redis's limits for an
        # unauthenticated client.
        self.parser = RequestParser(server.hot.request_limits, not self.authenticated)
        self.resp3 = False  # HELLO 3: CONFIG GET answers a map, COMMAND Redis 6 entries
        self.last_command = b"NULL"
        self.closing = False
        self.close_after_reply = False
        self._pending: deque[list[bytes]] = deque()
        # Replies held back behind one still awaited (see `defer`): bytes or slots.
        self._replies: deque[bytes | Pending] = deque()
        self._flush_scheduled = False
        self.reads = ReadPause()
        # blocking state
        self.blocked = False
        self._parked: Pending | None = None  # the reply of the parked GETJOB
        self.blocked_queues: list[Queue] = []
        self.block_timer: asyncio.TimerHandle | None = None
        self.block_with_counters = False
        self.where: list[Condition] | None = None  # a blocked GETJOB ... WHERE's
        # what the dashboard's Workers page shows: jobs this connection took (GETJOB)
        # and settled itself (ACKJOB, FASTACK, NACK); the rest are in its hands
        self.jobs_taken = 0
        self.jobs_settled = 0
        # client limits (limits.py): `limited` is the one test a request pays when
        # none applies: over maxclients-per-ip, or a client-rate-limit bucket.
        self.limited = False
        self.over_ip_limit = False
        self.bucket: TokenBucket | None = None

    # -- asyncio callbacks -----------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = self.reads.transport = transport  # type: ignore[assignment]
        self.addr, self.laddr, self.local_ip, self.ip = _addresses(transport)
        self.server.clients.client_connected(self)

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
        self.server.clients.client_disconnected(self)
        self.transport = None
        self.reads.transport = None
        self.parser.discard()

    def pause_writing(self) -> None:
        # The client is not reading its replies: stop reading its requests.
        self.reads.pause()
        self.server.clients.output_backlogged(self)  # client-output-buffer-limit

    def resume_writing(self) -> None:
        self.server.clients.output_drained(self)
        if not self.blocked:
            self.reads.resume()

    def data_received(self, data: bytes) -> None:
        hot = self.hot
        self.last_interaction = hot.unixtime
        hot.net_input_bytes += len(data)
        self.user.bytes_in += len(data)
        parser = self.parser
        if parser.unauthenticated:
            self._received_before_auth(parser, data)
            return
        requests = parser.feed(data)
        if parser.error is not None:
            self._refuse_after(requests, parser.error)
        elif self.blocked or self._pending:
            self._hold(requests)
        else:
            self._execute(requests)

    def _received_before_auth(self, parser: RequestParser, data: bytes) -> None:
        """A read of a client that had not authenticated (the parser follows it): the
        requests before the first one over Redis's limits for it run, then it is
        closed, as Redis does, unless one of them authenticated it (a pipelined AUTH
        lifts the limits for what follows)."""
        if self.authenticated or not self.server.acl.auth_required:
            parser.authenticated()  # for good: its requests are not checked any more
        requests = parser.feed(data)
        error = parser.error
        if error is not None and parser.waiting_for_auth:
            if requests:
                self._run(requests)
            if self.closing or self.close_after_reply:
                return
            if not self.authenticated and self.server.acl.auth_required:
                self._protocol_error(error)
                return
            requests = parser.authenticated()
            error = parser.error
        if error is not None:
            self._refuse_after(requests, error)
        else:
            self._run(requests)

    def _run(self, requests: list[list[bytes]]) -> None:
        """Execute the requests now, or after those held."""
        if self.blocked or self._pending:
            self._hold(requests)
        else:
            self._execute(requests)

    def _hold(self, requests: list[list[bytes]]) -> None:
        """Requests that wait behind a parked GETJOB or a CLIENT PAUSE."""
        self._pending.extend(requests)
        self.reads.requests_held(len(self._pending))

    def _refuse_after(self, requests: list[list[bytes]], error: str) -> None:
        """A protocol error: as Redis does, the requests before the bad one are
        answered first, then the error, and the connection is closed."""
        if requests and not (self.blocked or self._pending):
            self._execute(requests)
        if not self.close_after_reply:
            self._protocol_error(error)

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
        node = self.node
        persistence = node.persistence
        recording = node.recording  # (a field: no call per batch without the AOF)
        logged = persistence.appended if recording else 0
        i = 0
        n = len(requests)
        while i < n:
            if hot.clients_paused_until and time.monotonic() < hot.clients_paused_until:
                # CLIENT PAUSE: this request and the ones after it wait for its end.
                self._pending.extend(requests[i:])
                self.server.clients.paused.add(self)
                break
            args = requests[i]
            i += 1
            if self.limited:
                refused = self._limit_refusal(args)
                if refused is not None:
                    out.append(refused)
                    continue
            rep = self.dispatch(args)
            if node.consumers.ready:  # consumers the command gave jobs to: served now, after
                node.consumers.serve_ready()  # it (Disque's processCommand), never inside it
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
        if recording and persistence.appended != logged and not persistence.commit():
            # What these requests logged is not as safe as the AOF policy promises
            # yet (appendfsync always: not fsynced; or a write error): their replies
            # wait behind an empty one, answered when it is.
            gate = self.pending()
            out.insert(0, gate)
            when_durable(self.node, gate.answer, b"")
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
            self.user.bytes_out += len(data)  # type: ignore[arg-type]
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
            return b"-ERR unknown command '%s'\r\n" % printable(args[0])
        # Checks in Disque's order: unknown command, arity, authentication, -OOM (not
        # while loading), AOF write error (-MISCONF), loading.
        argc, arity = len(args), spec.arity
        if (argc != arity) if arity > 0 else (argc < -arity):
            return b"-ERR wrong number of arguments for '%s' command\r\n" % spec.bname
        if not self.authenticated and not spec.noauth and server.acl.auth_required:
            return ERR_NOAUTH
        # Then the user's commands and queues, -OOM, -MISCONF, -LOADING: `refusal`'s
        # (guard.py), asked only when one may refuse (a restricted user, a node refusing,
        # memory over the 95% mark), so that a request pays these three tests, no call.
        user = self.user
        hot = self.hot
        if user.restricted or hot.refusing or (
                spec.denyoom and self.node.job_bytes > self.node.full_bytes):
            refused = refusal(server, user, spec, args)
            if refused is not None:
                return refused.reply()
        self.last_command = spec.bname
        if hot.monitors:
            server.clients.feed_monitors(self, args)
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
        histogram = spec.histogram
        if histogram is not None:  # ADDJOB, GETJOB: until answered, replies that wait too
            if type(rep) is Pending:
                rep.timed(histogram, start)
            else:
                histogram.observe(usec)
        if usec >= hot.slow_usec:  # for SLOWLOG or LATENCY
            server.stats.slow_command(usec, args)
        return rep

    # -- client limits (maxclients-per-ip, client-rate-limit) ----------------------------
    def _limit_refusal(self, args: list[bytes]) -> bytes | None:
        """The -BUSY reply of a request a client limit refuses (None: it runs). Only
        asked while `limited`. QUIT is never refused and takes no token."""
        if args[0].lower() == b"quit":
            return None
        server = self.server
        if self.over_ip_limit:
            server.clients.rejected_commands_per_ip += 1
            return b"-BUSY too many connections from %s (maxclients-per-ip is %d)\r\n" % (
                self.ip.encode(), server.config.maxclients_per_ip)
        bucket = self.bucket
        if bucket is not None and not bucket.take(time.monotonic()):
            server.clients.rejected_commands_rate += 1
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
            f"multi=-1 qbuf={self.parser.buffered()} qbuf-free=0 obl=0 "
            f"oll={len(self._pending)} omem=0 events=r "
            f"cmd={self.last_command.decode().lower()} "
            f"user={self.user.name}"
        )


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

