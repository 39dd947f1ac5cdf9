"""RESP requests as Redis reads them: inline requests split as sdssplitargs does, and
Redis's wording of every protocol error (the client sees `-ERR Protocol error:
<message>`). The parsing itself is `RequestParser` (request_parser.py), the hot path;
these are its helpers."""

from __future__ import annotations

import re
from typing import Final


class ProtocolError(Exception):
    """A request Redis would refuse: the message is Redis's."""


# What hiredis returns for an element that is not a bulk string -> the type byte
# Redis names in its error ("expected '$', got ':'").
_TYPE_BYTES: Final = {int: ":", list: "*", float: ",", bool: "#", dict: "%", set: "~"}


def not_a_bulk(arg: object) -> str:
    if arg is None:  # $-1: a bulk length Redis refuses
        return "invalid bulk length"
    if isinstance(arg, Exception):  # hiredis returns -ERR lines as error objects
        return "expected '$', got '-'"
    return f"expected '$', got '{_TYPE_BYTES.get(type(arg), '?')}'"


_SPACE: Final = b" \t\r\n\x0b\x0c"  # isspace(): around words and after a closing quote
_HEX: Final = b"0123456789abcdefABCDEF"


def split_inline(line: bytes) -> list[bytes]:
    """Split an inline request like Redis's sdssplitargs: spaces separate words,
    "double" quotes take \\n \\r \\t \\xHH escapes, 'single' quotes are literal."""
    line = line.rstrip(b"\r")
    if b'"' not in line and b"'" not in line and b"\x0b" not in line and b"\x0c" not in line:
        return line.split()  # (\v and \f separate words here, not in Redis)
    args: list[bytes] = []
    i, n = 0, len(line)
    while True:
        while i < n and line[i] in _SPACE:
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
                    if nxt == 0x78 and i + 3 < n and line[i + 2] in _HEX and (
                            line[i + 3] in _HEX):  # \xHH
                        cur.append(int(line[i + 2:i + 4], 16))
                        i += 4
                        continue
                    cur.append({0x6E: 10, 0x72: 13, 0x74: 9, 0x62: 8, 0x61: 7}.get(nxt, nxt))
                    i += 2
                    continue
                if c == 0x22:
                    if i + 1 < n and line[i + 1] not in _SPACE:
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
                    if i + 1 < n and line[i + 1] not in _SPACE:
                        raise ProtocolError("unbalanced quotes in request")
                    quote = 0
                    i += 1
                    break
                cur.append(c)
            else:
                if c in b" \t\r\n":
                    break
                if c == 0x22 or c == 0x27:  # a quote opens anywhere, as in Redis
                    quote = c
                    i += 1
                    continue
                cur.append(c)
            i += 1
        args.append(bytes(cur))


def check_bulk_lengths(partial: bytes, limit: int) -> None:
    """Walk the headers of an unfinished multibulk request and refuse it as soon as
    Redis would (an argument longer than `limit` once its `$<len>` arrives, an element
    that is not a bulk string), rather than buffering it up to the query buffer limit."""
    message = multibulk_error(partial, limit)
    if message is not None:
        raise ProtocolError(message)


_CRLF: Final = ("\r", "\n")
_DOLLAR: Final = 36  # b"$"
_CANONICAL: Final = re.compile(rb"(0|-?[1-9][0-9]{0,18})\Z")  # what Redis's string2ll takes


def multibulk_error(request: bytes, max_bulk: int) -> str | None:
    """The first error Redis's processMultibulkBuffer finds in `request` (a multibulk
    request from its `*`), or None if none shows in these bytes."""
    eol = request.find(b"\r\n")
    if not request.startswith(b"*") or eol < 0:
        return None
    if not _CANONICAL.match(request[1:eol]) or int(request[1:eol]) > 1024 * 1024:
        return "invalid multibulk length"
    pos = eol + 2
    for _ in range(int(request[1:eol])):
        if request.find(b"\r", pos) < 0:
            return None  # Redis reads an element's header once a CR arrives
        if request[pos] != _DOLLAR:
            got = chr(request[pos])
            return f"expected '$', got '{' ' if got in _CRLF else got}'"
        eol = request.find(b"\r\n", pos)
        if eol < 0:
            return None
        digits = request[pos + 1:eol]
        if not _CANONICAL.match(digits) or not 0 <= int(digits) <= max_bulk:
            return "invalid bulk length"
        pos = eol + 2 + int(digits) + 2
    return None


# Redis's limits for a client that has not authenticated while a password is required
# (since 6.2.6, CVE-2021-32675): HELLO 3 AUTH user pass SETNAME name is 7 arguments.
UNAUTH_MAX_ARGS: Final = 10
UNAUTH_MAX_BULK: Final = 16 * 1024
UNAUTH_MAX_INLINE: Final = 16 * 1024  # disq's: an inline request's line, as one bulk
_UNAUTH_MAX_HEADER: Final = 24  # a longer `*<count>` / `$<length>` line is over them
_INT_MAX: Final = 2**31 - 1
_STAR: Final = 42  # b"*"
# Where an unauthenticated client's stream is: between requests, in a `*<count>` line,
# a `$<length>` line, an argument's bytes, an inline request's line.
_BETWEEN: Final = 0
_COUNT: Final = 1
_LENGTH: Final = 2
_BODY: Final = 3
_INLINE: Final = 4


class UnauthenticatedRequests:
    """The requests of a client that has not authenticated yet (a password being
    required), followed from their headers as Redis reads them, so that the first one
    over Redis's limits for such a client (UNAUTH_MAX_ARGS arguments, of at most
    UNAUTH_MAX_BULK bytes; an inline line of at most UNAUTH_MAX_INLINE) is found from
    its `*<count>` or `$<length>` line, before the parser buffers what it announces
    (hiredis holds a bulk string until it is complete). Keeps only where the stream is
    and a header line begun (a few bytes) across reads."""

    __slots__ = ("_state", "_line", "_left", "_args", "message")

    def __init__(self) -> None:
        self._state = _BETWEEN
        self._line = b""  # a header line begun in an earlier read
        self._left = 0  # _BODY: its bytes still to come; _INLINE: its line's bytes so far
        self._args = 0  # arguments of the current multibulk not yet begun
        self.message = ""  # why the request scan() pointed at is refused

    def scan(self, data: bytes, max_bulk: int, max_args: int) -> int:
        """Where in `data` the first request over the limits starts (0 if it began in
        an earlier read), -1 if none is; `message` says why, in Redis's words (its
        usual ones for a header that is not a number). Every byte is followed: the
        next call continues where this one stopped."""
        pos = start = 0
        end = len(data)
        while pos < end:
            state = self._state
            if state == _BODY:
                if end - pos < self._left:
                    self._left -= end - pos
                    return -1
                pos += self._left
                self._args -= 1
                self._state = _LENGTH if self._args else _BETWEEN
            elif state == _BETWEEN:
                start = pos
                self._left = 0
                if data[pos] == _STAR:
                    self._state = _COUNT
                    pos += 1
                else:
                    self._state = _INLINE
            elif state == _INLINE:
                nl = data.find(b"\n", pos)
                self._left += (end if nl < 0 else nl) - pos
                if self._left > UNAUTH_MAX_INLINE:
                    return self._refuse(start, "unauthenticated inline length")
                if nl < 0:
                    return -1
                pos = nl + 1
                self._state = _BETWEEN
            else:  # a header line, up to its LF
                room = _UNAUTH_MAX_HEADER - len(self._line)
                nl = data.find(b"\n", pos, pos + room)
                if nl < 0:
                    if end - pos >= room:
                        return self._refuse(start, "unauthenticated multibulk length"
                                            if state == _COUNT else
                                            "unauthenticated bulk length")
                    self._line += data[pos:]
                    return -1
                line = self._line + data[pos:nl]
                self._line = b""
                pos = nl + 1
                message = (self._count(line, max_args) if state == _COUNT
                           else self._length(line, max_bulk))
                if message:
                    return self._refuse(start, message)
        return -1

    def _count(self, line: bytes, max_args: int) -> str:
        """A `*<count>` line (after its `*`, with its CR): an error, or "" (and the
        state that follows)."""
        digits = line[:-1]
        if line[-1:] != b"\r" or not _CANONICAL.match(digits):
            return "invalid multibulk length"
        count = int(digits)
        if count > _INT_MAX or count > max_args:
            return "invalid multibulk length"
        if count > UNAUTH_MAX_ARGS:
            return "unauthenticated multibulk length"
        self._args = count
        self._state = _LENGTH if count > 0 else _BETWEEN  # (Redis skips `*0`, `*-1`)
        return ""

    def _length(self, line: bytes, max_bulk: int) -> str:
        """A `$<length>` line, with its CR: an error, or "" (its bytes follow)."""
        if line[:1] != b"$":
            got = chr(line[0]) if line else "\n"
            return f"expected '$', got '{' ' if got in _CRLF else got}'"
        digits = line[1:-1]
        if line[-1:] != b"\r" or not _CANONICAL.match(digits):
            return "invalid bulk length"
        length = int(digits)
        if not 0 <= length <= max_bulk:
            return "invalid bulk length"
        if length > UNAUTH_MAX_BULK:
            return "unauthenticated bulk length"
        self._left = length + 2  # and its CRLF
        self._state = _BODY
        return ""

    def _refuse(self, start: int, message: str) -> int:
        self.message = message
        return start


def redis_protocol_message(message: str) -> str:
    """hiredis's wording of a request error, in Redis's words."""
    if "ulti-bulk length" in message:
        return "invalid multibulk length"
    if "ulk string length" in message:
        return "invalid bulk length"
    if message.endswith(" as reply type byte"):  # Protocol error, got "x" as reply ...
        quoted = message[message.index('"') + 1:message.rindex('"')]
        return f"expected '$', got '{_unescape_byte(quoted)}'"
    return message


def _unescape_byte(text: str) -> str:
    """The byte hiredis shows escaped (`\\n`, `\\x01`, `\\"`), as Redis shows it: raw,
    CR and LF as a space (an error line cannot hold them)."""
    if text.startswith("\\x"):
        char = chr(int(text[2:], 16))
    elif text.startswith("\\"):
        char = {"n": "\n", "r": "\r", "t": "\t", "a": "\a", "b": "\b"}.get(text[1:], text[1:])
    else:
        char = text
    return " " if char in _CRLF else char
