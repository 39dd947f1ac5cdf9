"""The RESP parser against Redis's own: the same bytes (PING requests, whole, mutated,
or garbage) go to a real redis-server and to a real disq node, and both must answer
the same bytes (unknown-command wording aside, which differs between Redis versions).
The disq node keeps its job and keeps serving another connection throughout.

Skipped when redis-server is not installed."""

from __future__ import annotations

import re
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from fuzzing import fuzz_settings
from hypothesis import given
from hypothesis import strategies as st
from support import DisqProcess, free_port, wait_for

pytestmark = pytest.mark.skipif(shutil.which("redis-server") is None,
                                reason="redis-server is not installed")

UNKNOWN = re.compile(rb"-ERR unknown command [^\r\n]*\r\n")


class RedisProcess:
    """A throw-away redis-server on a free loopback port, stopped by PID."""

    def __init__(self, workdir: Path) -> None:
        self.port = free_port()
        workdir.mkdir(parents=True, exist_ok=True)
        self.proc = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--dir", str(workdir), "--protected-mode", "no"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_for(self._answers, 10, 0.02, "redis-server to answer")

    def _answers(self) -> bool:
        try:
            return exchange(self.port, b"PING\r\n") == b"+PONG\r\n"
        except OSError:
            return False

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)


def exchange(port: int, payload: bytes, timeout: float = 5.0) -> bytes:
    """Send everything, close our side, read every reply until the server closes."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        try:
            sock.sendall(payload)
            sock.shutdown(socket.SHUT_WR)
        except (BrokenPipeError, ConnectionResetError):
            pass  # closed on a protocol error before it read everything
        data = b""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                chunk = sock.recv(65536)
            except ConnectionResetError:
                break
            if not chunk:
                break
            data += chunk
        return data


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[RedisProcess,
                                                                        DisqProcess]]:
    base = tmp_path_factory.mktemp("resp-diff")
    redis_server = RedisProcess(base / "redis")
    disq = DisqProcess(base / "disq")
    try:
        disq.start()
        assert exchange(disq.port, b"ADDJOB keep-this body-kept 0\r\n").startswith(b"+D-")
        yield redis_server, disq
    finally:
        disq.stop()
        redis_server.stop()


WORD = st.sampled_from([b"PING", b"ping", b"hi", b"", b"a b", b"\"q\"", b"x" * 20])


@st.composite
def ping(draw: st.DrawFn) -> bytes:
    args = [draw(st.sampled_from([b"PING", b"ping", b"PiNg"]))]
    if draw(st.booleans()):
        args.append(draw(WORD))
    if draw(st.booleans()):
        return b"*%d\r\n" % len(args) + b"".join(b"$%d\r\n%s\r\n" % (len(a), a) for a in args)
    return b" ".join(args) + draw(st.sampled_from([b"\r\n", b"\n"]))


TOKENS = st.sampled_from([b"\r\n", b"\n", b"\r", b"*", b"$", b"-1", b"-2", b"0", b"99",
                          b"99999999999999", b"*-1\r\n", b"*0\r\n", b"$-1\r\n", b":1\r\n",
                          b"#t\r\n", b",1.5\r\n", b"_\r\n", b"\"", b"'", b"\\x41",
                          b"\\", b" ", b"*1048577\r\n", b"$536870913\r\n"])
EDIT = st.tuples(st.integers(0, 2), st.integers(0, 10_000),
                 TOKENS | st.binary(min_size=1, max_size=4))


def mutate(data: bytes, edits: list[tuple[int, int, bytes]]) -> bytes:
    out = bytearray(data)
    for kind, pos, piece in edits:
        pos = pos % (len(out) + 1)
        if kind == 0 and out:
            out[min(pos, len(out) - 1)] = piece[0]
        elif kind == 1:
            out[pos:pos] = piece
        else:
            del out[pos:pos + len(piece)]
    return bytes(out)


def normalized(data: bytes) -> bytes:
    return UNKNOWN.sub(b"-ERR unknown command\r\n", data)


@fuzz_settings(150)
@given(st.lists(ping(), min_size=1, max_size=5), st.lists(EDIT, max_size=3))
def test_disq_answers_what_redis_answers(servers: tuple[RedisProcess, DisqProcess],
                                         requests: list[bytes],
                                         edits: list[tuple[int, int, bytes]]) -> None:
    redis_server, disq = servers
    payload = mutate(b"".join(requests), edits)
    if re.search(rb"(?i)post|host:", payload):
        return  # Redis drops these as a cross-protocol attack, silently
    if b"\x00" in payload:
        return  # Redis looks for an inline request's end with strchr(): a NUL hides it
    if re.search(rb"\r(?!\n)", payload):
        return  # Redis skips the byte after a header's CR unchecked; disq wants CRLF
    if re.search(rb"\*[0-9]{7}", payload):
        return  # Redis 7 takes up to INT_MAX elements; Disque (and disq) 1048576
    if re.search(rb"[+(=]", payload):
        return  # hiredis returns a `+str` (`(`, `=`) element as a bulk: known limitation
    if b"*" in payload and re.search(rb"(?<!\r)\n", payload):
        return  # Redis waits for a CR in a multibulk header; disq refuses a bare LF
    assert normalized(exchange(disq.port, payload)) == normalized(
        exchange(redis_server.port, payload)), payload


def test_the_node_survives_the_comparison(servers: tuple[RedisProcess, DisqProcess]) -> None:
    """Runs after the property: the node still serves a new connection, and the job
    added before is still queued."""
    _, disq = servers
    assert exchange(disq.port, b"PING\r\n") == b"+PONG\r\n"
    assert exchange(disq.port, b"QLEN keep-this\r\n") == b":1\r\n"
    assert exchange(disq.port, b"QPEEK keep-this 1\r\n").endswith(b"body-kept\r\n")
    assert "Traceback" not in disq.log()
