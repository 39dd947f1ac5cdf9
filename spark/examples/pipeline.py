"""A data pipeline end to end with disq as a Spark data source: generate a Parquet
dataset of orders; write the orders worth invoicing as jobs (a batch write,
`df.write.format("disq")`); a streaming query reads them (`readStream.format("disq")`),
computes each invoice and writes it to another queue (`writeStream.format("disq")`,
the order job's ID as the key: one invoice per order however often an order is
delivered); Python-client workers consume and acknowledge the invoices. Counts and
rates at the end.

    python spark/examples/pipeline.py                      # starts 3 local disq nodes
    python spark/examples/pipeline.py --rows 1000000 --nodes 127.0.0.1:7711,127.0.0.1:7712
    python spark/examples/pipeline.py --master spark://host:7077 --nodes ...   # a cluster

Without --nodes the example starts three disq nodes on 127.0.0.1 ports 17711-17713
(--base-port) in a temporary directory (`python -m disq`), joins them, and stops them at the end.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from disq_client import Client, Job, Worker
from disq_spark import register

ORDERS, INVOICES = "orders", "invoices"


# -- disq nodes for the example ---------------------------------------------------------
def _wait(condition, timeout: float, what: str) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        time.sleep(0.05)


def _answers(port: int) -> bool:
    try:
        with Client(f"127.0.0.1:{port}", timeout_ms=1000) as c:
            return c.ping() == "PONG"
    except Exception:
        return False


@contextmanager
def local_cluster(base_port: int, size: int = 3) -> Iterator[list[str]]:
    """`size` disq nodes started here on `base_port`, `base_port + 1`... (their bus on
    port + 10000), joined into one cluster, stopped at the end."""
    procs: list[subprocess.Popen[bytes]] = []
    with tempfile.TemporaryDirectory(prefix="disq-example-") as base:
        try:
            ports = []
            for i in range(size):
                port = base_port + i
                workdir = Path(base) / f"n{i}"
                workdir.mkdir()
                procs.append(subprocess.Popen(
                    [sys.executable, "-m", "disq", "--port", str(port), "--dir", str(workdir)],
                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=workdir))
                ports.append(port)
            for proc, port in zip(procs, ports, strict=True):
                _wait(lambda: proc.poll() is not None or _answers(port), 15,  # noqa: B023
                      f"disq on port {port}")
                if proc.poll() is not None:
                    raise RuntimeError(f"disq on port {port} exited: port in use?")
            with Client(f"127.0.0.1:{ports[0]}") as c:
                for port in ports[1:]:
                    c.execute_command("CLUSTER", "MEET", "127.0.0.1", port)

            def formed() -> bool:
                for port in ports:
                    with Client(f"127.0.0.1:{port}") as c:
                        if len(c.hello().nodes) != size:
                            return False
                return True

            _wait(formed, 15, "the cluster to form")
            yield [f"127.0.0.1:{p}" for p in ports]
        finally:
            for proc in procs:
                proc.terminate()
            for proc in procs:
                proc.wait(10)


# -- the dataset ------------------------------------------------------------------------
def generate(spark, path: str, rows: int, partitions: int) -> None:  # type: ignore[no-untyped-def]
    """Orders: id, customer, country, amount in cents, written as Parquet."""
    (spark.range(rows, numPartitions=partitions)
     .selectExpr("id AS order_id",
                 "concat('customer-', id % 9973) AS customer",
                 "element_at(array('FR', 'DE', 'IT', 'ES', 'NL'), int(id % 5) + 1) AS country",
                 "int((id * 7919) % 100000) AS amount_cents")
     .write.mode("overwrite").parquet(path))


def to_invoice(df):  # type: ignore[no-untyped-def]
    """Orders worth invoicing (at least 1.00), as the JSON body of a job each."""
    from pyspark.sql import functions as F

    return (df.where(F.col("amount_cents") >= 100)
            .select(F.to_json(F.struct("order_id", "customer", "country", "amount_cents"))
                    .alias("body")))


def invoices(jobs):  # type: ignore[no-untyped-def]
    """The streaming step: an order job (its JSON body) -> its invoice, with VAT; the
    order job's ID goes along, as the invoice's key."""
    from pyspark.sql import functions as F

    order = F.from_json(F.col("body").cast("string"),
                        "order_id long, customer string, country string, amount_cents long")
    vat = F.when(F.col("o.country") == "FR", 0.20).when(F.col("o.country") == "DE", 0.19) \
        .otherwise(0.21)
    return (jobs.select("id", order.alias("o"))
            .withColumn("total_cents", (F.col("o.amount_cents") * (1 + vat)).cast("long"))
            .select("id", F.to_json(F.struct("o.order_id", "o.customer", "o.country",
                                             "o.amount_cents", "total_cents")).alias("body")))


# -- the consumers ----------------------------------------------------------------------
def consume(node: str, done: mp.Value, stop: mp.Event) -> None:  # type: ignore[valid-type]
    """One worker process: parse each order and acknowledge it."""
    worker = Worker(node, concurrency=16, poll_ms=200)

    @worker.task(INVOICES)
    async def invoice(job: Job) -> None:  # a coroutine: runs on the worker's loop
        order = json.loads(job.body)
        assert order["total_cents"] >= order["amount_cents"]
        with done.get_lock():  # type: ignore[attr-defined]
            done.value += 1  # type: ignore[attr-defined]

    threading.Thread(target=lambda: (stop.wait(), worker.stop()), daemon=True).start()
    worker.run(install_signal_handlers=False)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--nodes", help="host:port,... (default: start 3 local nodes)")
    parser.add_argument("--base-port", type=int, default=17711,
                        help="without --nodes: the local nodes' first port")
    parser.add_argument("--master", default="local[*]")
    parser.add_argument("--replicate", type=int, default=2)
    parser.add_argument("--workers", type=int, default=3, help="consumer processes")
    parser.add_argument("--data", help="dataset directory (default: a temporary one)")
    args = parser.parse_args(argv)

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    spark = (SparkSession.builder.master(args.master).appName("disq-pipeline-example")
             .config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false").getOrCreate())
    spark.sparkContext.setLogLevel("WARN")
    register(spark)
    cluster = local_cluster(args.base_port) if not args.nodes else None
    try:
        nodes = cluster.__enter__() if cluster else args.nodes.split(",")
        with tempfile.TemporaryDirectory(prefix="disq-orders-") as tmp:
            path = args.data or str(Path(tmp) / "orders.parquet")
            t0 = time.monotonic()
            generate(spark, path, args.rows, args.partitions)
            t1 = time.monotonic()

            # 1. a batch write: one job per order worth invoicing
            stats = str(Path(tmp) / "stats.jsonl")
            (to_invoice(spark.read.parquet(path)).write.format("disq").mode("append")
             .option("nodes", ",".join(nodes)).option("queue", ORDERS)
             .option("replicate", args.replicate).option("stats_file", stats).save())
            with open(stats) as lines:
                orders = json.loads(lines.read().splitlines()[-1])["added"]
            t2 = time.monotonic()

            ctx = mp.get_context("spawn")  # no fork of a process that runs a JVM gateway
            done = ctx.Value("q", 0)
            stop = ctx.Event()
            workers = [ctx.Process(target=consume, args=(nodes[i % len(nodes)], done, stop))
                       for i in range(args.workers)]
            for w in workers:
                w.start()

            # 2. a streaming query: orders -> invoices, each invoice keyed by its order
            # job's ID; availableNow: what is queued now, then it stops
            jobs = (spark.readStream.format("disq").option("nodes", ",".join(nodes))
                    .option("queue", ORDERS).option("max_jobs_per_batch", 50_000).load())
            query = (invoices(jobs).writeStream.format("disq")
                     .option("nodes", ",".join(nodes)).option("queue", INVOICES)
                     .option("key", "id").option("replicate", args.replicate)
                     .option("checkpointLocation", str(Path(tmp) / "checkpoint"))
                     .trigger(availableNow=True).start())
            query.awaitTermination()
            t3 = time.monotonic()
            _wait(lambda: done.value >= orders, 600, "the workers to finish")
            t4 = time.monotonic()
            stop.set()
            for w in workers:
                w.join(30)
    finally:
        if cluster:
            cluster.__exit__(None, None, None)
        spark.stop()

    print(f"dataset:   {args.rows} orders written as Parquet in {t1 - t0:.1f} s")
    print(f"write:     {orders} orders to invoice written as jobs in {t2 - t1:.1f} s "
          f"({orders / max(t2 - t1, 1e-9):,.0f} jobs/s, read + filter + write)")
    print(f"stream:    {orders} orders read, invoiced and written as jobs, orders "
          f"acknowledged, in {t3 - t2:.1f} s ({orders / max(t3 - t2, 1e-9):,.0f} jobs/s)")
    print(f"consume:   {done.value} invoices acked by {args.workers} workers, all done "
          f"{t4 - t2:.1f} s after the stream started")


if __name__ == "__main__":
    main()
