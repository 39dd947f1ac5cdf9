"""`write_jobs`: a DataFrame or RDD written as disq jobs by the executors themselves.

A DataFrame whose body and key are columns reaches the tasks as Arrow batches
(mapInArrow), anything else as Row objects (mapPartitionsWithIndex). The driver only
ships the options and reads the accumulator: every Spark task writes
its own partition (`PartitionWriter`) to the node `partition % len(nodes)` first, so
every node takes load, and adds what it did to one accumulator, which Spark merges
once per successful task (a failed attempt's counts are dropped, its rows are sent
again by the next attempt and DEDUP answers the jobs added already).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import replace
from typing import Any

from pyspark.accumulators import AccumulatorParam

from .writer import Body, Key, PartitionWriter, WriteOptions, WriteStats


class _StatsParam(AccumulatorParam):
    def zero(self, value: WriteStats) -> WriteStats:
        return WriteStats()

    def addInPlace(self, value1: WriteStats, value2: WriteStats) -> WriteStats:  # noqa: N802
        return value1 + value2


def write_jobs(data: Any, queue: str, nodes: Sequence[str] | str, *,
               body: Body = "body", key: Key = None, job_name: str | None = None,
               dedup: bool = True, replicate: int | None = None, retry: int | None = None,
               ttl: int | None = None, delay: int | None = None, async_: bool = False,
               batch_size: int = 1000, pipeline: int = 2, timeout_ms: int = 10_000,
               max_body_bytes: int = 1 << 20, password: str | None = None,
               max_attempts: int = 10) -> WriteStats:
    """Add one job per row of `data` (a DataFrame or an RDD) to `queue`, from the
    executors, and return the counts (`WriteStats`: added, bad_rows, bad_examples).

    `nodes`: "host:port" of disq nodes (a list or a comma-separated string).
    `body`: a column name, or a function of the row; bytes go as they are, text as
    UTF-8, anything else as JSON. `key`: a column or function giving each row's
    identity; without it a row is known by (`job_name`, partition, position), stable
    when Spark re-runs a task over the same input. `job_name`: names this write for its
    keys; give the same name to make re-running the whole write add nothing (default: a
    new name per call). `dedup=False` sends plain ADDJOBs (at least once: a retried
    task may add jobs twice). `replicate`, `retry`, `ttl`, `delay`, `async_`,
    `timeout_ms`: ADDJOB's options. `batch_size` ADDJOBs per write, `pipeline` such
    batches in flight per task. Raises WriteError (through Spark) if a partition
    cannot be written after its retries."""
    if isinstance(nodes, str):
        nodes = [n.strip() for n in nodes.split(",") if n.strip()]
    options = WriteOptions(
        queue=queue, nodes=list(nodes), body=body, key=key,
        job_name=job_name if job_name is not None else uuid.uuid4().hex, dedup=dedup,
        replicate=replicate, retry=retry, ttl=ttl, delay=delay, async_=async_,
        timeout_ms=timeout_ms, batch_size=batch_size, pipeline=pipeline,
        max_body_bytes=max_body_bytes,
        password=password, max_attempts=max_attempts)
    PartitionWriter(options, 0)  # checks the options on the driver, sends nothing
    if _arrow_ready(data, body, key):
        return _write_arrow(data, options)
    rdd = data.rdd if hasattr(data, "rdd") else data
    stats = rdd.context.accumulator(WriteStats(), _StatsParam())

    def write_partition(index: int, rows: Iterable[Any]) -> Iterable[int]:
        stats.add(PartitionWriter(options, index).write(rows))
        return iter(())

    rdd.mapPartitionsWithIndex(write_partition).count()
    return stats.value


def _arrow_ready(data: Any, body: Body, key: Key) -> bool:
    """A DataFrame whose body and key are columns goes to the tasks as Arrow batches
    (mapInArrow): much cheaper than Row objects, the rows' order is the same."""
    if not (hasattr(data, "mapInArrow") and isinstance(body, str)
            and (key is None or isinstance(key, str))):
        return False
    try:  # pyspark[sql]: Spark's Arrow support needs both
        import pandas  # noqa: F401
        import pyarrow  # noqa: F401
    except ImportError:
        return False
    return True


def _write_arrow(df: Any, options: WriteOptions) -> WriteStats:
    columns = [options.body] + ([options.key] if options.key is not None else [])
    task_options = replace(options, body=0, key=1 if options.key is not None else None)
    stats = df.sparkSession.sparkContext.accumulator(WriteStats(), _StatsParam())

    def write_batches(batches: Iterable[Any]) -> Iterator[Any]:
        from pyspark import TaskContext

        rows = (row for batch in batches
                for row in zip(*(c.to_pylist() for c in batch.columns), strict=True))
        stats.add(PartitionWriter(task_options, TaskContext.get().partitionId()).write(rows))
        return iter(())

    df.select(*columns).mapInArrow(write_batches, "written long").collect()
    return stats.value
