"""Helpers shared by the benchmark scripts: free ports, starting and stopping servers,
running redis-benchmark and reading its figures."""

from __future__ import annotations

import os
import random
import re
import signal
import socket
import subprocess
import sys
import time


def rss(pid: int) -> int:
    """Resident set size of a process, in bytes."""
    with open(f"/proc/{pid}/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


# Ports free_port gave, with their bus ports: a port picked before the node that will
# listen on it has started is still free to bind, so two picks (a node's --http-port,
# then its own port) could give the same one; this process never gives a port twice.
_given: set[int] = set()


def free_port() -> int:
    """A loopback port free with its bus port (port + 10000), both below the range
    the system hands out to client sockets when it leaves room: a connection of this
    or another process can then never take one before the node listens on it. Never
    one this process gave already (as a port or a bus port)."""
    top = _ephemeral_start() - 10001
    for _ in range(500):
        if top > 12000:
            port = random.randint(12000, top)
        else:
            with socket.socket() as s:
                s.bind(("127.0.0.1", 0))
                port = s.getsockname()[1]
            if port + 10000 > 65535:
                continue
        if port in _given or port + 10000 in _given:
            continue
        try:
            with socket.socket() as s1, socket.socket() as s2:
                s1.bind(("127.0.0.1", port))
                s2.bind(("127.0.0.1", port + 10000))
        except OSError:
            continue
        _given.update((port, port + 10000))
        return port
    raise RuntimeError("no free port pair found")


def _ephemeral_start() -> int:
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as fh:
            return int(fh.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768  # Linux's default


def wait_port(port: int, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1) as s:
                s.sendall(b"PING\r\n")
                if s.recv(100).startswith(b"+"):
                    return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"nothing answers on port {port}")


def start_disq(workdir: str, *extra: str) -> tuple[subprocess.Popen, int]:
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "disq", "--port", str(port), "--bind", "127.0.0.1",
         "--dir", workdir, "--maxmemory", "16gb", *extra],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_port(port)
    return proc, port


def start_redis(workdir: str) -> tuple[subprocess.Popen, int]:
    port = free_port()
    proc = subprocess.Popen(
        ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
         "--appendonly", "no", "--dir", workdir],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_port(port)
    return proc, port


def stop_nodes_on_sigterm() -> None:
    """A SIGTERM (`timeout`, a CI job cancelled) unwinds the script as an exception
    does, so every `finally` stops the nodes it started instead of leaving them running."""
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


_RPS = re.compile(r"([\d.]+) requests per second(?:, p50=([\d.]+) msec)?")


def redis_benchmark(port: int, requests: int, pipeline: int, *command: str,
                    clients: int = 50) -> tuple[float, float]:
    """Returns (requests per second, p50 ms)."""
    out = subprocess.run(
        ["redis-benchmark", "-h", "127.0.0.1", "-p", str(port), "-c", str(clients), "-n",
         str(requests), "-P", str(pipeline), "-q", *command],
        capture_output=True, text=True, timeout=600).stdout
    last = out.replace("\r", "\n").strip().splitlines()[-1]
    match = _RPS.search(last)
    if not match:
        raise RuntimeError(f"cannot read redis-benchmark output: {last!r}")
    return float(match.group(1)), float(match.group(2) or "nan")




def redis_benchmark_summary(port: int, requests: int, pipeline: int, *command: str,
                            clients: int = 50) -> dict[str, float]:
    """Throughput and latency percentiles (ms) from redis-benchmark's summary:
    {"rps", "avg", "min", "p50", "p95", "p99", "max"}."""
    out = subprocess.run(
        ["redis-benchmark", "-h", "127.0.0.1", "-p", str(port), "-c", str(clients), "-n",
         str(requests), "-P", str(pipeline), *command],
        capture_output=True, text=True, timeout=900).stdout.replace("\r", "\n")
    lines = [line.strip() for line in out.splitlines() if line.strip()]
    result: dict[str, float] = {}
    for i, line in enumerate(lines):
        if line.startswith("throughput summary:"):
            result["rps"] = float(line.split(":")[1].split()[0])
        if line.startswith("avg") and "p99" in line and i + 1 < len(lines):
            result.update(zip(line.split(), map(float, lines[i + 1].split()), strict=False))
    if "rps" not in result or "p99" not in result:
        raise RuntimeError(f"cannot read redis-benchmark's summary: {out[-500:]!r}")
    return result
