"""What the disq_spark tests ask the nodes: addresses, queue lengths, the jobs held."""

from __future__ import annotations

from disq_client import Client
from support import DisqProcess, call


def addrs(nodes: list[DisqProcess]) -> list[str]:
    return [f"127.0.0.1:{n.port}" for n in nodes]


def queued(nodes: list[DisqProcess], queue: str) -> int:
    return sum(int(call(n, "QLEN", queue)) for n in nodes)  # type: ignore[arg-type]


def bodies_on(nodes: list[DisqProcess], queue: str) -> dict[str, bytes]:
    """Every job of `queue` held by `nodes` (any state), by ID: copies counted once."""
    jobs: dict[str, bytes] = {}
    for node in nodes:
        with Client(f"127.0.0.1:{node.port}") as client:
            for info in client.jscan_info(queue=queue, count=1000):
                assert info.body is not None
                jobs[info.id] = info.body
    return jobs


def dedup_hits(nodes: list[DisqProcess]) -> int:
    """ADDJOBs the nodes answered with a job added before (its DEDUP key known)."""
    total = 0
    for node in nodes:
        with Client(f"127.0.0.1:{node.port}", switch_after_jobs=0) as client:
            total += int(client.info("dedup")["dedup"]["dedup_hits"])
    return total
