"""RESP requests from a client's bytes, sans I/O: `RequestParser.feed(data)` gives the
complete requests (each a list of bytes) and, once it reaches a request Redis would
refuse, Redis's reason (`error`). No socket, no Client, no server: the limits come in
a `RequestLimits`, the one object CONFIG SET changes for every client.

Inline commands (`PING\\r\\n` typed in telnet) are parsed here; multibulk requests
go to hiredis. As in Redis each request picks its format by its first byte (`*` =
multibulk). hiredis accepts only canonical lengths, so the size of every request it
returns is known: `_mb_pending` counts the bytes it holds beyond complete requests,
0 means a request boundary, and when hiredis refuses what follows a complete request
in the same read (an inline request), the rest is parsed afresh.

A client that has not authenticated yet (a password being required) is first held to
Redis's limits for it, from each request's headers (resp.UnauthenticatedRequests):
`feed` stops before the first request over them, and `authenticated()` lifts them (a
pipelined AUTH before it lifts them for what follows, as in Redis).

The helpers (inline splitting, Redis's protocol error texts) are in resp.py; the
connection that feeds this is connection.py.
"""

from __future__ import annotations

from typing import Final

import hiredis

from .resp import (
    ProtocolError,
    UnauthenticatedRequests,
    check_bulk_lengths,
    multibulk_error,
    not_a_bulk,
    redis_protocol_message,
    split_inline,
)

INLINE_MAX: Final = 64 * 1024
_STAR: Final = 42  # b"*"
_MINUS: Final = 45  # b"-"
_CR: Final = 13  # b"\r"
FEED_PIECE: Final = 16 * 1024  # RequestParser._parse
_HEAD_KEPT: Final = 64 * 1024  # bytes of an unfinished multibulk whose headers are checked
# Encoded size of a `*<n>\r\n` / `$<n>\r\n` header, by n (the parser's byte accounting).
_SIZE_TABLE: Final = 10_000
_HEADER_SIZE: Final = [3 + len(str(n)) for n in range(_SIZE_TABLE)]
_BULK_SIZE: Final = [n + size + 2 for n, size in enumerate(_HEADER_SIZE)]


class RequestLimits:
    """The directives that bound a request (their CONFIG names): one object shared by
    every parser of a server, kept current by the server as CONFIG SET changes them."""

    __slots__ = ("proto_max_bulk_len", "proto_max_multibulk_len", "client_query_buffer_limit")

    def __init__(self, proto_max_bulk_len: int, proto_max_multibulk_len: int,
                 client_query_buffer_limit: int) -> None:
        self.proto_max_bulk_len = proto_max_bulk_len
        self.proto_max_multibulk_len = proto_max_multibulk_len
        self.client_query_buffer_limit = client_query_buffer_limit


class RequestParser:
    """One client's request stream, across its reads."""

    __slots__ = ("limits", "error", "unauthenticated", "waiting_for_auth", "_before_auth",
                 "_held", "_reader", "_inline_part", "_mb_pending", "_mb_head", "_refused")

    def __init__(self, limits: RequestLimits, unauthenticated: bool = False) -> None:
        self.limits = limits
        # Why the stream was refused, in Redis's words (the client sees `-ERR Protocol
        # error: <error>`), once feed reached a bad request: nothing more is parsed.
        self.error: str | None = None
        # Redis's limits for a client not authenticated yet apply (until authenticated()).
        self.unauthenticated = unauthenticated
        # feed stopped before a request over them (`error` says which): the rest of that
        # read waits in `_held` until the client authenticates or is closed.
        self.waiting_for_auth = False
        self._before_auth: UnauthenticatedRequests | None = (
            UnauthenticatedRequests() if unauthenticated else None)
        self._held = b""
        self._reader = hiredis.Reader()
        self._inline_part = b""  # an inline request begun, until its newline (not `_inline`:
        # mypyc names the C field after the attribute, and `__inline` is a keyword of gcc)
        self._mb_pending = 0  # bytes of an unfinished multibulk request held by hiredis
        self._mb_head = b""  # the first bytes of that request (see check_bulk_lengths)
        self._refused = b""  # a request hiredis refused, until Redis would refuse it

    def feed(self, data: bytes) -> list[list[bytes]]:
        """The requests `data` completes, in order (a request with no arguments, an
        empty inline line, is none). At a request Redis would refuse, the ones before
        it are returned and `error` is set; after that, feed takes nothing."""
        requests: list[list[bytes]] = []
        if self.error is not None:
            return requests
        if self._before_auth is not None:
            self._feed_before_auth(self._before_auth, data, requests)
            return requests
        try:  # (not _parse_into: a call less per read, on the hot path)
            self._parse(data, requests)
        except (ProtocolError, hiredis.ProtocolError) as exc:
            self.error = redis_protocol_message(str(exc))
        return requests

    def _feed_before_auth(self, before_auth: UnauthenticatedRequests, data: bytes,
                          out: list[list[bytes]]) -> None:
        """feed, the stream followed first (Redis's limits for an unauthenticated
        client)."""
        limits = self.limits
        cut = before_auth.scan(data, limits.proto_max_bulk_len, limits.proto_max_multibulk_len)
        if cut < 0:
            self._parse_into(data, out)
            return
        if cut:
            self._parse_into(data[:cut], out)
        if self.error is None:
            self.error = before_auth.message
            self.waiting_for_auth = True
            self._held = data[cut:]

    def authenticated(self) -> list[list[bytes]]:
        """The client authenticated (or no password is required any more): the limits
        for an unauthenticated client are lifted for good. If feed stopped at a request
        over them, it and the rest of its read are parsed now: their requests (and
        `error`, as after feed)."""
        self.unauthenticated = False
        self._before_auth = None
        requests: list[list[bytes]] = []
        if self.waiting_for_auth:
            self.waiting_for_auth = False
            self.error = None
            held, self._held = self._held, b""
            if held:
                self._parse_into(held, requests)
        return requests

    def buffered(self) -> int:
        """Bytes the parser holds of a request not complete yet (CLIENT LIST's qbuf)."""
        return int(self._reader.len())

    def discard(self) -> None:
        """Let go of what it holds (the client is gone): hiredis keeps what it read (a
        100 MB job body) until its next feed, and the client object may wait for the
        cycle collector, which an idle node never runs."""
        self._reader = hiredis.Reader()
        self._held = self._inline_part = self._mb_head = self._refused = b""
        self._mb_pending = 0

    def _parse_into(self, data: bytes, out: list[list[bytes]]) -> None:
        try:
            self._parse(data, out)
        except (ProtocolError, hiredis.ProtocolError) as exc:
            self.error = redis_protocol_message(str(exc))

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
        limits = self.limits
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
        message = multibulk_error(request, self.limits.proto_max_bulk_len)
        if message is None and len(request) > INLINE_MAX:
            message = "too big bulk count string"
        if message is not None:
            raise ProtocolError(message)
        self._refused = request
