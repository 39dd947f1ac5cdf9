"""disq_spark.write_jobs on local[2] against a real 3-node disq cluster: 100k rows are
exactly 100k jobs, also when a task fails half-way and Spark runs it again, and when
a disq node is killed during the write; bad rows are reported, not dropped."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from disq_client import Client
from disq_spark import write_jobs
from support import DisqProcess, call, wait_for

from .jobs import addrs, bodies_on, dedup_hits, queued

ROWS = 100_000


def test_100k_rows_become_100k_jobs(spark: Any, trio: list[DisqProcess]) -> None:
    df = spark.range(ROWS, numPartitions=6).selectExpr("concat('row-', id) AS body")
    result = write_jobs(df, "rows", addrs(trio), body="body", replicate=2)
    assert (result.added, result.bad_rows, result.partitions) == (ROWS, 0, 6)
    assert queued(trio, "rows") == ROWS
    # every node took its partitions as the first node (partition % 3)
    assert all(int(call(n, "QLEN", "rows")) > 0 for n in trio)  # type: ignore[arg-type]


def test_a_task_failing_once_still_gives_exactly_100k(spark: Any,
                                                      trio: list[DisqProcess]) -> None:
    def fail_once_half_way(index: int, rows: Any) -> Any:
        """The first attempt of partition 1's task fails once half its rows were sent
        (defined here: the workers get it by value, they cannot import this module)."""
        from pyspark import TaskContext

        rows = list(rows)
        attempt = TaskContext.get().attemptNumber()
        for n, row in enumerate(rows):
            if index == 1 and attempt == 0 and n == len(rows) // 2:
                raise RuntimeError("injected failure, first attempt")
            yield row

    rdd = (spark.range(ROWS, numPartitions=4).selectExpr("concat('row-', id) AS body").rdd
           .mapPartitionsWithIndex(fail_once_half_way))
    # the rows reach the data source's writer in Arrow batches of 1000 (not 10,000):
    # the first attempt writes some before the failure reaches its task
    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "1000")
    try:
        result = write_jobs(rdd, "retried", addrs(trio), body="body", replicate=2,
                            batch_size=500)
    finally:
        spark.conf.unset("spark.sql.execution.arrow.maxRecordsPerBatch")
    assert (result.added, result.bad_rows, result.partitions) == (ROWS, 0, 4)
    assert queued(trio, "retried") == ROWS
    # the failed attempt did send jobs before failing: the retry found them by key
    assert dedup_hits(trio) >= 1


def test_bad_rows_are_reported(spark: Any, trio: list[DisqProcess]) -> None:
    rows = [(f"ok-{i}",) for i in range(200)] + [(None,)] * 3 + [("x" * 5000,)] * 2
    df = spark.createDataFrame(rows, "body string").repartition(3)
    result = write_jobs(df, "bad", addrs(trio), body="body", max_body_bytes=4096)
    assert (result.added, result.bad_rows) == (200, 5)
    reasons = sorted({reason.split(" ")[0] for _, reason in result.bad_examples})
    assert reasons == ["body", "null"] and len(result.bad_examples) == 5
    assert queued(trio, "bad") == 200


def test_durations_in_ms(spark: Any, trio: list[DisqProcess]) -> None:
    """retry_ms and ttl_ms reach the jobs as whole seconds, rounded up; `retry`, which
    took seconds, is refused with the name of its replacement."""
    df = spark.range(20, numPartitions=2).selectExpr("concat('row-', id) AS body")
    result = write_jobs(df, "durations", addrs(trio), body="body", replicate=2,
                        retry_ms=60_500, ttl_ms=7_200_500)
    assert result.added == 20
    infos = []  # every copy, on every node
    for node in addrs(trio):
        with Client(node) as client:
            infos += client.jscan_info(queue="durations", count=100)
    assert len({i.id for i in infos}) == 20 and {i.retry_ms for i in infos} == {61_000}
    assert all(6_000_000 < i.ttl_ms <= 7_201_000 for i in infos)
    with pytest.raises(Exception, match=r"option 'retry' is gone: give retry_ms"):
        write_jobs(df, "durations", addrs(trio), body="body", retry=60)


def test_a_body_function_and_a_key_column(spark: Any, trio: list[DisqProcess]) -> None:
    df = spark.range(300, numPartitions=3).selectExpr("id", "id % 100 AS k")
    result = write_jobs(df, "keyed", addrs(trio), body=lambda row: {"id": row["id"]},
                        key="k", job_name="keyed-test")
    assert result.added == 300  # every row has its job: rows sharing a key share one
    assert queued(trio, "keyed") == 100
    again = write_jobs(df, "keyed", addrs(trio), body=lambda row: {"id": row["id"]},
                       key="k", job_name="keyed-test")
    assert again.added == 300 and queued(trio, "keyed") == 100  # a re-run adds nothing


def test_a_node_killed_during_the_write(spark: Any, own_trio: list[DisqProcess]) -> None:
    nodes = own_trio
    rows = 30_000
    victim = nodes[1]
    survivors = [nodes[0], nodes[2]]
    killed = threading.Event()

    def kill_when_under_way() -> None:
        try:
            wait_for(lambda: queued(nodes, "kill") >= rows // 5, timeout=120, interval=0.05,
                     message="the write to be under way")
        finally:
            victim.kill()
            killed.set()

    killer = threading.Thread(target=kill_when_under_way, daemon=True)
    killer.start()
    df = spark.range(rows, numPartitions=6).selectExpr("concat('row-', id) AS body")
    result = write_jobs(df, "kill", addrs(nodes), body="body", replicate=2, batch_size=250)
    assert killed.is_set(), "the node was not killed during the write"
    killer.join(timeout=10)
    # the victim's partitions went on on another node: by a resend of the batches in
    # flight, or, for a task that started after the kill, by its client connecting
    # elsewhere (test_partition_writer has the resend made certain)
    assert result.added == rows and result.bad_rows == 0
    jobs = bodies_on(survivors, "kill")
    bodies = sorted(jobs.values())
    assert len(bodies) == len(set(bodies)) == rows, "a row missing or added twice"
