"""disq as a Spark data source (PySpark's Python Data Source API): `format("disq")`.

    from disq_spark import register
    register(spark)
    df.write.format("disq").mode("append").option("nodes", "n1:7711,n2:7711") \\
        .option("queue", "invoices").option("replicate", 2).save()
    df.writeStream.format("disq").option("nodes", ...).option("queue", "events") \\
        .option("checkpointLocation", "/chk/events").start()
    jobs = spark.readStream.format("disq").option("nodes", ...) \\
        .option("queue", "events").load()

Writes (batch and streaming): every task writes its partition with a `PartitionWriter`
(writer.py): one job per row, from the executors, spread over the nodes, with DEDUP
keys so that a task Spark runs again, or a micro-batch replayed after a restart, adds
no job twice. The keys of a row: from the `key` column when given, else from (the
write's name, or the query ID and the batch ID; the partition; the row's position).
Each task's counts come back to the driver in its commit message; bad rows fail the
write at commit (`bad_rows=fail`) or are logged (`bad_rows=log`), never dropped
silently.

Streaming reads: the source's side on the driver takes each micro-batch's jobs
(reader.py, `JobTaker`) and acknowledges them once Spark has committed the batch.
Spark calls the source's `commit(end)` only when it plans the next batch; it asks
`latestOffset(start)` only once the batch ending at `start` is in its commit log, so
both acknowledge the batches up to their offset: the last batch of an idle stream is
acknowledged at the next trigger rather than when more jobs come. Offsets are
{"run", "seq"}: a batch number within one run of the source; a batch of an earlier
run that Spark replays after a restart is read as empty, its jobs having come back
(after their RETRY) to be taken by a later batch. At least once.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import replace
from typing import Any

from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceReader,
    DataSourceStreamArrowWriter,
    DataSourceStreamReader,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from .options import WriteSettings, read_options, write_settings
from .reader import READ_SCHEMA, JobTaker, ReadOptions
from .retained import RETAINED_SCHEMA, Shard, read_shard, shards, window
from .writer import PartitionWriter, WriteStats, row_key_prefix

log = logging.getLogger("disq_spark")

NAME = "disq"
BATCH_ID = "streaming.sql.batchId"  # the local properties Spark gives a micro-batch's tasks
QUERY_ID = "sql.streaming.queryId"  # the query's ID, kept in its checkpoint


class BadRowsError(RuntimeError):
    """Rows that could not become jobs (bad_rows=fail); the others were added."""


def register(spark: Any = None) -> None:
    """Register the data source as `format("disq")` with `spark` (default: the active
    session). Each SparkSession needs it once; importing disq_spark does not do it."""
    if spark is None:
        from pyspark.sql import SparkSession

        spark = SparkSession.getActiveSession() or SparkSession.builder.getOrCreate()
    spark.dataSource.register(DisqDataSource)


class DisqDataSource(DataSource):
    """`format("disq")`: batch and streaming writes, streaming reads, batch reads of
    retained jobs (retained.py)."""

    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> str:
        return RETAINED_SCHEMA if "from" in self.options else READ_SCHEMA

    def writer(self, schema: StructType, overwrite: bool) -> DisqWriter:
        if overwrite:
            raise ValueError("disq: a queue cannot be overwritten: use mode('append')")
        return DisqWriter(self._settings(schema))

    def streamWriter(self, schema: StructType, overwrite: bool) -> DisqStreamWriter:  # noqa: N802
        return DisqStreamWriter(self._settings(schema))

    def streamReader(self, schema: StructType) -> DisqStreamReader:  # noqa: N802
        return DisqStreamReader(read_options(self.options))

    def reader(self, schema: StructType) -> DataSourceReader:
        if "from" not in self.options:
            raise ValueError(
                "disq: a batch read reads a queue's retained jobs (QPOLICY ... RETAIN): "
                "give the option from (Unix ms); a queue is consumed with "
                "spark.readStream.format('disq') (jobs acknowledged when a batch "
                "commits); use .trigger(availableNow=True) to take what is queued and stop")
        return RetainedReader(read_options(self.options))

    def _settings(self, schema: StructType) -> WriteSettings:
        return write_settings(self.options, schema.fieldNames())


# -- writes --------------------------------------------------------------------------------
class WriteReport(WriterCommitMessage):
    """A task's counts, sent to the driver's commit."""

    def __init__(self, stats: WriteStats) -> None:
        self.stats = stats


def _task() -> Any:
    """The running task's TaskContext (the writers run in tasks only)."""
    from pyspark import TaskContext

    ctx = TaskContext.get()
    assert ctx is not None, "not in a Spark task"
    return ctx


def _commit(settings: WriteSettings, messages: Sequence[WriterCommitMessage | None],
            what: str) -> WriteStats:
    """Add up the tasks' counts; append them to stats_file; bad rows fail or warn."""
    stats = WriteStats()
    for message in messages:
        if isinstance(message, WriteReport):
            stats += message.stats
    if settings.stats_file:
        with open(settings.stats_file, "a") as out:
            out.write(json.dumps({"write": what, **stats.as_dict()}) + "\n")
    if stats.bad_rows:
        text = (f"disq: {what}: {stats.bad_rows} bad rows not added to queue "
                f"{settings.options.queue!r} ({stats.added} rows added), e.g. "
                f"{stats.bad_examples}")
        if settings.bad_rows == "fail":
            raise BadRowsError(text)
        log.warning("%s", text)
    return stats


class DisqWriter(DataSourceArrowWriter):
    """A batch write: made on the driver, pickled into every task. Without a key
    column and a job_name, the write gets a new random name: every task and its
    retries share it, another write does not."""

    def __init__(self, settings: WriteSettings) -> None:
        o = settings.options
        if not settings.job_name_given:
            o = replace(o, job_name=o.queue if o.key is not None else uuid.uuid4().hex)
        self.settings = replace(settings, options=o)

    def write(self, iterator: Iterator[Any]) -> WriteReport:
        partition = _task().partitionId()
        return WriteReport(PartitionWriter(self.settings.options, partition).write_arrow(
            iterator))

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        _commit(self.settings, messages, "write")

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        """Jobs already added stay: with the same job_name (or key column) running the
        write again adds only the others."""


class DisqStreamWriter(DataSourceStreamArrowWriter):
    """A streaming write: the same writer serves every micro-batch; a task learns its
    batch and query from Spark's local properties. A row's key without a key column:
    (query ID, batch ID, partition, position), the same when Spark replays the batch
    after a restart from the checkpoint, as long as the source replays the same rows
    in the same partitions (files, Kafka, disq's source after its jobs came back do
    not: use a key column then, e.g. the source job's `id`)."""

    def __init__(self, settings: WriteSettings) -> None:
        self.settings = settings

    def write(self, iterator: Iterator[Any]) -> WriteReport:
        ctx = _task()
        partition = ctx.partitionId()
        o = self.settings.options
        prefix = None
        if not self.settings.job_name_given:
            if o.key is not None:
                o = replace(o, job_name=o.queue)
            else:
                name = f"{ctx.getLocalProperty(QUERY_ID)}\0{ctx.getLocalProperty(BATCH_ID)}"
                prefix = row_key_prefix(name, o.queue, partition)
        elif o.key is None:
            name = f"{o.job_name}\0{ctx.getLocalProperty(BATCH_ID)}"
            prefix = row_key_prefix(name, o.queue, partition)
        return WriteReport(PartitionWriter(o, partition, prefix).write_arrow(iterator))

    def commit(self, messages: list[WriterCommitMessage | None],
               batchId: int) -> None:  # noqa: N803
        _commit(self.settings, messages, f"batch {batchId}")

    def abort(self, messages: list[WriterCommitMessage | None],
              batchId: int) -> None:  # noqa: N803
        """The batch runs again (now or after a restart) with the same keys."""


# -- batch reads: retained jobs (retained.py) -----------------------------------------------
class ShardPartition(InputPartition):
    def __init__(self, shard: Shard) -> None:
        super().__init__(None)
        self.shard = shard


class RetainedReader(DataSourceReader):
    """The retained jobs of a window, one partition per shard of the job IDs."""

    def __init__(self, options: ReadOptions) -> None:
        self.options = options
        self.end = window(options)[1]

    def partitions(self) -> Sequence[InputPartition]:
        return [ShardPartition(shard) for shard in shards(self.options)]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        assert isinstance(partition, ShardPartition)
        yield from read_shard(self.options, partition.shard, self.end)


# -- streaming reads -----------------------------------------------------------------------
class JobsPartition(InputPartition):
    """Some of a micro-batch's jobs, as an Arrow record batch built on the driver."""

    def __init__(self, batch: Any) -> None:
        super().__init__(None)
        self.batch = batch


class DisqStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """The source's offsets, partitions and commit run on the driver, in one Python
    process for the query's life (the `JobTaker` lives there); `read` runs in the
    tasks and only turns a partition into rows."""

    def __init__(self, options: ReadOptions) -> None:
        self.options = options
        self._taker: JobTaker | None = None

    def __getstate__(self) -> dict[str, Any]:  # pickled into the tasks: no connections
        return {"options": self.options, "_taker": None}

    @property
    def taker(self) -> JobTaker:
        if self._taker is None:
            self._taker = JobTaker(self.options)
        return self._taker

    def _own(self, offset: dict[str, Any]) -> int | None:
        """The batch number of an offset of this run, None for another run's."""
        if offset.get("run") == self.taker.run:
            return int(offset["seq"])
        return None

    def initialOffset(self) -> dict[str, Any]:  # noqa: N802
        return {"run": "", "seq": 0}

    def getDefaultReadLimit(self) -> ReadLimit:  # noqa: N802
        return ReadMaxRows(self.options.max_jobs_per_batch)

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:  # noqa: N802
        """Spark asks for the offsets after `start` once the batch ending at `start`
        is committed: acknowledge it (and any before), then take the next batch's jobs
        (None taken: `start`, no batch). Also the batch taken after `start` and not yet
        planned, if Spark asks twice."""
        taker = self.taker
        seq = self._own(start)
        if seq is not None:
            taker.ack_through(seq, wait=False)  # while the next batch is taken
            pending = taker.batches(seq, taker.seq)
            if pending:
                return {"run": taker.run, "seq": pending[-1].seq}
        if isinstance(limit, ReadMaxRows):
            count = limit.max_rows
        elif isinstance(limit, ReadAllAvailable):
            count = self.options.max_jobs_per_batch  # Trigger.Once: one batch at most
        else:
            count = self.options.max_jobs_per_batch
        taken = taker.take(count, after=int(start.get("seq", 0)))
        if taken is None:
            # No batch follows: nothing to overlap the acknowledgement with, and Spark
            # may end the query now (Trigger.AvailableNow) and kill this process
            # without waiting for `stop`: acknowledge before answering.
            taker.ack_wait()
            return start
        return {"run": taker.run, "seq": taken.seq}

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        end_seq = self._own(end)
        if end_seq is None:  # a batch of an earlier run, replayed: its jobs come back
            return []
        parts = self.options.num_partitions or len(self.options.nodes)
        return [JobsPartition(batch)
                for taken in self.taker.batches(self._own(start) or 0, end_seq)
                for batch in taken.partitions(parts)]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        assert isinstance(partition, JobsPartition)
        yield partition.batch

    def commit(self, end: dict[str, Any]) -> None:
        seq = self._own(end)
        if seq is not None:
            self.taker.ack_through(seq, wait=False)

    def prepareForTriggerAvailableNow(self) -> None:  # noqa: N802
        """Trigger.AvailableNow: take as many jobs as are queued now, then stop."""
        self.taker.budget = self.taker.queued()

    def stop(self) -> None:
        if self._taker is not None:
            self._taker.close()
