"""Replicated ADDJOB on a 3-node cluster.

    python bench/cluster.py [--runs 3] [--requests 100000]

Starts three disq nodes on free loopback ports, joins them with CLUSTER MEET, waits
until each sees the two others, then runs redis-benchmark -c 50 against one node:
ADDJOB with the default REPLICATE (3 on three nodes) unpipelined and with -P 16, and
REPLICATE 2 with -P 16. Prints medians of throughput and p50/p99 latency as a
Markdown table. The load generator shares the machine with the three nodes.
"""

from __future__ import annotations

import argparse
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import redis_benchmark_summary, start_disq, stop

CASES = [
    ("ADDJOB q x 0 (REPLICATE 3)", 1, ["ADDJOB", "q", "x", "0"]),
    ("ADDJOB q x 0 (REPLICATE 3) -P 16", 16, ["ADDJOB", "q", "x", "0"]),
    ("ADDJOB q x 0 REPLICATE 2 -P 16", 16, ["ADDJOB", "q", "x", "0", "REPLICATE", "2"]),
]


def command(port: int, *args: str) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(b" ".join(a.encode() for a in args) + b"\r\n")
        return s.recv(65536)


def start_cluster(workdir: str, size: int = 3,
                  *extra: str) -> list[tuple[subprocess.Popen, int]]:
    """`size` nodes started with the directives `extra`, formed."""
    nodes = []
    for i in range(size):
        path = Path(workdir) / f"node{i}"
        path.mkdir()
        nodes.append(start_disq(str(path), *extra))
    first = nodes[0][1]
    for _, port in nodes[1:]:
        command(first, "CLUSTER", "MEET", "127.0.0.1", str(port))
    deadline = time.monotonic() + 30
    while True:
        reachable = [command(port, "CLUSTER", "INFO") for _, port in nodes]
        if all(f"cluster_reachable_nodes:{size - 1}".encode() in r for r in reachable):
            return nodes
        if time.monotonic() > deadline:
            raise RuntimeError("the cluster did not form")
        time.sleep(0.1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--requests", type=int, default=100_000)
    args = parser.parse_args()
    if shutil.which("redis-benchmark") is None:
        sys.exit("redis-benchmark not found (Debian: apt-get install redis-tools)")
    results: dict[str, list[dict[str, float]]] = {name: [] for name, *_ in CASES}
    with tempfile.TemporaryDirectory() as workdir:
        nodes = start_cluster(workdir)
        try:
            target = nodes[0][1]
            for run in range(args.runs):
                for name, pipeline, cmd in CASES:
                    requests = args.requests * (3 if pipeline > 1 else 1)
                    results[name].append(
                        redis_benchmark_summary(target, requests, pipeline, *cmd))
                    print(f"run {run + 1} {name}: {results[name][-1]['rps']:.0f} req/s",
                          file=sys.stderr)
                for _, port in nodes:
                    command(port, "DEBUG", "FLUSHALL")
        finally:
            for proc, _ in nodes:
                stop(proc)
    print("| command (3 nodes, -c 50) | median req/s | median p50 ms | median p99 ms |")
    print("|---|---|---|---|")
    for name, *_ in CASES:
        runs = results[name]
        print(f"| {name} | {statistics.median(r['rps'] for r in runs):,.0f} "
              f"| {statistics.median(r['p50'] for r in runs):.3f} "
              f"| {statistics.median(r['p99'] for r in runs):.3f} |")


if __name__ == "__main__":
    main()
