"""The servers a run measures: disq nodes and antirez's Disque nodes (each formed
into a cluster when there are several), redis-server and beanstalkd, each started on
free loopback ports in its own directory and stopped by PID; or addresses of servers
already running."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import hiredis

from .common import free_port, rss  # noqa: F401  (srv.rss)
from .protocols import BeanstalkReader, read_one

ROOT = Path(__file__).resolve().parent.parent  # the checkout whose disq is measured
AOF_FSYNC_MS = {"everysec": "1000", "always": "0"}  # beanstalkd's -f for each mode


class Skip(Exception):
    """This system cannot run this scenario here (not installed, refused an option)."""


@dataclass
class Servers:
    """The nodes of one system under test; `procs` is empty for --targets."""
    system: str
    addresses: list[tuple[str, int]]
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)
    dirs: list[Path] = field(default_factory=list)

    @property
    def pids(self) -> list[int]:
        return [proc.pid for proc in self.procs]

    def stop(self) -> None:
        """SIGTERM each process we started, by PID; SIGKILL after 10 s."""
        for proc in self.procs:
            if proc.poll() is None:
                os.kill(proc.pid, signal.SIGTERM)
        for proc in self.procs:
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait()


def command(address: tuple[str, int], *args: str | bytes, timeout: float = 10) -> Any:
    """One RESP command on a fresh connection; error replies come back as
    hiredis.ReplyError values."""
    parts = [a if isinstance(a, bytes) else str(a).encode() for a in args]
    request = b"*%d\r\n" % len(parts) + b"".join(
        b"$%d\r\n%s\r\n" % (len(p), p) for p in parts)
    reader = hiredis.Reader()
    with socket.create_connection(address, timeout=timeout) as sock:
        sock.sendall(request)
        while (reply := reader.gets()) is False:
            data = sock.recv(1 << 16)
            if not data:
                raise ConnectionError(f"{address} closed the connection")
            reader.feed(data)
    return reply


def _answers(port: int, probe: bytes, expect: bytes) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1) as s:
            s.sendall(probe)
            return s.recv(100).startswith(expect)
    except OSError:
        return False


def _start(system: str, argv: list[str], workdir: Path, port: int, probe: bytes,
           expect: bytes, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    """Start one server process, logging to workdir/server.log; wait until it answers."""
    workdir.mkdir(parents=True, exist_ok=True)
    with open(workdir / "server.log", "ab") as log:
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, cwd=workdir,
                                env=env, start_new_session=True)
    deadline = time.monotonic() + 20
    while not _answers(port, probe, expect):
        if proc.poll() is not None:
            text = (workdir / "server.log").read_text(errors="replace").strip()
            raise Skip(f"{system} exited at start ({proc.returncode}): "
                       + (text.splitlines()[-1] if text else "no output"))
        if time.monotonic() > deadline:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
            raise RuntimeError(f"{system} did not answer on port {port}")
        time.sleep(0.05)
    return proc


def start_disq(nodes: int, workdir: Path, aof: str = "off", src: Path = ROOT,
               extra: tuple[str, ...] = ()) -> Servers:
    """`nodes` disq-server processes of the checkout at `src`; several are joined by
    CLUSTER MEET and returned once each reaches all the others."""
    program = [sys.executable, "-m", "disq"]
    return _start_nodes("disq", program, nodes, workdir, aof,
                        ("--maxmemory", "16gb", *extra), disq_env(src))


def disq_env(src: Path) -> dict[str, str]:
    """The environment that runs the disq of the checkout at `src`, with that
    checkout's disq_client (whose option tables the server parses with), whatever
    checkout the venv was installed from."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(src), str(src / "clients" / "python")]
        + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    return env


def start_disque(nodes: int, workdir: Path, binary: Path, aof: str = "off") -> Servers:
    """`nodes` disque-server processes (antirez's Disque, `binary`: bench/disque.py
    finds or builds it), joined as disq's are."""
    return _start_nodes("disque", [str(binary)], nodes, workdir, aof)


def _start_nodes(system: str, program: list[str], nodes: int, workdir: Path, aof: str,
                 extra: tuple[str, ...] = (), env: dict[str, str] | None = None) -> Servers:
    """Nodes of disq or Disque (the same directives), each in workdir/<system><i>."""
    aof_args = ["--appendonly", "yes", "--appendfsync", aof] if aof != "off" else []
    servers = Servers(system, [])
    try:
        for i in range(nodes):
            port = free_port()
            path = workdir / f"{system}{i}"
            argv = [*program, "--port", str(port), "--bind", "127.0.0.1",
                    "--dir", str(path), *aof_args, *extra]
            servers.procs.append(_start(system, argv, path, port, b"PING\r\n", b"+PONG", env))
            servers.addresses.append(("127.0.0.1", port))
            servers.dirs.append(path)
        if nodes > 1:
            form_cluster(servers.addresses)
        if aof != "off" and system == "disq":
            check_aof_written(servers)
    except BaseException:
        servers.stop()
        raise
    return servers


def form_cluster(addresses: list[tuple[str, int]], timeout: float = 30) -> None:
    """CLUSTER MEET from the first node, then wait until each reaches all the others
    (disq and Disque both answer CLUSTER INFO with cluster_reachable_nodes)."""
    first = addresses[0]
    for host, port in addresses[1:]:
        command(first, "CLUSTER", "MEET", host, str(port))
    deadline = time.monotonic() + timeout
    want = b"cluster_reachable_nodes:%d" % (len(addresses) - 1)
    while not all(want in command(a, "CLUSTER", "INFO") for a in addresses):
        if time.monotonic() > deadline:
            raise RuntimeError("the cluster did not form")
        time.sleep(0.1)


def check_aof_written(servers: Servers) -> None:
    """Skip when the node accepts --appendonly yes but writes no file (a build without
    the AOF): one probe job is added, its AOF file waited for, and the job deleted."""
    address, path = servers.addresses[0], servers.dirs[0]
    name = command(address, "CONFIG", "GET", "appendfilename")
    filename = name[1].decode() if isinstance(name, list) and len(name) == 2 else "disque.aof"
    job = command(address, "ADDJOB", "bench-aof-probe", "x", "0", "REPLICATE", "1",
                  "RETRY", "0")
    if isinstance(job, bytes):
        command(address, "FASTACK", job)
    deadline = time.monotonic() + 3
    while not (path / filename).exists():
        if time.monotonic() > deadline:
            raise Skip("disq accepted --appendonly yes but wrote no AOF file "
                       "(this build has no AOF)")
        time.sleep(0.05)


def start_redis(workdir: Path, aof: str = "off") -> Servers:
    binary = shutil.which("redis-server")
    if binary is None:
        raise Skip("redis-server is not installed (Debian: apt-get install redis-server)")
    port = free_port()
    argv = [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
            "--dir", str(workdir), "--appendonly", "no" if aof == "off" else "yes"]
    if aof != "off":
        argv += ["--appendfsync", aof]
    proc = _start("redis-server", argv, workdir, port, b"PING\r\n", b"+PONG")
    return Servers("redis", [("127.0.0.1", port)], [proc], [workdir])


def start_beanstalkd(workdir: Path, aof: str = "off", body_size: int = 100) -> Servers:
    binary = shutil.which("beanstalkd")
    if binary is None:
        raise Skip("beanstalkd is not installed (Debian: apt-get install beanstalkd)")
    port = free_port()
    argv = [binary, "-l", "127.0.0.1", "-p", str(port), "-z", str(max(65535, body_size))]
    if aof != "off":  # its binlog, fsynced at most every -f ms (0: every write)
        binlog = workdir / "binlog"
        binlog.mkdir(parents=True, exist_ok=True)
        argv += ["-b", str(binlog), "-f", AOF_FSYNC_MS[aof]]
    proc = _start("beanstalkd", argv, workdir, port, b"stats\r\n", b"OK ")
    return Servers("beanstalkd", [("127.0.0.1", port)], [proc], [workdir])


def start(system: str, nodes: int, workdir: Path, aof: str, body_size: int,
          src: Path = ROOT, disque_bin: Path | None = None) -> Servers:
    """Start what `system` needs; redis and beanstalkd have one node whatever `nodes`
    says. Disque needs `disque_bin` (bench/disque.py: binary())."""
    workdir.mkdir(parents=True, exist_ok=True)
    if system == "disq":
        return start_disq(nodes, workdir, aof, src)
    if system == "disque":
        if disque_bin is None:
            raise Skip("no disque-server (bench/disque.py finds or builds one)")
        return start_disque(nodes, workdir, disque_bin, aof)
    if system == "redis":
        return start_redis(workdir, aof)
    if system == "beanstalkd":
        return start_beanstalkd(workdir, aof, body_size)
    raise ValueError(f"unknown system {system!r}")


def parse_address(text: str) -> tuple[str, int]:
    host, _, port = text.strip().rpartition(":")
    return (host.strip("[]") or "127.0.0.1", int(port))


def cleanup_target(system: str, addresses: list[tuple[str, int]], queue: str) -> None:
    """Best effort: remove what a run left in `queue` on servers we did not start."""
    if system in ("disq", "disque"):
        for address in addresses:
            reply = command(address, "JSCAN", "0", "BUSYLOOP", "QUEUE", queue, timeout=60)
            ids = reply[1] if isinstance(reply, list) else []
            for i in range(0, len(ids), 1000):
                command(address, "FASTACK", *ids[i:i + 1000])
    elif system == "redis":
        command(addresses[0], "DEL", queue)
    elif system == "beanstalkd":
        reader = BeanstalkReader()
        with socket.create_connection(addresses[0], timeout=10) as s:
            for request in (b"watch %s\r\n" % queue.encode(), b"ignore default\r\n"):
                s.sendall(request)
                read_one(s, reader)
            while True:
                s.sendall(b"reserve-with-timeout 0\r\n")
                reply = read_one(s, reader)
                if reply[0] != b"RESERVED":
                    break
                s.sendall(b"delete %s\r\n" % reply[1])
                read_one(s, reader)
