"""Time and order: lateness of AT jobs, priorities, fairness, cost.

    python bench/schedule.py [--jobs 100000] [--spread 10] [--cost-jobs 1000000]
                             [--skip lateness,priorities,fairness,cost]

- lateness: `--jobs` jobs with AT spread evenly over `--spread` seconds (the body is
  the due time), consumers blocked in GETJOB (COUNT 100) take them as they come due;
  lateness = the time a consumer read the job minus its due time, on the machine's one
  clock. One node, then three nodes with REPLICATE 2, the producer on the first node
  and the consumers on the second (the jobs reach them by federation). Reported:
  early deliveries (must be 0), p50 / p99 / max lateness.
- priorities: 20,000 jobs with a priority drawn from 10 levels, then one consumer
  drains the queue: every delivery must be the most urgent job still queued.
- fairness: 10 groups, one with 100x the jobs of each other; Jain's index of the
  deliveries per group in the first 10% of the drain, each over the group's max-min
  fair share (1.0: every group got its fair share; the small groups run out of jobs
  within that 10%, so raw counts cannot be even: they are printed too).
- cost: `--cost-jobs` jobs scheduled an hour ahead (AT): RSS per job, and the node's
  CPU while idle for 10 s with all of them waiting.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import random
import tempfile
import time
from typing import Any

import redis
from cluster import start_cluster
from common import rss, start_disq, stop

TICK = os.sysconf("SC_CLK_TCK")


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def produce(port: int, queue: str, dues: list[int], *extra: object) -> None:
    c = redis.Redis(port=port)
    pipe = c.pipeline(transaction=False)
    for i, due in enumerate(dues):
        pipe.execute_command("ADDJOB", queue, str(due), 0, "AT", due, *extra)
        if i % 1000 == 999:
            pipe.execute()
    pipe.execute()


def consume(port: int, queue: str, total: int, taken: Any, out: Any) -> None:
    """Take jobs until the consumers together took `total`; report the lateness (ms)
    of each job this one read."""
    c = redis.Redis(port=port, socket_timeout=60)
    late: list[float] = []
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline and taken.value < total:
        reply = c.execute_command("GETJOB", "TIMEOUT", 2000, "COUNT", 100, "FROM", queue)
        read_at = time.time_ns() / 1e6
        if not reply:
            continue
        ids = []
        for _, job_id, body in reply:
            late.append(read_at - int(body))
            ids.append(job_id)
        c.execute_command("FASTACK", *ids)
        with taken.get_lock():
            taken.value += len(ids)
    out.put(late)


def lateness(producer_port: int, consumer_port: int, jobs: int, spread: float,
             extra: tuple[object, ...], consumers: int = 2) -> dict[str, float]:
    queue = f"late-{random.randrange(1 << 30)}"
    start = now_ms() + 5000  # the producer is done before the first one is due
    dues = [start + int(i * spread * 1000 / jobs) for i in range(jobs)]
    taken = multiprocessing.Value("q", 0)
    out: multiprocessing.Queue[list[float]] = multiprocessing.Queue()
    procs = [multiprocessing.Process(target=consume,
                                     args=(consumer_port, queue, jobs, taken, out))
             for _ in range(consumers)]
    for p in procs:
        p.start()
    produce(producer_port, queue, dues, *extra)
    late: list[float] = []
    for _ in procs:
        late.extend(out.get(timeout=240))
    for p in procs:
        p.join(10)
    late.sort()
    return {"jobs": len(late), "early": sum(1 for x in late if x < 0),
            "p50_ms": round(late[len(late) // 2], 2),
            "p99_ms": round(late[int(len(late) * 0.99)], 2), "max_ms": round(late[-1], 2)}


def priorities(port: int, jobs: int = 20_000) -> str:
    c = redis.Redis(port=port)
    queue = "prio"
    pipe = c.pipeline(transaction=False)
    levels = [random.randrange(10) * 25 for _ in range(jobs)]
    for level in levels:
        pipe.execute_command("ADDJOB", queue, str(level), 0, "PRIORITY", level)
    pipe.execute()
    remaining = sorted(levels)
    wrong = 0
    index = 0
    while True:
        reply = c.execute_command("GETJOB", "NOHANG", "COUNT", 1, "FROM", queue)
        if not reply:
            break
        _, job_id, body = reply[0]
        if int(body) != remaining[index]:
            wrong += 1
        index += 1
        c.execute_command("FASTACK", job_id)
    return f"{index} deliveries, {wrong} not the most urgent job queued"


def fairness(port: int) -> str:
    c = redis.Redis(port=port)
    queue = "fair"
    pipe = c.pipeline(transaction=False)
    counts = {f"g{i}": 100 for i in range(9)}
    counts["big"] = 10_000
    for group, n in counts.items():
        for _ in range(n):
            pipe.execute_command("ADDJOB", queue, group, 0, "GROUP", group)
    pipe.execute()
    total = sum(counts.values())
    first = {g: 0 for g in counts}
    for _ in range(total // 10):
        reply = c.execute_command("GETJOB", "NOHANG", "COUNT", 1, "FROM", queue)
        _, job_id, body = reply[0]
        first[body.decode()] += 1
        c.execute_command("FASTACK", job_id)
    shares = max_min_shares(counts, total // 10)
    x = [first[g] / shares[g] for g in counts]  # 1.0: exactly its fair share
    jain = sum(x) ** 2 / (len(x) * sum(v * v for v in x))
    return (f"Jain's index {jain:.3f} of the deliveries per group over their max-min fair "
            f"shares, first {total // 10} deliveries ({first})")


def max_min_shares(demands: dict[str, int], capacity: int) -> dict[str, float]:
    """Max-min fair shares of `capacity` (water-filling): a group that asks for less
    than an even split gets what it asks, the rest share what is left. (A group with
    100 jobs cannot get more than 100 of the first 1,090 deliveries: its fair share
    is 100, the big group's the remaining 190.)"""
    shares: dict[str, float] = {}
    left = dict(demands)
    remaining = float(capacity)
    while left:
        even = remaining / len(left)
        small = {g: d for g, d in left.items() if d <= even}
        if not small:
            shares.update({g: even for g in left})
            break
        for g, d in small.items():
            shares[g] = d
            remaining -= d
            del left[g]
    return shares


def cost(jobs: int) -> str:
    with tempfile.TemporaryDirectory() as d:
        proc, port = start_disq(d)
        try:
            before = rss(proc.pid)
            due = now_ms() + 3600_000
            produce(port, "later", [due] * jobs)
            after = rss(proc.pid)
            time.sleep(1)
            cpu0 = cpu_seconds(proc.pid)
            time.sleep(10)
            idle = cpu_seconds(proc.pid) - cpu0
        finally:
            stop(proc)
    return (f"{jobs} jobs due in an hour: RSS {(after - before) / jobs:.0f} bytes/job "
            f"(body 13 B), idle CPU {idle / 10 * 100:.2f}% over 10 s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--spread", type=float, default=10.0)
    parser.add_argument("--cost-jobs", type=int, default=1_000_000)
    parser.add_argument("--skip", default="")
    args = parser.parse_args()
    skip = set(args.skip.split(","))
    if "lateness" not in skip:
        with tempfile.TemporaryDirectory() as d:
            proc, port = start_disq(d)
            try:
                r = lateness(port, port, args.jobs, args.spread, ())
            finally:
                stop(proc)
        print(f"lateness, 1 node: {r}", flush=True)
        with tempfile.TemporaryDirectory() as d:
            nodes = start_cluster(d)
            try:
                r = lateness(nodes[0][1], nodes[1][1], args.jobs, args.spread,
                             ("REPLICATE", 2))
            finally:
                for p, _ in nodes:
                    stop(p)
        print(f"lateness, 3 nodes REPLICATE 2, consumers on another node: {r}", flush=True)
    if "priorities" not in skip or "fairness" not in skip:
        with tempfile.TemporaryDirectory() as d:
            proc, port = start_disq(d)
            try:
                if "priorities" not in skip:
                    print(f"priorities: {priorities(port)}", flush=True)
                if "fairness" not in skip:
                    print(f"fairness: {fairness(port)}", flush=True)
            finally:
                stop(proc)
    if "cost" not in skip:
        print(f"cost: {cost(args.cost_jobs)}", flush=True)


if __name__ == "__main__":
    main()
