"""When jobs fail: what a queue policy costs, how well RATE holds, how fast
dead letters go back.

    python bench/failures.py [--rounds 5] [--cycles 20000] [--rate 100] [--seconds 60]
                             [--dead 100000] [--skip cost,rate,requeue]

- cost: GETJOB + NACK cycles on a queue of 1,000 jobs, one node, without a policy and
  with one whose checks run on every NACK but never fire (MAXDELIVERIES 65535 and a
  DEADLETTER; a BACKOFF would delay the NACKs by design), alternated over `--rounds`
  fresh nodes each; the node's CPU (user + sys, /proc) per cycle and the cycles per
  second of one client pipelining 100 cycles, medians and the ratio.
- rate: RATE `--rate` on a 3-node cluster, jobs on every node, two consumers per node
  (blocking GETJOB + ACKJOB) for `--seconds`: jobs delivered per second in all, its
  error against the rate, and each node's part.
- requeue: `--dead` dead letters (ADDJOB MAXDELIVERIES 1, delivered, NACKed) on one
  node, then the time DEADLETTER REQUEUE takes to put them all back; and the same on
  a 3-node cluster (REPLICATE 3: every copy moves on every node) asked of the node
  that holds none queued.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import threading
import time

import redis
from cluster import start_cluster
from common import start_disq, stop

TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def fill(c: redis.Redis, queue: str, count: int, *options: object) -> list[bytes]:
    ids = []
    pipe = c.pipeline(transaction=False)
    for i in range(count):
        pipe.execute_command("ADDJOB", queue, f"job {i}", 0, *options)
        if i % 1000 == 999:
            ids += pipe.execute()
    ids += pipe.execute()
    return ids


def cycles(c: redis.Redis, count: int, batch: int = 100) -> None:
    """`count` GETJOB + NACK cycles on queue q, `batch` at a time pipelined."""
    done = 0
    while done < count:
        pipe = c.pipeline(transaction=False)
        for _ in range(batch):
            pipe.execute_command("GETJOB", "NOHANG", "FROM", "q")
        jobs = [reply[0][1] for reply in pipe.execute() if reply]
        pipe = c.pipeline(transaction=False)
        for job_id in jobs:
            pipe.execute_command("NACK", job_id)
        pipe.execute()
        done += len(jobs)


def bench_cost(rounds: int, count: int) -> None:
    results: dict[str, list[tuple[float, float]]] = {"no policy": [], "a policy": []}
    for _ in range(rounds):
        for side in results:
            with tempfile.TemporaryDirectory(prefix="disq-failures-") as workdir:
                proc, port = start_disq(workdir)
                try:
                    c = redis.Redis(port=port)
                    if side == "a policy":
                        c.execute_command("QPOLICY", "q", "SET", "MAXDELIVERIES", 65535,
                                          "DEADLETTER", "graveyard")
                    fill(c, "q", 1000)
                    cycles(c, 2000)  # warm-up
                    cpu = cpu_seconds(proc.pid)
                    started = time.perf_counter()
                    cycles(c, count)
                    elapsed = time.perf_counter() - started
                    results[side].append(((cpu_seconds(proc.pid) - cpu) / count * 1e6,
                                          count / elapsed))
                finally:
                    stop(proc)
    print("| GETJOB + NACK, 1 node | server CPU per cycle (median) | cycles/s (median) |")
    print("|---|---|---|")
    medians = {}
    for side, figures in results.items():
        cpu = statistics.median(f[0] for f in figures)
        rate = statistics.median(f[1] for f in figures)
        medians[side] = (cpu, rate)
        print(f"| {side} | {cpu:.2f} us | {rate:,.0f} |")
    before, after = medians["no policy"], medians["a policy"]
    print(f"| ratio | {after[0] / before[0]:.3f} | {after[1] / before[1]:.3f} |")


def bench_rate(rate: float, seconds: float) -> None:
    with tempfile.TemporaryDirectory(prefix="disq-failures-") as workdir:
        nodes = start_cluster(workdir)
        try:
            ports = [port for _, port in nodes]
            redis.Redis(port=ports[0]).execute_command("QPOLICY", "rq", "SET", "RATE", rate)
            per_node = int(rate * seconds * 1.5 / len(ports)) + 100
            for port in ports:
                c = redis.Redis(port=port)
                while c.execute_command("QPOLICY", "rq", "GET") is None:
                    time.sleep(0.05)
                fill(c, "rq", per_node, "REPLICATE", 1)
            delivered = [0] * len(ports)
            stop_at = time.monotonic() + seconds

            def consume(i: int) -> None:
                c = redis.Redis(port=ports[i], socket_timeout=10)
                while time.monotonic() < stop_at:
                    reply = c.execute_command("GETJOB", "TIMEOUT", 100, "FROM", "rq")
                    if reply and time.monotonic() < stop_at:
                        delivered[i] += 1
                        c.execute_command("ACKJOB", reply[0][1])

            threads = [threading.Thread(target=consume, args=(i,))
                       for i in range(len(ports)) for _ in range(2)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
        finally:
            for proc, _ in nodes:
                stop(proc)
    total = sum(delivered)
    measured = total / seconds
    print("| RATE | seconds | delivered | per second | error | per node |")
    print("|---|---|---|---|---|---|")
    print(f"| {rate:g} | {seconds:g} | {total} | {measured:.1f} | "
          f"{(measured - rate) / rate * 100:+.1f}% | {' / '.join(map(str, delivered))} |")


def make_dead(c: redis.Redis, count: int, *options: object) -> None:
    fill(c, "work", count, "MAXDELIVERIES", 1, *options)
    left = count
    while left:
        jobs = c.execute_command("GETJOB", "NOHANG", "COUNT", 1000, "FROM", "work") or []
        if not jobs:
            time.sleep(0.01)
            continue
        c.execute_command("NACK", *[job[1] for job in jobs])
        left -= len(jobs)


def bench_requeue(count: int) -> None:
    print("| dead letters | nodes | DEADLETTER REQUEUE took | per second |")
    print("|---|---|---|---|")
    with tempfile.TemporaryDirectory(prefix="disq-failures-") as workdir:
        proc, port = start_disq(workdir)
        try:
            c = redis.Redis(port=port, socket_timeout=600)
            make_dead(c, count)
            assert c.execute_command("QLEN", "dead:work") == count
            started = time.perf_counter()
            done = c.execute_command("DEADLETTER", "REQUEUE", "dead:work")
            took = time.perf_counter() - started
            assert done == count and c.execute_command("QLEN", "work") == count
            print(f"| {count:,} | 1 | {took:.2f} s | {count / took:,.0f} |")
        finally:
            stop(proc)
    with tempfile.TemporaryDirectory(prefix="disq-failures-") as workdir:
        nodes = start_cluster(workdir)
        try:
            ports = [port for _, port in nodes]
            c = redis.Redis(port=ports[0], socket_timeout=600)
            make_dead(c, count, "REPLICATE", 3)
            other = redis.Redis(port=ports[1], socket_timeout=600)
            started = time.perf_counter()
            done = other.execute_command("DEADLETTER", "REQUEUE", "dead:work")
            took = time.perf_counter() - started
            assert done == count, done
            print(f"| {count:,} | 3 (REPLICATE 3) | {took:.2f} s | {count / took:,.0f} |")
        finally:
            for p, _ in nodes:
                stop(p)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--cycles", type=int, default=20_000)
    parser.add_argument("--rate", type=float, default=100.0)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--dead", type=int, default=100_000)
    parser.add_argument("--skip", default="")
    args = parser.parse_args()
    skip = set(args.skip.split(","))
    if "cost" not in skip:
        bench_cost(args.rounds, args.cycles)
    if "rate" not in skip:
        bench_rate(args.rate, args.seconds)
    if "requeue" not in skip:
        bench_requeue(args.dead)


if __name__ == "__main__":
    main()
