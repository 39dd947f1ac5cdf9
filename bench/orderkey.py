"""ORDERKEY: the throughput of jobs with 1,000 order keys against plain jobs.

    python bench/orderkey.py [--jobs 20000] [--keys 1000] [--nodes 1] [--consumers 4]

Two phases, for plain jobs then for jobs spread round-robin over `--keys` ORDERKEYs
(RETRY 60): ADDJOB of `--jobs` jobs (pipelined 100 at a time, one client, each key's
jobs in order), then `--consumers` consumers (threads, one connection each, on the
nodes in turn) take them with GETJOB COUNT 100 and ack each batch with one ACKJOB
until every job is acked: jobs added per second and jobs delivered and acked per
second. An ORDERKEY has one job in flight at a time, so a GETJOB gets at most one job
per key: with 1,000 keys at most 1,000 jobs are out at once. `--nodes 3`: a formed
cluster, the jobs added on the first node (REPLICATE 3, ADDJOB's default), the
consumers on every node (a key's jobs reach the other nodes through federation).
"""

from __future__ import annotations

import argparse
import tempfile
import threading
import time

import redis
from cluster import start_cluster
from common import start_disq, stop, stop_nodes_on_sigterm

PIPELINE = 100


def add(client: redis.Redis, queue: str, jobs: int, keys: int) -> float:
    """Seconds to add `jobs` jobs (`keys` 0: plain)."""
    start = time.perf_counter()
    for first in range(0, jobs, PIPELINE):
        pipe = client.pipeline(transaction=False)
        for i in range(first, min(first + PIPELINE, jobs)):
            if keys:
                pipe.execute_command("ADDJOB", queue, "x", 0, "RETRY", 60,
                                     "ORDERKEY", f"k{i % keys}")
            else:
                pipe.execute_command("ADDJOB", queue, "x", 0, "RETRY", 60)
        pipe.execute()
    return time.perf_counter() - start


def consume(ports: list[int], queue: str, jobs: int, consumers: int) -> float:
    """Seconds until `jobs` jobs were delivered and acked by `consumers` threads."""
    done = [0]
    lock = threading.Lock()

    def run(port: int) -> None:
        client = redis.Redis(port=port)
        while True:
            with lock:
                if done[0] >= jobs:
                    return
            got = client.execute_command("GETJOB", "TIMEOUT", 100, "COUNT", 100,
                                         "FROM", queue)
            if not got:
                continue
            client.execute_command("ACKJOB", *[job[1] for job in got])
            with lock:
                done[0] += len(got)

    threads = [threading.Thread(target=run, args=(ports[i % len(ports)],))
               for i in range(consumers)]
    start = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=20000)
    parser.add_argument("--keys", type=int, default=1000)
    parser.add_argument("--nodes", type=int, default=1)
    parser.add_argument("--consumers", type=int, default=4)
    args = parser.parse_args()
    stop_nodes_on_sigterm()
    with tempfile.TemporaryDirectory() as workdir:
        nodes = (start_cluster(workdir, args.nodes) if args.nodes > 1
                 else [start_disq(workdir)])
        try:
            ports = [port for _, port in nodes]
            client = redis.Redis(port=ports[0])
            print(f"| jobs ({args.nodes} node{'s' if args.nodes > 1 else ''}) | "
                  "added/s | delivered+acked/s |\n|---|---|---|")
            for label, keys in (("plain", 0), (f"ORDERKEY, {args.keys:,} keys", args.keys)):
                queue = f"q{keys}"
                added = add(client, queue, args.jobs, keys)
                consumed = consume(ports, queue, args.jobs, args.consumers)
                print(f"| {label} | {args.jobs / added:,.0f} | {args.jobs / consumed:,.0f} |")
        finally:
            for proc, _ in nodes:
                stop(proc)


if __name__ == "__main__":
    main()
