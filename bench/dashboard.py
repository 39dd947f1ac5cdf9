"""The HTTP API and the dashboard: what an open dashboard costs the nodes, and
whether HTTP long polls held open slow RESP clients.

    python bench/dashboard.py [--seconds 30] [--rounds 2] [--queues 20] [--polls 200]
                              [--requests 200000]
                         [--poller chromium|python] [--skip dashboard,polls]

- dashboard: 3 nodes, `--queues` queues (20) holding 2,000 jobs in all, no traffic. The CPU (user + sys,
  /proc) of each node over `--seconds` without a dashboard and with one open on node 0
  (its queues page, in headless Chromium through Playwright, as a user has it: it polls
  GET /api/v1/cluster/stats every 1.5 s and node 0 asks the two others over the bus;
  `--poller python` makes the same requests from this script instead), alternated over
  `--rounds`; in % of one core, and the difference.
- polls: one node; redis-benchmark (-c 50) ADDJOB unpipelined and with -P 16, without
  and with `--polls` HTTP long polls held open (GET /api/v1/queues/idle/jobs?timeout_ms=0,
  each on its own connection, each a consumer blocked in GETJOB), a fresh node for each
  run, alternated over `--rounds` (which goes first alternates too); throughput,
  p50 / p99 latency and the node's CPU per request, medians, and the median of each
  round's ratio held / none (the rounds of a noisy machine differ more than the cases).
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import statistics
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

from cluster import command
from common import free_port, redis_benchmark_summary, start_disq, stop

TICK = os.sysconf("SC_CLK_TCK")
CHROMIUM = os.environ.get("DISQ_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                 "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]
POLL_S = 1.5  # as the dashboard (static/app.js, POLL_MS)


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def start_cluster(workdir: Path, size: int = 3) -> list[tuple[object, int, int]]:
    """`size` nodes with an HTTP port each, joined: [(process, port, http port)]."""
    nodes = []
    for i in range(size):
        path = workdir / f"node{i}"
        path.mkdir()
        http_port = free_port()
        proc, port = start_disq(str(path), "--http-port", str(http_port))
        nodes.append((proc, port, http_port))
        wait_http(http_port)
    for _, port, _ in nodes[1:]:
        command(nodes[0][1], "CLUSTER", "MEET", "127.0.0.1", str(port))
    deadline = time.monotonic() + 30
    while not all(f"cluster_reachable_nodes:{size - 1}".encode() in
                  command(port, "CLUSTER", "INFO") for _, port, _ in nodes):
        if time.monotonic() > deadline:
            raise RuntimeError("the cluster did not form")
        time.sleep(0.1)
    return nodes


class Dashboard:
    """One open dashboard on `url`: Chromium showing the queues page, or this
    script making the page's requests (`python`)."""

    def __init__(self, url: str, poller: str) -> None:
        self.url = url
        self.poller = poller
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._playwright: object = None

    def __enter__(self) -> Dashboard:
        if self.poller == "chromium":
            from playwright.sync_api import sync_playwright
            self._manager = sync_playwright()
            playwright = self._manager.__enter__()
            self._browser = playwright.chromium.launch(executable_path=CHROMIUM,
                                                       args=CHROMIUM_ARGS)
            page = self._browser.new_page(viewport={"width": 1280, "height": 800})
            page.goto(self.url + "#/queues")
            page.wait_for_selector('#queues tr[data-queue="q0"]')
        else:
            self._thread = threading.Thread(target=self._poll, daemon=True)
            self._thread.start()
        return self

    def _poll(self) -> None:
        while not self._stop.wait(POLL_S):
            with urllib.request.urlopen(self.url + "api/v1/cluster/stats", timeout=10) as r:
                r.read()

    def __exit__(self, *exc: object) -> None:
        if self.poller == "chromium":
            self._browser.close()
            self._manager.__exit__(None, None, None)
        else:
            self._stop.set()
            assert self._thread is not None
            self._thread.join()


def measure_cpu(pids: list[int], seconds: float) -> list[float]:
    """Each process's CPU over `seconds`, in % of one core."""
    before = [cpu_seconds(pid) for pid in pids]
    start = time.monotonic()
    time.sleep(seconds)
    elapsed = time.monotonic() - start
    return [100 * (cpu_seconds(pid) - b) / elapsed for pid, b in zip(pids, before, strict=True)]


def dashboard_cost(args: argparse.Namespace) -> None:
    poller = args.poller
    if poller == "chromium" and not os.access(CHROMIUM, os.X_OK):
        sys.exit(f"no Chromium at {CHROMIUM}: --poller python, or install it")
    with tempfile.TemporaryDirectory() as tmp:
        nodes = start_cluster(Path(tmp))
        try:
            per_queue = max(1, 2000 // args.queues)
            for i in range(args.queues):  # spread over the nodes, 2,000 jobs in all
                port = nodes[i % 3][1]
                with socket.create_connection(("127.0.0.1", port)) as s:
                    s.sendall(b"".join(b"ADDJOB q%d job 0\r\n" % i
                                       for _ in range(per_queue)))
                    data = b""
                    while data.count(b"\r\n") < per_queue:
                        data += s.recv(65536)
            pids = [proc.pid for proc, _, _ in nodes]  # type: ignore[attr-defined]
            url = f"http://127.0.0.1:{nodes[0][2]}/"
            results: dict[str, list[list[float]]] = {"none": [], "open": []}
            time.sleep(2)
            for _ in range(args.rounds):
                results["none"].append(measure_cpu(pids, args.seconds))
                with Dashboard(url, poller):
                    time.sleep(3)  # the page loaded, its first polls made
                    results["open"].append(measure_cpu(pids, args.seconds))
        finally:
            for proc, _, _ in nodes:
                stop(proc)  # type: ignore[arg-type]
    print(f"\n### an open dashboard ({poller}), {args.queues} queues, {args.seconds:.0f} s x "
          f"{args.rounds} rounds, CPU in % of one core (medians)\n")
    print("| node | no dashboard | dashboard open on node 0 | difference |")
    print("|---|---|---|---|")
    for i in range(3):
        none = statistics.median(r[i] for r in results["none"])
        opened = statistics.median(r[i] for r in results["open"])
        print(f"| node {i} | {none:.2f}% | {opened:.2f}% | {opened - none:+.2f} points |")
    print("\nrounds (node 0, none/open): " + ", ".join(
        f"{n[0]:.2f}/{o[0]:.2f}" for n, o in zip(results["none"], results["open"], strict=True)))


def wait_http(http_port: int, timeout: float = 15) -> None:
    """The HTTP port listens a moment after the RESP port answers."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            socket.create_connection(("127.0.0.1", http_port), timeout=1).close()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def hold_long_polls(http_port: int, count: int) -> list[socket.socket]:
    wait_http(http_port)
    socks = []
    for _ in range(count):
        s = socket.create_connection(("127.0.0.1", http_port))
        s.sendall(b"GET /api/v1/queues/idle/jobs?timeout_ms=0 HTTP/1.1\r\n"
                  b"Host: 127.0.0.1\r\n\r\n")
        socks.append(s)
    return socks


def blocked_clients(port: int) -> int:
    info = command(port, "INFO", "clients").decode()
    return int(info.split("blocked_clients:")[1].split("\r\n")[0])


CASES = [("ADDJOB, -c 50", 1), ("ADDJOB, -c 50 -P 16", 16)]


def long_polls(args: argparse.Namespace) -> None:
    if shutil.which("redis-benchmark") is None:
        sys.exit("redis-benchmark not found (Debian: apt-get install redis-tools)")
    runs: dict[tuple[str, int], list[dict[str, float]]] = {
        (name, polls): [] for name, _ in CASES for polls in (0, args.polls)}
    for round_ in range(args.rounds):
        for name, pipeline in CASES:
            order = (0, args.polls) if round_ % 2 == 0 else (args.polls, 0)
            for polls in order:
                with tempfile.TemporaryDirectory() as tmp:
                    http_port = free_port()
                    proc, port = start_disq(tmp, "--http-port", str(http_port))
                    socks: list[socket.socket] = []
                    try:
                        socks = hold_long_polls(http_port, polls)
                        deadline = time.monotonic() + 30
                        while blocked_clients(port) != polls:
                            if time.monotonic() > deadline:
                                raise RuntimeError("the long polls did not all block")
                            time.sleep(0.05)
                        cpu = cpu_seconds(proc.pid)
                        result = redis_benchmark_summary(
                            port, args.requests, pipeline, "ADDJOB", "bench", "x", "0")
                        result["cpu_us"] = (cpu_seconds(proc.pid) - cpu) * 1e6 / args.requests
                        runs[(name, polls)].append(result)
                        assert blocked_clients(port) == polls  # held all along
                    finally:
                        for s in socks:
                            s.close()
                        stop(proc)
    print(f"\n### RESP with and without {args.polls} HTTP long polls held open, "
          f"{args.requests:,} requests, {args.rounds} rounds (medians)\n")
    print("| case | long polls | requests/s | p50 ms | p99 ms | CPU per request | "
          "held / none, per round |")
    print("|---|---|---|---|---|---|---|")
    for name, _ in CASES:
        none, held = runs[(name, 0)], runs[(name, args.polls)]
        for polls, got in ((0, none), (args.polls, held)):
            rps = statistics.median(r["rps"] for r in got)
            p50 = statistics.median(r["p50"] for r in got)
            p99 = statistics.median(r["p99"] for r in got)
            cpu = statistics.median(r["cpu_us"] for r in got)
            ratios = ""
            if polls:
                rate = statistics.median(b["rps"] / a["rps"] for a, b in zip(none, held,
                                                                             strict=True))
                per = statistics.median(b["cpu_us"] / a["cpu_us"] for a, b in zip(
                    none, held, strict=True))
                ratios = f"{rate:.3f} requests/s, {per:.3f} CPU"
            print(f"| {name} | {polls} | {rps:,.0f} | {p50:.3f} | {p99:.3f} | {cpu:.1f} us | "
                  f"{ratios} |")
    print("\nrounds (requests/s, none/held): " + "; ".join(
        f"{name}: " + ", ".join(f"{a['rps']:,.0f}/{b['rps']:,.0f}" for a, b in zip(
            runs[(name, 0)], runs[(name, args.polls)], strict=True)) for name, _ in CASES))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=30)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--queues", type=int, default=20)
    parser.add_argument("--polls", type=int, default=200)
    parser.add_argument("--requests", type=int, default=200_000)
    parser.add_argument("--poller", choices=("chromium", "python"), default="chromium")
    parser.add_argument("--skip", default="", help="comma-separated: dashboard, polls")
    args = parser.parse_args()
    skip = set(filter(None, args.skip.split(",")))
    if "dashboard" not in skip:
        dashboard_cost(args)
    if "polls" not in skip:
        long_polls(args)


if __name__ == "__main__":
    main()
