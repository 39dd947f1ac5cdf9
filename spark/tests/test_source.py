"""format("disq") on local[2] (task retries on) against real 3-node disq clusters: a
batch write, a streaming write whose task is killed once and whose query is restarted
from its checkpoint in the middle of a batch (no job twice), a streaming read whose
batch fails (its jobs come back after their RETRY, none lost), and a read-transform-
write pipeline between two queues with a node killed mid-way (each job once)."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from disq_client import Client
from support import DisqProcess, call, wait_for

from .jobs import addrs, bodies_on, dedup_hits, queued


@pytest.fixture(autouse=True)
def registered(spark: Any) -> None:  # each test: its session may be a new one
    from disq_spark import register

    register(spark)


def nodes_option(nodes: list[DisqProcess]) -> str:
    return ",".join(addrs(nodes))


def test_batch_write(spark: Any, trio: list[DisqProcess], tmp_path: Path) -> None:
    """20,000 rows are 20,000 jobs with the options given (durations in ms: RETRY and
    TTL rounded up to whole seconds); bad rows fail the write (after the good ones were
    added), or are counted with bad_rows=log; an option that took seconds is refused."""
    df = spark.range(20_000, numPartitions=4).selectExpr("id", "concat('row-', id) AS body")
    (df.write.format("disq").mode("append").option("nodes", nodes_option(trio))
     .option("queue", "batch").option("replicate", 2).option("priority", 9)
     .option("retry_ms", 120_500).option("ttl_ms", 3_600_000).save())
    assert queued(trio, "batch") == 20_000
    with Client(addrs(trio)) as client:
        job = client.get_job("batch", with_counters=True, nohang=True)
        assert job is not None and job.priority == 9
        shown = client.show(job.id)  # on the node that delivered it
        assert shown is not None and shown.retry_ms == 121_000 and 3_000_000 < shown.ttl_ms <= 3_600_000
        client.nack(job.id)
    with pytest.raises(Exception, match=r"option 'retry' is gone: give retry_ms"):
        (df.write.format("disq").mode("append").option("nodes", nodes_option(trio))
         .option("queue", "batch").option("retry", 60).save())
    assert all(int(call(n, "QLEN", "batch")) > 0 for n in trio)  # type: ignore[arg-type]

    rows = [(f"ok-{i}",) for i in range(100)] + [(None,)] * 3
    bad = spark.createDataFrame(rows, "body string").repartition(2)
    writer = (bad.write.format("disq").mode("append").option("nodes", nodes_option(trio))
              .option("queue", "bad"))
    with pytest.raises(Exception, match="3 bad rows"):
        writer.save()
    assert queued(trio, "bad") == 100
    stats = tmp_path / "stats.jsonl"
    writer.option("bad_rows", "log").option("stats_file", str(stats)) \
        .option("job_name", "again").save()
    counts = json.loads(stats.read_text().splitlines()[-1])
    assert (counts["added"], counts["bad_rows"]) == (100, 3)
    with pytest.raises(Exception, match="use mode"):
        writer.mode("overwrite").save()
    with pytest.raises(Exception, match="a batch read reads a queue's retained jobs"):
        spark.read.format("disq").option("nodes", nodes_option(trio)).option(
            "queue", "batch").load().collect()


def _flaky(marker: str) -> Any:
    """mapInArrow's function: batch 1's first task attempt fails after 600 rows; any
    task of batch 2 too while `marker` exists (the query dies in that batch). The rows
    before (120 kB: past the 64 kB its worker buffers) reach the writer first."""

    def run(batches: Any) -> Any:
        import os
        import time

        from pyspark import TaskContext

        ctx = TaskContext.get()
        batch = ctx.getLocalProperty("streaming.sql.batchId")
        rows = 0
        for b in batches:
            yield b
            rows += b.num_rows
            if rows >= 600 and ((batch == "1" and ctx.attemptNumber() == 0)
                                or (batch == "2" and os.path.exists(marker))):
                time.sleep(0.5)  # the writer sends what it got
                raise RuntimeError(f"injected failure in batch {batch}")

    return run


def test_streaming_write_with_a_killed_task_and_a_restart(
        spark: Any, trio: list[DisqProcess], tmp_path: Path) -> None:
    """Four files of 1,000 rows, one per micro-batch: batch 1's task fails once after
    sending some jobs; batch 2 fails for good half-way, the query dies and starts again
    from its checkpoint, replaying batch 2. 4,000 jobs, each once."""
    source = tmp_path / "in"
    source.mkdir()
    for f in range(4):
        lines = [json.dumps({"body": f"file{f}-row{i}-" + "x" * 180}) for i in range(1000)]
        (source / f"{f}.json").write_text("\n".join(lines) + "\n")
    marker = tmp_path / "fail-batch-2"
    marker.touch()
    chk = str(tmp_path / "chk")

    def start() -> Any:
        stream = (spark.readStream.schema("body string").option("maxFilesPerTrigger", 1)
                  .json(str(source)).mapInArrow(_flaky(str(marker)), "body string"))
        return (stream.writeStream.format("disq").option("nodes", nodes_option(trio))
                .option("queue", "stream").option("replicate", 2).option("batch_size", 100)
                .option("checkpointLocation", chk).start())

    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "100")
    try:
        query = start()
        with pytest.raises(Exception, match="injected failure in batch 2"):
            query.awaitTermination(120)
        half = queued(trio, "stream")
        assert 2000 < half < 3000  # batches 0 and 1, and part of batch 2
        hits = dedup_hits(trio)
        assert hits >= 1  # batch 1's retry found the first attempt's jobs
        marker.unlink()
        query = start()
        wait_for(lambda: queued(trio, "stream") >= 4000, timeout=120,
                 message="the restarted query to write the rest")
        query.processAllAvailable()
        query.stop()
    finally:
        spark.conf.unset("spark.sql.execution.arrow.maxRecordsPerBatch")
    bodies = sorted(bodies_on(trio, "stream").values())
    assert len(bodies) == len(set(bodies)) == 4000, "a row missing or added twice"
    assert dedup_hits(trio) > hits  # the replayed batch 2 found its jobs by key


def pending(nodes: list[DisqProcess], queue: str) -> set[str]:
    """The IDs of the jobs of `queue` not acknowledged (queued, or delivered)."""
    ids: set[str] = set()
    for node in nodes:
        with Client(f"127.0.0.1:{node.port}", switch_after_jobs=0) as client:
            ids.update(client.jscan(queue=queue, states=("queued", "active")))
    return ids


def test_streaming_read_with_a_failing_batch(spark: Any, trio: list[DisqProcess],
                                             tmp_path: Path) -> None:
    """3,000 jobs (RETRY 3 s) read 1,000 a batch; the sink fails on batch 1 once: the
    query dies, that batch's jobs are not acknowledged and come back after their RETRY;
    the query restarted from its checkpoint gets every job, and acknowledges them. The
    jobs a live query holds are kept with WORKING (keepalive_ms), so a batch slower than
    the RETRY (a loaded machine) does not see its jobs delivered again."""
    expected = {f"job-{i}".encode() for i in range(3000)}
    with Client(addrs(trio)) as client:
        client.add_jobs("read", sorted(expected), replicate=2, retry_ms=3000)
    seen: list[bytes] = []
    failed = threading.Event()

    def sink(df: Any, batch_id: int) -> None:
        rows = df.select("body", "nacks", "additional_deliveries").collect()
        if batch_id == 1 and not failed.is_set() and rows:
            failed.set()
            raise RuntimeError("injected sink failure")
        seen.extend(bytes(r["body"]) for r in rows)

    def start() -> Any:
        return (spark.readStream.format("disq").option("nodes", nodes_option(trio))
                .option("queue", "read").option("max_jobs_per_batch", 1000)
                .option("keepalive_ms", 500).load()
                .writeStream.foreachBatch(sink)
                .option("checkpointLocation", str(tmp_path / "chk")).start())

    query = start()
    with pytest.raises(Exception, match="injected sink failure"):
        query.awaitTermination(120)
    assert len(seen) == 1000  # batch 0, acknowledged; batch 1 taken, not acknowledged:
    assert len(pending(trio, "read")) == 2000  # the jobs left are queued or delivered
    query = start()
    try:
        wait_for(lambda: expected <= set(seen), timeout=120,
                 message="every job, those of the failed batch after their RETRY")
        query.processAllAvailable()  # the next trigger: it acknowledges the last batch
    finally:
        query.stop()
    assert set(seen) == expected
    assert len(seen) - len(set(seen)) <= 1000  # only the failed batch's jobs came again
    wait_for(lambda: not pending(trio, "read"), timeout=30,
             message="every job acknowledged")


def test_available_now_reads_and_acknowledges_every_job(spark: Any, trio: list[DisqProcess],
                                                        tmp_path: Path) -> None:
    """Trigger.AvailableNow: the jobs queued at the start, 1,000 a batch, then the query
    ends; the last batch is acknowledged before it does (Spark may end the source's
    process without waiting for `stop`), not left to come back after its RETRY."""
    expected = {f"now-{i}".encode() for i in range(2500)}
    with Client(addrs(trio)) as client:
        client.add_jobs("now", sorted(expected), replicate=2, retry_ms=300_000)
    seen: list[bytes] = []
    query = (spark.readStream.format("disq").option("nodes", nodes_option(trio))
             .option("queue", "now").option("max_jobs_per_batch", 1000).load()
             .writeStream.foreachBatch(
                 lambda df, _: seen.extend(bytes(r["body"]) for r in df.collect()))
             .option("checkpointLocation", str(tmp_path / "chk"))
             .trigger(availableNow=True).start())
    assert query.awaitTermination(120)
    assert sorted(seen) == sorted(expected)
    # ACKJOB answered for every job; the other copies' holders hear of it over the bus
    wait_for(lambda: not pending(trio, "now"), timeout=15,
             message="every job acknowledged (RETRY is 300 s: none came back)")


def test_pipeline_between_two_queues_with_a_node_killed(
        spark: Any, own_trio: list[DisqProcess], tmp_path: Path) -> None:
    """queue "orders" -> upper(body) -> queue "invoices", the writer's key the source
    job's ID, a node killed mid-way: every order becomes one invoice, none twice."""
    nodes = own_trio
    total = 4000
    with Client(addrs(nodes)) as client:
        client.add_jobs("orders", [f"order-{i}".encode() for i in range(total)],
                        replicate=2, retry_ms=2000)
    victim, survivors = nodes[1], [nodes[0], nodes[2]]
    query = (spark.readStream.format("disq").option("nodes", nodes_option(nodes))
             .option("queue", "orders").option("max_jobs_per_batch", 500).load()
             .selectExpr("id", "upper(cast(body AS string)) AS body")
             .writeStream.format("disq").option("nodes", nodes_option(nodes))
             .option("queue", "invoices").option("key", "id").option("replicate", 2)
             .option("checkpointLocation", str(tmp_path / "chk")).start())
    try:
        wait_for(lambda: queued(nodes, "invoices") >= total // 4, timeout=120,
                 interval=0.05, message="the pipeline to be under way")
        victim.kill()
        wait_for(lambda: len(bodies_on(survivors, "invoices")) >= total, timeout=120,
                 message="every order through the pipeline")
        time.sleep(1)  # any duplicate on its way
    finally:
        query.stop()
    bodies = sorted(bodies_on(survivors, "invoices").values())
    assert len(bodies) == len(set(bodies)) == total, "an order missing or twice"
    assert bodies[0].startswith(b"ORDER-")
