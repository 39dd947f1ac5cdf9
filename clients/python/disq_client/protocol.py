"""RESP without I/O: encoding commands, the hiredis reader that parses replies, and
what a reply means (errors, AUTH, addresses). The connections are the shells' (the
socket one in client.py, the asyncio one in aio.py).

A command is a sequence of arguments (bytes, str or int); `encode` turns it into one
RESP multibulk, and a batch of them is sent with a single write.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import hiredis

from .errors import (
    AuthenticationError,
    ProtocolError,
    ResponseError,
    from_reply,
)

Arg = bytes | str | int
Address = tuple[str, int]


class ErrorReply(Exception):
    """What hiredis returns in place of a `-...` reply; turned into a ResponseError by
    the client once it knows the reply is not inside a pipeline it must finish."""


# A read is fed to hiredis this much at a time, its replies taken between: hiredis moves
# what it holds unread to the front of its buffer each time it has consumed 1 KiB, so a
# 256 KiB read of small replies fed whole is copied ~128 times over.
FEED_PIECE = 16 * 1024


def new_reader() -> hiredis.Reader:
    return hiredis.Reader(replyError=ErrorReply, protocolError=ProtocolError)


def to_bytes(arg: Arg) -> bytes:
    if isinstance(arg, bytes):
        return arg
    if isinstance(arg, str):
        return arg.encode("utf-8", "surrogateescape")
    if isinstance(arg, int):
        return b"%d" % arg
    raise TypeError(f"a command argument must be bytes, str or int, not {type(arg).__name__}")


def encode(args: Sequence[Arg]) -> bytes:
    out = [b"*%d\r\n" % len(args)]
    for arg in args:
        data = to_bytes(arg)
        out.append(b"$%d\r\n" % len(data))
        out.append(data)
        out.append(b"\r\n")
    return b"".join(out)


def from_error_reply(reply: ErrorReply) -> ResponseError:
    return from_reply(str(reply.args[0]) if reply.args else "ERR")


def error_of(reply: object) -> ResponseError | None:
    """The typed exception for an error reply, None for any other reply."""
    return from_error_reply(reply) if isinstance(reply, ErrorReply) else None


def check(reply: object) -> object:
    """`reply`, or raise its exception if it is an error reply."""
    exc = error_of(reply)
    if exc is not None:
        raise exc
    return reply


def parse_address(node: str | Address) -> Address:
    """'host:port', '[::1]:port' or (host, port) -> (host, port)."""
    if isinstance(node, tuple):
        return node[0], int(node[1])
    host, sep, port = node.rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"not a host:port address: {node!r}")
    return host.strip("[]") or "127.0.0.1", int(port)


def format_address(addr: Address) -> str:
    host, port = addr
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def auth_request(password: str) -> bytes:
    return encode(("AUTH", password))


def auth_failure(reply: object) -> AuthenticationError | None:
    """The error to raise if AUTH was refused, None if it passed."""
    error = error_of(reply)
    return None if error is None else AuthenticationError(error.message, error.code)


def reply_wait(timeout: float | None, extra_wait: float | None) -> float | None:
    """How long to wait for a reply: the client's timeout plus what the command may
    take on the server (a GETJOB's TIMEOUT, ADDJOB's replication); None for ever."""
    if extra_wait is None or timeout is None:
        return None
    return timeout + extra_wait


def __getattr__(name: str) -> Any:
    if name == "Connection":  # it lived here once: the blocking client's connection
        from .client import Connection
        return Connection
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
