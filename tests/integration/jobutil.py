"""Shared helpers for the single-node job and queue command tests.

`RawClient` speaks RESP over a plain socket and keeps reply types apart (status vs
bulk, null bulk vs null array, exact error text), which redis-py hides. The `node`
fixture defined here is one disq-server per test module, flushed before each test:
starting a process per test would make these files several times slower.
Test modules pick the fixtures up with `node = jobutil.node` etc.
"""

from __future__ import annotations

import re
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support import DisqProcess, wait_for

ID_RE = re.compile(rb"^D-[0-9a-f]{8}-[A-Za-z0-9+/]{24}-[0-9a-f]{4}$")


class Status(bytes):
    """A `+...` reply."""


class Error(bytes):
    """A `-...` reply (the text after the dash, code included)."""


class _Null:
    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return self.name


NULL_BULK = _Null("NULL_BULK")  # $-1
NULL_ARRAY = _Null("NULL_ARRAY")  # *-1


class RawClient:
    """A RESP connection that returns replies with their exact types."""

    def __init__(self, port: int, timeout: float = 10.0) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.buf = b""

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> RawClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @staticmethod
    def encode(*args: Any) -> bytes:
        out = [b"*%d\r\n" % len(args)]
        for arg in args:
            if isinstance(arg, str):
                arg = arg.encode()
            elif isinstance(arg, int):
                arg = str(arg).encode()
            out.append(b"$%d\r\n%s\r\n" % (len(arg), arg))
        return b"".join(out)

    def send(self, *args: Any) -> None:
        self.sock.sendall(self.encode(*args))

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def _fill(self) -> None:
        chunk = self.sock.recv(1 << 20)
        if not chunk:
            raise ConnectionError("server closed the connection")
        self.buf += chunk

    def _line(self, pos: int) -> tuple[bytes, int]:
        while True:
            end = self.buf.find(b"\r\n", pos)
            if end >= 0:
                return self.buf[pos:end], end + 2
            self._fill()

    def _parse(self, pos: int) -> tuple[Any, int]:
        line, pos = self._line(pos)
        kind, rest = line[:1], line[1:]
        if kind == b"+":
            return Status(rest), pos
        if kind == b"-":
            return Error(rest), pos
        if kind == b":":
            return int(rest), pos
        if kind == b"$":
            n = int(rest)
            if n < 0:
                return NULL_BULK, pos
            while len(self.buf) < pos + n + 2:
                self._fill()
            assert self.buf[pos + n:pos + n + 2] == b"\r\n", "bad bulk terminator"
            return self.buf[pos:pos + n], pos + n + 2
        if kind == b"*":
            n = int(rest)
            if n < 0:
                return NULL_ARRAY, pos
            items = []
            for _ in range(n):
                item, pos = self._parse(pos)
                items.append(item)
            return items, pos
        raise AssertionError(f"unexpected reply line {line!r}")

    def read(self) -> Any:
        value, pos = self._parse(0)
        self.buf = self.buf[pos:]
        return value

    def call(self, *args: Any) -> Any:
        self.send(*args)
        return self.read()

    def pending(self, wait: float = 0.0) -> bytes:
        """Bytes that arrived unread (waits up to `wait` s for some)."""
        self.sock.settimeout(wait if wait > 0 else 0.001)
        try:
            while True:
                chunk = self.sock.recv(1 << 20)
                if not chunk:
                    break
                self.buf += chunk
                self.sock.settimeout(0.001)
        except (TimeoutError, BlockingIOError):
            pass
        finally:
            self.sock.settimeout(10.0)
        return self.buf

    def add(self, queue: str, body: Any = "body", *options: Any) -> bytes:
        reply = self.call("ADDJOB", queue, body, 0, *options)
        assert isinstance(reply, Status), reply
        return bytes(reply)

    def show(self, job_id: bytes) -> dict[str, Any] | None:
        reply = self.call("SHOW", job_id)
        if reply is NULL_BULK:
            return None
        # Disque's 15 fields; a job that failed a delivery has its `history` after
        assert isinstance(reply, list) and len(reply) in (30, 32), reply
        return {reply[i].decode(): reply[i + 1] for i in range(0, 30, 2)}

    def qstat(self, queue: str) -> dict[str, Any] | None:
        reply = self.call("QSTAT", queue)
        if reply is NULL_ARRAY:
            return None
        assert isinstance(reply, list) and len(reply) == 20, reply
        return {reply[i].decode(): reply[i + 1] for i in range(0, 20, 2)}

    def info_field(self, field: str) -> str:
        text = self.call("INFO").decode()
        for line in text.splitlines():
            if line.startswith(field + ":"):
                return line.split(":", 1)[1]
        raise KeyError(field)


def assert_error(client: RawClient, expected: str, *args: Any) -> None:
    reply = client.call(*args)
    assert isinstance(reply, Error), f"{args!r} replied {reply!r}, expected -{expected}"
    assert reply.decode() == expected


def fields_of(reply: Any) -> dict[str, Any]:
    """A reply of field, value pairs (QSTAT, SHOW, QPOLICY GET) as a dict."""
    return {reply[i].decode(): reply[i + 1] for i in range(0, len(reply), 2)}


def ids_of(reply: object) -> list[bytes]:
    """The job IDs of a GETJOB reply (none: a null)."""
    return [] if reply in (NULL_BULK, NULL_ARRAY) else [entry[1] for entry in reply]  # type: ignore[union-attr]


class BlockedGetjob:
    """A consumer blocked in `GETJOB TIMEOUT 10000 FROM queue` on its own connection,
    in a thread, returned once the node counts it blocked (`admin`'s INFO);
    `reply()` waits for its answer."""

    def __init__(self, port: int, admin: RawClient, queue: str) -> None:
        self._got: list[object] = []

        def consume() -> None:
            with RawClient(port) as consumer:
                self._got.append(consumer.call("GETJOB", "TIMEOUT", 10_000, "FROM", queue))

        self._thread = threading.Thread(target=consume)
        self._thread.start()
        wait_for(lambda: int(admin.info_field("blocked_clients")) == 1, 5)

    def reply(self) -> object:
        self._thread.join(10)
        assert self._got, "the blocked GETJOB did not answer"
        return self._got[0]


def fake_id(node_id: str = "0" * 40, ttl_hex: str = "05a1") -> bytes:
    """A well-formed job ID no node created."""
    return f"D-{node_id[:8]}-AAAAAAAAAAAAAAAAAAAAAAAA-{ttl_hex}".encode()


@pytest.fixture(scope="module")
def shared_disq(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DisqProcess]:
    proc = DisqProcess(Path(tmp_path_factory.mktemp("disq")))
    proc.start()
    try:
        yield proc
    finally:
        proc.stop()


@pytest.fixture
def node(shared_disq: DisqProcess) -> DisqProcess:
    """The module's node, emptied, with no client left from an earlier test."""
    assert shared_disq.alive(), shared_disq.log()
    with RawClient(shared_disq.port) as client:
        # Earlier tests' blocked GETJOBs are gone before we start.
        wait_for(lambda: client.info_field("blocked_clients") == "0",
                 message="earlier blocked clients to disconnect")
        assert client.call("DEBUG", "FLUSHALL") == b"OK"
    return shared_disq


@pytest.fixture
def c(node: DisqProcess) -> Iterator[RawClient]:
    with RawClient(node.port) as client:
        yield client


def elapsed_since(start: float) -> float:
    return time.monotonic() - start
