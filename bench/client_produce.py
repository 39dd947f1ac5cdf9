"""Python client produce rate: `add_jobs` (pipelined ADDJOB) from one process against one
node, next to redis-benchmark's `ADDJOB -P 16` on the same node as a reference.

    python bench/client_produce.py [--runs 5] [--jobs 200000] [--batches 100,500,1000]

Starts one disq-server on a free loopback port and, `--runs` times, alternating the
cases with DEBUG FLUSHALL in between: `Client.add_jobs` of `--jobs` 1-byte bodies for
each batch size, `AsyncClient.add_jobs` with the default batch size, and
`redis-benchmark -c 50 -n 800000 -P 16 ADDJOB q x 0`. Prints each case's median (and
every run) as a Markdown table. The client and the server share the machine's cores.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from collections.abc import Callable

from common import redis_benchmark, start_disq, stop
from disq_client import AsyncClient, Client
from disq_client.client import BATCH_SIZE

BODY = b"x"


def sync_case(port: int, jobs: int, batch: int) -> float:
    with Client(f"127.0.0.1:{port}") as client:
        client.connect()
        started = time.perf_counter()
        ids = client.add_jobs("q", (BODY for _ in range(jobs)), timeout_ms=0, batch_size=batch)
        elapsed = time.perf_counter() - started
    assert len(ids) == jobs
    return jobs / elapsed


def async_case(port: int, jobs: int) -> float:
    async def run() -> float:
        async with AsyncClient(f"127.0.0.1:{port}") as client:
            await client.connect()
            started = time.perf_counter()
            ids = await client.add_jobs("q", (BODY for _ in range(jobs)), timeout_ms=0)
            elapsed = time.perf_counter() - started
        assert len(ids) == jobs
        return jobs / elapsed
    return asyncio.run(run())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--jobs", type=int, default=200_000)
    parser.add_argument("--batches", default="100,500,1000")
    parser.add_argument("--reference-requests", type=int, default=800_000)
    args = parser.parse_args()
    batches = [int(b) for b in args.batches.split(",")]

    cases: dict[str, Callable[[int], float]] = {}
    for batch in batches:
        cases[f"Client.add_jobs, batch {batch}"] = (
            lambda port, batch=batch: sync_case(port, args.jobs, batch))
    cases[f"AsyncClient.add_jobs, batch {BATCH_SIZE}"] = (
        lambda port: async_case(port, args.jobs))
    cases["redis-benchmark -c 50 -P 16 ADDJOB q x 0"] = (
        lambda port: redis_benchmark(port, args.reference_requests, 16, "ADDJOB", "q", "x",
                                     "0")[0])
    results: dict[str, list[float]] = {name: [] for name in cases}

    with tempfile.TemporaryDirectory() as workdir:
        proc, port = start_disq(workdir)
        try:
            with Client(f"127.0.0.1:{port}") as admin:
                for run in range(args.runs):
                    for name, case in cases.items():
                        admin.execute_command("DEBUG", "FLUSHALL")
                        results[name].append(case(port))
                        print(f"run {run + 1} {name}: {results[name][-1]:,.0f}/s",
                              file=sys.stderr)
        finally:
            stop(proc)

    reference = statistics.median(results["redis-benchmark -c 50 -P 16 ADDJOB q x 0"])
    print("| case | median jobs/s | vs redis-benchmark -P 16 | runs |")
    print("|---|---|---|---|")
    for name, rates in results.items():
        median = statistics.median(rates)
        runs = ", ".join(f"{r / 1000:.0f}k" for r in rates)
        print(f"| {name} | {median:,.0f} | {median / reference:.2f} | {runs} |")


if __name__ == "__main__":
    main()
