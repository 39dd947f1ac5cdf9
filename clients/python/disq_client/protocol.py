"""RESP: encoding commands, and a blocking socket connection parsed by hiredis.

A command is a sequence of arguments (bytes, str or int); `encode` turns it into one
RESP multibulk, and a batch of them is sent with a single write.
"""

from __future__ import annotations

import socket
import ssl
from collections.abc import Iterable, Sequence

import hiredis

from .errors import (
    AuthenticationError,
    DisqConnectionError,
    DisqTimeoutError,
    ProtocolError,
    ResponseError,
    from_reply,
)

Arg = bytes | str | int
Address = tuple[str, int]


class ErrorReply(Exception):
    """What hiredis returns in place of a `-...` reply; turned into a ResponseError by
    the client once it knows the reply is not inside a pipeline it must finish."""


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


class Connection:
    """One blocking TCP connection to one node. Not thread-safe: the Client guards it.

    `timeout` bounds every wait for a reply; commands that block on the server
    (GETJOB, synchronous ADDJOB) pass how much longer they may take. A connection that
    timed out or broke is closed, since the replies that may still come would be out of
    step with the next command.
    """

    def __init__(self, addr: Address, *, timeout: float | None = 5.0,
                 connect_timeout: float | None = 2.0, password: str | None = None,
                 ssl_context: ssl.SSLContext | None = None) -> None:
        self.addr = addr
        self.timeout = timeout
        self.connect_timeout = connect_timeout
        self.password = password
        self.ssl_context = ssl_context
        self._sock: socket.socket | None = None
        self._reader = new_reader()
        self._sock_timeout: float | None = -1.0  # what the socket is set to now

    @property
    def connected(self) -> bool:
        return self._sock is not None

    def connect(self) -> None:
        if self._sock is not None:
            return
        try:
            sock = socket.create_connection(self.addr, timeout=self.connect_timeout)
            if self.ssl_context is not None:
                try:  # the handshake, within connect_timeout
                    sock = self.ssl_context.wrap_socket(sock, server_hostname=self.addr[0])
                except BaseException:
                    sock.close()
                    raise
        except TimeoutError as exc:
            raise DisqTimeoutError(f"connecting to {format_address(self.addr)}: timeout") \
                from exc
        except OSError as exc:
            raise DisqConnectionError(f"connecting to {format_address(self.addr)}: {exc}") \
                from exc
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
        self._sock = sock
        self._sock_timeout = self.connect_timeout
        self._reader = new_reader()
        if self.password is not None:
            try:
                reply = self.execute(("AUTH", self.password))
            except BaseException:
                self.close()
                raise
            error = error_of(reply)
            if error is not None:
                self.close()
                raise AuthenticationError(error.message, error.code)

    def close(self) -> None:
        sock, self._sock = self._sock, None
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)  # wakes a thread blocked reading it
            except OSError:
                pass
            sock.close()

    def execute(self, args: Sequence[Arg], extra_wait: float | None = 0.0) -> object:
        """Send one command, return its reply (an ErrorReply for an error reply).
        `extra_wait` None waits for ever (a GETJOB without TIMEOUT)."""
        self.send(encode(args))
        return self.read(extra_wait)

    def execute_many(self, commands: Iterable[Sequence[Arg]],
                     extra_wait: float | None = 0.0) -> list[object]:
        """Pipeline: one write for every command, then their replies in order."""
        payload = [encode(args) for args in commands]
        self.send(b"".join(payload))
        return self.read_many(len(payload), extra_wait)

    def send(self, data: bytes) -> None:
        self.connect()
        assert self._sock is not None
        try:
            self._sock.sendall(data)
        except OSError as exc:
            self.close()
            raise DisqConnectionError(f"{format_address(self.addr)}: {exc}") from exc

    def read(self, extra_wait: float | None = 0.0) -> object:
        gets = self._reader.gets
        reply = gets()
        if reply is False:
            wait = self._wait(extra_wait)
            while reply is False:
                self._recv(wait)
                reply = gets()
        return reply

    def read_many(self, n: int, extra_wait: float | None = 0.0) -> list[object]:
        replies: list[object] = []
        gets = self._reader.gets
        wait = self._wait(extra_wait)
        while True:
            reply = gets()
            while reply is not False:
                replies.append(reply)
                if len(replies) == n:
                    return replies
                reply = gets()
            self._recv(wait)

    def _wait(self, extra_wait: float | None) -> float | None:
        """How long one read may wait for bytes: the timeout, plus what the command may
        take on the server; None for ever."""
        if extra_wait is None or self.timeout is None:
            return None
        return self.timeout + extra_wait

    def _recv(self, wait: float | None) -> None:
        """Feed the reader with what the socket has, waiting at most `wait` seconds."""
        sock = self._sock
        if sock is None:
            raise DisqConnectionError(f"{format_address(self.addr)}: not connected")
        if wait != self._sock_timeout:
            sock.settimeout(wait)
            self._sock_timeout = wait
        try:
            data = sock.recv(262144)
        except TimeoutError as exc:
            self.close()
            raise DisqTimeoutError(f"{format_address(self.addr)}: no reply in time") from exc
        except OSError as exc:
            self.close()
            raise DisqConnectionError(f"{format_address(self.addr)}: {exc}") from exc
        if not data:
            self.close()
            raise DisqConnectionError(f"{format_address(self.addr)}: connection closed")
        self._reader.feed(data)
