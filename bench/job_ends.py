"""How jobs end: the time from an ACKJOB ... RESULT to the WAITJOB it answers, across
nodes, and the memory of a kept result.

    python bench/job_ends.py [--jobs 2000] [--batch 100] [--results 100000] [--size 100]

- wake: three nodes, `--jobs` jobs added on the first with REPLICATE 2; for each batch
  of `--batch` jobs, one WAITJOB per job is sent on the third node (some of the jobs it
  holds, the others it asks the holders about), then a consumer on the first node takes
  each job and acknowledges it with a RESULT. Latency = the time the waiter read its
  answer minus the time just before the ACKJOB was sent (one clock: one machine).
  Reported: p50 / p99 / max, apart for the jobs the waiter's node holds and those it
  does not.
- memory: one node, `--results` jobs added and acknowledged with a `--size`-byte RESULT
  (the jobs themselves gone with their ACK): used_memory and RSS per kept result.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time

import redis
import redis.asyncio as aredis
from cluster import start_cluster
from common import rss, start_disq, stop


def percentiles(values: list[float]) -> str:
    if not values:
        return "none"
    ordered = sorted(values)
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    return (f"p50 {statistics.median(ordered):.2f} ms, p99 {p99:.2f} ms, "
            f"max {ordered[-1]:.2f} ms ({len(ordered)} jobs)")


async def wake(ports: list[int], jobs: int, batch: int) -> None:
    producer = aredis.Redis(port=ports[0])
    waiter_side = aredis.Redis(port=ports[2], max_connections=batch + 10)
    consumer = aredis.Redis(port=ports[0])
    held: list[float] = []
    asked: list[float] = []
    woken: dict[bytes, float] = {}

    async def wait(job_id: bytes) -> None:
        await waiter_side.execute_command("WAITJOB", "TIMEOUT", 30_000, job_id)
        woken[job_id] = time.perf_counter()

    for start in range(0, jobs, batch):
        ids = [await producer.execute_command("ADDJOB", "ends", "x", 0, "REPLICATE", 2)
               for _ in range(min(batch, jobs - start))]
        here = [await waiter_side.execute_command("SHOW", i) is not None for i in ids]
        waits = [asyncio.create_task(wait(i)) for i in ids]
        await asyncio.sleep(0.3)  # every WAITJOB sent and its holders asked
        acked: dict[bytes, float] = {}
        for _ in ids:
            [[_, job_id, _]] = await consumer.execute_command("GETJOB", "FROM", "ends")
            acked[job_id] = time.perf_counter()
            await consumer.execute_command("ACKJOB", job_id, "RESULT", "done")
        await asyncio.gather(*waits)
        for job_id, is_here in zip(ids, here, strict=True):
            (held if is_here else asked).append((woken[job_id] - acked[job_id]) * 1000)
    print(f"ACK to WAITJOB answer, the waiter's node holding the job: {percentiles(held)}")
    print(f"ACK to WAITJOB answer, the waiter's node not holding it:  {percentiles(asked)}")
    for client in (producer, waiter_side, consumer):
        await client.aclose()


def memory(results: int, size: int) -> None:
    workdir = tempfile.mkdtemp(prefix="disq-ends-")
    proc, port = start_disq(workdir)
    try:
        c = redis.Redis(port=port)
        before_used = int(c.info("memory")["used_memory"])
        before_rss = rss(proc.pid)
        result = b"r" * size
        pipe = c.pipeline(transaction=False)
        for i in range(results):
            pipe.execute_command("ADDJOB", "mem", "x", 0)
            if i % 1000 == 999 or i == results - 1:
                ids = pipe.execute()
                for job_id in ids:
                    pipe.execute_command("ACKJOB", job_id, "RESULT", result)
                pipe.execute()
        info = c.info("results")
        assert int(info["results_kept"]) == results, info
        used = int(c.info("memory")["used_memory"]) - before_used
        grown = rss(proc.pid) - before_rss
        print(f"{results} results of {size} bytes kept: used_memory {used / results:.0f} "
              f"bytes per result, RSS {grown / results:.0f} bytes per result")
    finally:
        stop(proc)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--results", type=int, default=100_000)
    parser.add_argument("--size", type=int, default=100)
    args = parser.parse_args()
    workdir = tempfile.mkdtemp(prefix="disq-ends-")
    nodes = start_cluster(workdir, 3)
    try:
        asyncio.run(wake([port for _, port in nodes], args.jobs, args.batch))
    finally:
        for proc, _ in nodes:
            stop(proc)  # type: ignore[arg-type]
    memory(args.results, args.size)


if __name__ == "__main__":
    main()
