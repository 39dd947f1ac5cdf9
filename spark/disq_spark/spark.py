"""`write_jobs`: a DataFrame or RDD written as disq jobs, a thin wrapper over the data
source (`df.write.format("disq")`, source.py) that returns the write's counts.

A DataFrame whose body (and key) are columns goes to the data source as it is. A
function for the body or the key, or an RDD, is first applied in the tasks (a narrow
map: the rows keep their partitions and order, so their keys are stable across task
retries): the data source then writes its `body` and `key` columns, and a function
that raises on a row makes that row bad, counted with its reason. The counts come back
from the data source's commit through a file on the driver (`stats_file`), and those of
the functions through an accumulator, merged by Spark once per successful task.
"""

from __future__ import annotations

import json
import os
import tempfile
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

from pyspark.accumulators import AccumulatorParam

from .source import register
from .writer import Body, Key, WriteStats, encode_body


class _StatsParam(AccumulatorParam[WriteStats]):
    def zero(self, value: WriteStats) -> WriteStats:
        return WriteStats()

    def addInPlace(self, value1: WriteStats, value2: WriteStats) -> WriteStats:  # noqa: N802
        return value1 + value2


def write_jobs(data: Any, queue: str, nodes: Sequence[str] | str, *,
               body: Body = "body", key: Key = None, job_name: str | None = None,
               dedup: bool = True, replicate: int | None = None,
               retry_ms: int | None = None, ttl_ms: int | None = None,
               delay_ms: int | None = None, async_: bool = False,
               batch_size: int = 1000, pipeline: int = 2, timeout_ms: int = 10_000,
               max_body_bytes: int = 1 << 20, password: str | None = None,
               max_attempts: int = 10, **options: Any) -> WriteStats:
    """Add one job per row of `data` (a DataFrame or an RDD) to `queue`, from the
    executors, and return the counts (`WriteStats`: added, bad_rows, bad_examples).

    `nodes`: "host:port" of disq nodes (a list or a comma-separated string).
    `body`: a column name, or a function of the row; bytes go as they are, text as
    UTF-8, anything else as JSON. `key`: a column or function giving each row's
    identity; without it a row is known by (`job_name`, partition, position), stable
    when Spark re-runs a task over the same input. `job_name`: names this write for its
    keys; give the same name to make re-running the whole write add nothing (default: a
    new name per call). `dedup=False` sends plain ADDJOBs (at least once: a retried
    task may add jobs twice). `replicate`, `retry_ms`, `ttl_ms`, `delay_ms`, `async_`,
    `timeout_ms`: ADDJOB's options, every duration in milliseconds (RETRY and TTL are
    sent in whole seconds, rounded up); `**options`: any other option of the data
    source (README.md: priority, group, ssl, ...; `retry`, `ttl` and `delay`, which
    took seconds, are an error naming their `_ms` option). `batch_size` ADDJOBs per
    write, `pipeline` such batches in flight per task. Raises (through Spark) if a
    partition cannot be written after its retries."""
    from pyspark.sql import DataFrame, SparkSession

    if not isinstance(nodes, str):
        nodes = ",".join(nodes)
    given = {
        "nodes": nodes, "queue": queue, "job_name": job_name or uuid.uuid4().hex,
        "dedup": dedup, "replicate": replicate, "retry_ms": retry_ms, "ttl_ms": ttl_ms,
        "delay_ms": delay_ms, "async": async_, "batch_size": batch_size, "pipeline": pipeline,
        "timeout_ms": timeout_ms, "max_body_bytes": max_body_bytes, "password": password,
        "max_attempts": max_attempts, "bad_rows": "log", **options}
    accumulator = None
    if isinstance(data, DataFrame) and isinstance(body, str) and \
            (key is None or isinstance(key, str)):
        df = data
        given.update(body=body, key=key)
    else:  # functions, or an RDD: body and key computed in the tasks first
        rdd = data.rdd if isinstance(data, DataFrame) else data
        spark = SparkSession.getActiveSession() or SparkSession.builder.getOrCreate()
        accumulator = rdd.context.accumulator(WriteStats(), _StatsParam())
        df = spark.createDataFrame(
            rdd.mapPartitionsWithIndex(_prepare(body, key, accumulator)),
            "body binary, key binary")
        given.update(body="body", key="key" if key is not None else None)
    with tempfile.TemporaryDirectory(prefix="disq-write-") as tmp:
        stats_file = os.path.join(tmp, "stats.jsonl")
        given["stats_file"] = stats_file
        register(df.sparkSession)
        writer = df.write.format("disq").mode("append")
        for name, value in given.items():
            if value is not None:
                writer = writer.option(name, str(value).lower() if isinstance(value, bool)
                                       else value)
        writer.save()
        with open(stats_file) as lines:
            stats = WriteStats.from_dict(json.loads(lines.read().splitlines()[-1]))
    return stats if accumulator is None else _merged(stats, accumulator.value)


def _merged(written: WriteStats, prepared: WriteStats) -> WriteStats:
    """The data source's counts with the rows the functions could not turn into a
    body or key."""
    return WriteStats(written.added, written.bad_rows + prepared.bad_rows,
                      (prepared.bad_examples + written.bad_examples)[:5],
                      written.retries, written.partitions)


def _field(row: Any, getter: Callable[[Any], Any] | str | int) -> Any:
    return getter(row) if callable(getter) else row[getter]


def _prepare(body: Body, key: Key, accumulator: Any
             ) -> Callable[[int, Iterable[Any]], Iterator[tuple[bytes | None, bytes | None]]]:
    """The task function making (body, key) of each row: a body or key function that
    raises makes the row bad (counted in the accumulator, not written)."""

    def prepare(index: int, rows: Iterable[Any]) -> Iterator[tuple[bytes | None, bytes | None]]:
        stats = WriteStats()
        try:
            for position, row in enumerate(rows):
                try:
                    value = encode_body(_field(row, body))
                except Exception as exc:
                    stats.bad(f"partition {index} row {position}", f"body: {exc!r}"[:200])
                    continue
                raw = None
                if key is not None:
                    try:
                        k = _field(row, key)
                    except Exception as exc:
                        stats.bad(f"partition {index} row {position}", f"key: {exc!r}"[:200])
                        continue
                    if k is not None:
                        raw = k if isinstance(k, bytes) else str(k).encode(
                            "utf-8", "surrogatepass")
                yield value, raw
        finally:
            accumulator.add(stats)

    return prepare
