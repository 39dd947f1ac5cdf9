"""Real disq-server processes for the tests: free loopback ports, a private directory,
bounded start-up, and a stop by PID that always happens; and clusters of them, formed
as Disque's own cluster suite forms its nodes (CLUSTER MEET, then polling CLUSTER INFO
and CLUSTER NODES until every node reaches every other one)."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

ROOT = Path(__file__).resolve().parent.parent  # the checkout the servers run from
sys.path.insert(0, str(ROOT))
from bench.common import free_port, rss  # noqa: E402  (one port picker for tests and bench)

START_TIMEOUT = 15.0
NODE_TIMEOUT = 1000  # ms: PFAIL after ~1 s without a PONG
FORM_TIMEOUT = 15.0  # s: generous deadlines, the conditions are polled
FLAG_ORDER = ("myself", "fail?", "fail", "handshake", "noaddr", "leaving")
NODE_LINE = re.compile(
    r"^(?P<id>[0-9a-f]{40}) (?P<ip>\S*):(?P<port>\d+) (?P<flags>\S+) "
    r"(?P<ping_sent>\d+) (?P<pong_recv>\d+) (?P<link>connected|disconnected)$")


BUS_VARIANTS = [pytest.param([], id="open-bus"),
                pytest.param(["--cluster-secret", "s3cret"], id="secret")]


@pytest.fixture(params=BUS_VARIANTS)
def bus_variants(request: pytest.FixtureRequest) -> list[str]:
    """`bus_args = bus_variants` in a test module: each of its tests that starts nodes
    with make_cluster runs twice, on a bus without a secret and on one with
    cluster-secret (handshake and frame tags on every link). One test:
    `@pytest.mark.parametrize("bus_args", BUS_VARIANTS)`."""
    args: list[str] = request.param
    return args


def wait_for(condition: Callable[[], Any], timeout: float = 5.0, interval: float = 0.01,
             message: str = "condition") -> Any:
    """Poll `condition` until it returns a truthy value or the deadline passes."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {message}")
        time.sleep(interval)


class DisqProcess:
    """One disq-server started on 127.0.0.1 in its own directory."""

    def __init__(self, workdir: Path, *args: str, port: int | None = None,
                 config_text: str | None = None,
                 client_kwargs: dict[str, Any] | None = None,
                 host: str = "127.0.0.1") -> None:
        self.port = port or free_port()
        # how client() connects (TLS options, for a node whose `port` is its TLS port)
        self.client_kwargs = client_kwargs or {}
        self.host = host  # any 127.x.y.z: tests/faults puts a proxy on 127.0.0.1
        self.dir = workdir
        self.dir.mkdir(parents=True, exist_ok=True)
        self.args = list(args)
        self.config_text = config_text
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = self.dir / "disq.log"

    def command_line(self) -> list[str]:
        cmd = [sys.executable, "-m", "disq"]
        if self.config_text is not None:
            conf = self.dir / "disq.conf"
            conf.write_text(self.config_text)
            cmd.append(str(conf))
        cmd += ["--port", str(self.port), "--bind", self.host, "--dir", str(self.dir)]
        return cmd + self.args

    def start(self, loaded: bool = True) -> DisqProcess:
        """Start, and return once the node answers (and, if `loaded`, has loaded its
        AOF: it answers PING while loading, and may still refuse to start after)."""
        log = open(self.log_path, "ab")
        # The server is this checkout's, whatever disq the interpreter has installed.
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(
            filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
        self.proc = subprocess.Popen(self.command_line(), stdout=log, stderr=subprocess.STDOUT,
                                     cwd=self.dir, env=env)
        log.close()
        deadline = time.monotonic() + START_TIMEOUT
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"disq-server exited with {self.proc.returncode}:\n"
                                   + self.log_path.read_text(errors="replace"))
            # no retries inside redis-py (4 s of backoff on NOAUTH): this loop retries
            probe = self.client(socket_timeout=1, retry=Retry(NoBackoff(), 0))
            try:
                if probe.ping() and not (loaded and probe.info("persistence").get("loading")):
                    return self
            except redis.exceptions.AuthenticationError:
                return self  # answering: NOAUTH to redis-py's HELLO (--requirepass)
            except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError):
                pass  # not listening yet, or busy starting (a loaded machine)
            except redis.exceptions.ResponseError:
                return self  # answering, e.g. NOAUTH
            finally:
                probe.close()  # else it holds a client slot until garbage collection
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError("disq-server did not answer PING in time")
            time.sleep(0.02)

    def client(self, **kwargs: Any) -> redis.Redis:
        kwargs = {**self.client_kwargs, **kwargs}
        kwargs.setdefault("socket_timeout", 10)
        return redis.Redis(host=self.host, port=self.port, **kwargs)

    def connect(self) -> socket.socket:
        sock = socket.create_connection((self.host, self.port), timeout=10)
        return sock

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def rss(self) -> int:
        """The process's resident set size, in bytes."""
        return rss(self.pid)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 10.0) -> int | None:
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            os.kill(self.proc.pid, sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout)
        return self.proc.returncode

    def kill(self) -> None:
        self.stop(signal.SIGKILL)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


def raw_command(sock: socket.socket, payload: bytes, expect_close: bool = False,
                timeout: float = 5.0) -> bytes:
    """Send raw bytes and read what comes back until a full line set arrives or the
    server closes the connection (when expect_close)."""
    sock.settimeout(timeout)
    sock.sendall(payload)
    data = b""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            chunk = sock.recv(65536)
        except TimeoutError:
            break
        if not chunk:
            break
        data += chunk
        if not expect_close and data.endswith(b"\r\n"):
            break
    return data


def wait_closed(sock: socket.socket, timeout: float, what: str) -> None:
    """Read (and drop) what the server sends until it closes the connection."""
    deadline = time.monotonic() + timeout
    while True:
        assert time.monotonic() < deadline, f"{what} was not closed"
        try:
            if not sock.recv(65536):
                return
        except ConnectionResetError:
            return


# -- clusters -------------------------------------------------------------------------------
def call(node: DisqProcess, *args: object) -> object:
    """One command on a fresh RESP2 connection, replies as they come (bytes, lists)."""
    client = node.client(protocol=2, socket_timeout=5)
    client.response_callbacks.clear()
    try:
        return client.execute_command(*args)
    finally:
        client.close()


def used_memory(node: DisqProcess) -> int:
    """INFO used_memory: what maxmemory is compared with (the jobs held, not RSS)."""
    info = call(node, "INFO", "memory").decode()  # type: ignore[union-attr]
    return int(info.split("used_memory:")[1].split("\r\n")[0])


def myid(node: DisqProcess) -> str:
    return call(node, "CLUSTER", "MYID").decode()  # type: ignore[union-attr]


def cluster_info(node: DisqProcess) -> dict[str, str]:
    text = call(node, "CLUSTER", "INFO").decode()  # type: ignore[union-attr]
    assert text.endswith("\r\n")
    fields = {}
    for line in text[:-2].split("\r\n"):
        key, sep, value = line.partition(":")
        assert sep, line
        fields[key] = value
    return fields


@dataclass
class NodeLine:
    id: str
    ip: str
    port: int
    flags: tuple[str, ...]  # () for noflags
    ping_sent: int
    pong_recv: int
    link: str

    @property
    def addr(self) -> str:
        return f"{self.ip}:{self.port}"


def parse_nodes(text: str) -> list[NodeLine]:
    """CLUSTER NODES / nodes.conf, checked strictly against Disque's line format."""
    assert text.endswith("\n") and "\r" not in text, repr(text)
    lines = []
    for line in text[:-1].split("\n"):
        match = NODE_LINE.match(line)
        assert match, f"bad CLUSTER NODES line {line!r}"
        flags = match["flags"]
        if flags == "noflags":
            names: tuple[str, ...] = ()
        else:
            names = tuple(flags.split(","))
            assert names == tuple(f for f in FLAG_ORDER if f in names), line  # order, no dups
        lines.append(NodeLine(match["id"], match["ip"], int(match["port"]), names,
                              int(match["ping_sent"]), int(match["pong_recv"]), match["link"]))
    assert len({n.id for n in lines}) == len(lines), text
    return lines


def cluster_nodes(node: DisqProcess) -> dict[str, NodeLine]:
    return {n.id: n for n in parse_nodes(call(node, "CLUSTER", "NODES").decode())}


def is_formed(nodes: list[DisqProcess]) -> bool:
    """Every node knows exactly these nodes, reaches all the others, none flagged."""
    n = len(nodes)
    for node in nodes:
        info = cluster_info(node)
        if (info["cluster_known_nodes"], info["cluster_reachable_nodes"],
                info["cluster_size"]) != (str(n), str(n - 1), str(n)):
            return False
        peers = [line for line in cluster_nodes(node).values() if "myself" not in line.flags]
        if any(line.flags or line.link != "connected" for line in peers):
            return False
    return True


def wait_formed(nodes: list[DisqProcess], timeout: float = FORM_TIMEOUT) -> None:
    wait_for(lambda: is_formed(nodes), timeout, 0.05, f"a formed cluster of {len(nodes)}")


def conf_lists_all(node: DisqProcess, nodes: list[DisqProcess]) -> bool:
    """nodes.conf of `node` has every node of `nodes`, with the addresses CLUSTER NODES
    shows, itself flagged myself and the others healthy."""
    path = node.dir / "nodes.conf"
    if not path.exists():
        return False
    me = myid(node)
    expected = {myid(n): (f"127.0.0.1:{n.port}", ("myself",) if n is node else ())
                for n in nodes}
    saved = {line.id: (line.addr, line.flags) for line in parse_nodes(path.read_text())}
    return saved == expected and me in saved


def wait_conf_saved(nodes: list[DisqProcess]) -> None:
    for node in nodes:
        wait_for(lambda node=node: conf_lists_all(node, nodes), 10, 0.05,
                 f"nodes.conf of port {node.port} to list the cluster")


def assert_stays(condition: Callable[[], bool], seconds: float, message: str) -> None:
    """A negative check (something must NOT happen) needs a time window."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        assert condition(), message
        time.sleep(0.05)


def meet(node: DisqProcess, other: DisqProcess) -> None:
    assert call(node, "CLUSTER", "MEET", "127.0.0.1", other.port) == b"OK"


def form_cluster(nodes: list[DisqProcess], join: str = "star") -> list[DisqProcess]:
    """Join running nodes by MEETing node 0 only (star) or each the next one (chain, as
    Disque's test suite does); returns once the cluster is formed and every nodes.conf
    lists it (kill -9 / restart tests rely on it)."""
    if join == "star":
        for other in nodes[1:]:
            meet(nodes[0], other)
    else:
        for a, b in zip(nodes, nodes[1:], strict=False):
            meet(a, b)
    wait_formed(nodes)
    wait_conf_saved(nodes)
    return nodes


@contextmanager
def running_cluster(base: Path, size: int = 3, *args: str) -> Iterator[list[DisqProcess]]:
    """`size` formed nodes in directories under `base`, stopped on leaving the block."""
    nodes = [DisqProcess(base / f"n{i}", "--cluster-node-timeout", str(NODE_TIMEOUT), *args)
             for i in range(size)]
    try:
        for node in nodes:
            node.start()
        yield form_cluster(nodes)
    finally:
        for node in nodes:
            node.stop()
