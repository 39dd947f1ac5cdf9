"""Topics: what a TOPIC PUBLISH costs against the number of subscribed queues.

    python bench/topics.py [--publishes 2000] [--subscribers 1,4,16] [--nodes 1]

For each count of subscribers, `--publishes` publishes (one client, unpipelined, each
waits for its answer), then the same number of plain ADDJOBs of one queue for the
ratio: publishes per second, jobs added per second, and the time per publish over
the time per ADDJOB. `--nodes 3`: a formed cluster, jobs replicated as ADDJOB's
default (REPLICATE 3), the publishes sent to the first node.
"""

from __future__ import annotations

import argparse
import tempfile
import time

import redis
from cluster import start_cluster
from common import start_disq, stop, stop_nodes_on_sigterm


def rate(client: redis.Redis, count: int, *command: object, msgid: bool = False) -> float:
    """Seconds per command of `count` sent one after the other (`msgid`: each with its
    own MSGID, as a producer that may retry sends them)."""
    start = time.perf_counter()
    for i in range(count):
        if msgid:
            client.execute_command(*command, "MSGID", i)
        else:
            client.execute_command(*command)
    return (time.perf_counter() - start) / count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--publishes", type=int, default=2000)
    parser.add_argument("--subscribers", default="1,4,16")
    parser.add_argument("--nodes", type=int, default=1)
    args = parser.parse_args()
    stop_nodes_on_sigterm()
    with tempfile.TemporaryDirectory() as workdir:
        if args.nodes > 1:
            nodes = start_cluster(workdir, args.nodes)
        else:
            nodes = [start_disq(workdir)]
        try:
            client = redis.Redis(port=nodes[0][1])
            print("| subscribers | publishes/s | jobs added/s | ms per publish | "
                  "publish / ADDJOB |\n|---|---|---|---|---|")
            for count in (int(n) for n in args.subscribers.split(",")):
                topic = f"t{count}"
                for q in range(count):
                    client.execute_command("TOPIC", "SUBSCRIBE", topic, f"{topic}-q{q}")
                per_publish = rate(client, args.publishes, "TOPIC", "PUBLISH", topic, "x",
                                   msgid=True)
                per_add = rate(client, args.publishes, "ADDJOB", f"{topic}-plain", "x", 0)
                print(f"| {count} | {1 / per_publish:,.0f} | {count / per_publish:,.0f} | "
                      f"{per_publish * 1000:.3f} | {per_publish / per_add:.2f} |")
                client.execute_command("DEBUG", "FLUSHALL")  # the next count starts empty
        finally:
            for proc, _ in nodes:
                stop(proc)


if __name__ == "__main__":
    main()
