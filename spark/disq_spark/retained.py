"""Batch reads of a queue's retained jobs (QPOLICY ... RETAIN keeps a queue's acked
jobs on their holders): `spark.read.format("disq").option("queue", q).option("from",
t0).option("to", t1).load()`.

The read is split in partitions by job ID (RETAINED ... SHARD i/n): partition i asks
every node for its retained jobs of shard i, a page at a time, and keeps each job once
(several holders keep a copy, all in the same shard). So no job is read twice, and every
job some reachable node keeps is read; a node that does not answer fails the task
(Spark runs it again)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

from .reader import ReadOptions

RETAINED_SCHEMA = ("id string, queue string, body binary, created_ms long, acked_ms long, "
                   "nodes array<string>, attrs map<string,string>")
PAGE = 1000


class Shard:
    """One partition of a batch read: shard `index` of `count`."""

    def __init__(self, index: int, count: int) -> None:
        self.index = index
        self.count = count


def shards(options: ReadOptions) -> list[Shard]:
    count = options.num_partitions or len(options.nodes)
    return [Shard(i, count) for i in range(count)]


def window(options: ReadOptions) -> tuple[int, int]:
    """FROM and TO, TO fixed when the read is planned (every task reads the same)."""
    end = options.end if options.end >= 0 else int(time.time() * 1000)
    if options.start < 0:
        raise ValueError("disq: a batch read needs the option from (Unix ms)")
    if options.start > end:
        raise ValueError(f"disq: from ({options.start}) is after to ({end})")
    return options.start, end


def read_shard(options: ReadOptions, shard: Shard, end: int) -> Iterator[tuple[Any, ...]]:
    """Every retained job of the shard, once, from every node."""
    seen: set[str] = set()
    for node in options.nodes:
        client = options.client([node])
        try:
            after: str | None = None
            while True:
                cursor, jobs = client.retained(options.queue, options.start, end, after=after,
                                               count=PAGE, shard=(shard.index, shard.count))
                for job in jobs:
                    if job.id not in seen:
                        seen.add(job.id)
                        yield (job.id, job.queue, job.body, job.created, job.acked,
                               job.nodes, job.attrs)
                if not cursor:
                    break
                after = cursor
        finally:
            client.close()
