"""Spark → disq produce rate: `disq_spark.write_jobs` of `--rows` generated rows into a
cluster of `--nodes` local disq nodes with REPLICATE `--replicate`, on local[2].

    python -m bench.spark_produce [--rows 1000000] [--runs 3] [--partitions 6]
                                  [--replicate 2] [--batch-size 1000] [--pipeline 2]
                                  [--no-dedup] [--async]

Each run starts fresh disq nodes (bench/servers.py), writes
`spark.range(rows).selectExpr("concat('row-', id) AS body")` with write_jobs, checks
that the nodes queued exactly `rows` jobs, and stops them. One SparkSession serves
every run; its start and a 20,000-row warm-up write per run (the same path: Arrow
batches, the same options) are not timed. Prints each run's jobs/s and the median, and
where the CPU went: each disq node's (INFO cpu) and Spark's (the JVM and its Python
workers, this process's descendants, from /proc), against the wall time × the cores.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from bench.servers import command, start_disq

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
WARM_UP_ROWS = 20_000


def _children_cpu(root: int, exclude: list[int]) -> float:
    """CPU seconds (user + system) of every live descendant of `root`, but those of
    the `exclude` processes (the disq nodes, children of this process too)."""
    parent: dict[int, int] = {}
    cpu: dict[int, float] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        parent[int(entry)] = int(fields[1])
        cpu[int(entry)] = (int(fields[11]) + int(fields[12])) / CLOCK_TICKS
    total = 0.0
    for pid, seconds in cpu.items():
        if pid in exclude:
            continue
        p = parent.get(pid)
        while p is not None and p > 1 and p not in exclude:
            if p == root:
                total += seconds
                break
            p = parent.get(p)
    return total


def _info(address: tuple[str, int], section: str) -> dict[str, str]:
    """A node's INFO `section` as field -> value."""
    info = command(address, "INFO", section)
    text = info.decode() if isinstance(info, bytes) else str(info)
    return dict(line.split(":", 1) for line in text.splitlines() if ":" in line)


def _node_cpu(address: tuple[str, int]) -> float:
    values = _info(address, "cpu")
    return float(values["used_cpu_user"]) + float(values["used_cpu_sys"])


def one_run(spark, args: argparse.Namespace, workdir: Path) -> dict[str, float]:  # type: ignore[no-untyped-def]
    from disq_spark import write_jobs

    servers = start_disq(args.nodes, workdir)
    try:
        nodes = [f"{h}:{p}" for h, p in servers.addresses]
        df = spark.range(args.rows, numPartitions=args.partitions) \
            .selectExpr("concat('row-', id) AS body")
        # warm-up, not timed, through the same path (Arrow batches): the Python
        # workers start and import, the JVM compiles
        warm_up = spark.range(WARM_UP_ROWS, numPartitions=args.partitions) \
            .selectExpr("concat('warm-up-', id) AS body")
        write_jobs(warm_up, "warm-up", nodes, body="body", replicate=args.replicate,
                   batch_size=args.batch_size, pipeline=args.pipeline,
                   dedup=not args.no_dedup, async_=args.async_)
        node_cpu = [_node_cpu(a) for a in servers.addresses]
        spark_cpu = _children_cpu(os.getpid(), servers.pids)
        start = time.perf_counter()
        result = write_jobs(df, "spark", nodes, body="body", replicate=args.replicate,
                            batch_size=args.batch_size, pipeline=args.pipeline,
                            dedup=not args.no_dedup, async_=args.async_)
        wall = time.perf_counter() - start
        spark_cpu = _children_cpu(os.getpid(), servers.pids) - spark_cpu
        node_cpu = [_node_cpu(a) - c for a, c in zip(servers.addresses, node_cpu, strict=True)]
        queued = sum(int(command(a, "QLEN", "spark")) for a in servers.addresses)
        if result.added != args.rows or (queued != args.rows and not args.async_):
            raise SystemExit(f"wrong count: added {result.added}, queued {queued}")
        return {"wall": wall, "rate": args.rows / wall, "spark_cpu": spark_cpu,
                "node_cpu": sum(node_cpu), "retries": result.retries}
    finally:
        servers.stop()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--nodes", type=int, default=3)
    parser.add_argument("--partitions", type=int, default=6)
    parser.add_argument("--replicate", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=1000)
    parser.add_argument("--pipeline", type=int, default=2)
    parser.add_argument("--no-dedup", action="store_true")
    parser.add_argument("--async", dest="async_", action="store_true")
    parser.add_argument("--master", default="local[2]")
    args = parser.parse_args(argv)

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    spark = (SparkSession.builder.master(args.master).appName("disq-spark-bench")
             .config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    runs = []
    try:
        for i in range(args.runs):
            with tempfile.TemporaryDirectory(prefix="disq-spark-bench-") as tmp:
                run = one_run(spark, args, Path(tmp))
            runs.append(run)
            print(f"run {i + 1}: {run['rate']:,.0f} jobs/s ({run['wall']:.1f} s; CPU s: "
                  f"disq nodes {run['node_cpu']:.1f}, Spark JVM + Python workers "
                  f"{run['spark_cpu']:.1f}, of {run['wall'] * os.cpu_count():.1f} available; "
                  f"retries {run['retries']:.0f})", flush=True)
    finally:
        spark.stop()
    rates = [r["rate"] for r in runs]
    print(f"median: {statistics.median(rates):,.0f} jobs/s over {len(runs)} runs "
          f"({args.rows:,} rows, {args.nodes} nodes, REPLICATE {args.replicate}, "
          f"{args.master}, {args.partitions} partitions, batch {args.batch_size}, "
          f"pipeline {args.pipeline}, dedup {'off' if args.no_dedup else 'on'}"
          f"{', ASYNC' if args.async_ else ''})")


if __name__ == "__main__":
    main()
