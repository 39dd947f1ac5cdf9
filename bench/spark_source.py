"""disq as a Spark data source: four figures in one run, on local[2] with
`--nodes` local disq nodes and REPLICATE `--replicate`.

    python -m bench.spark_source [--rows 1000000] [--files 12] [--body-bytes 100]
                                 [--max-jobs-per-batch 100000] [--ack ackjob]

1. batch write: `spark.read.parquet(...)` written with `df.write.format("disq")`
   (DEDUP keys: the default), 3 fresh nodes;
2. streaming write: the same files read with `readStream` (`--files-per-trigger` files
   a micro-batch, default half of them) and written with `writeStream.format("disq")`,
   `trigger(availableNow=True)`, 3 fresh nodes;
3. streaming read + ack: those jobs read with `readStream.format("disq")` into the
   `noop` sink, `trigger(availableNow=True)`: every job taken, and acknowledged at its
   batch's commit; the nodes must hold none at the end;
4. memory: the peak memory of each kind of Python process Spark ran meanwhile (sampled
   every 50 ms from /proc, its private memory: resident, not shared with the process it
   was forked from): the executors' workers (the tasks), and the driver's workers
   (the streaming source's process, which holds a micro-batch's jobs).

The dataset (`--rows` rows of `--body-bytes` bytes in `--files` Parquet files, one
partition each) is written first and not timed, nor is the SparkSession's start and a
20,000-row warm-up before each figure, of its own kind (a batch write, a streaming
write, a streaming read of the warm-up's jobs), on the same fresh nodes. Each figure
checks its count (jobs queued, or jobs left).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.servers import Servers, command, start_disq
from bench.spark_produce import _children_cpu, _info, _node_cpu


def _python_workers(root: int) -> dict[int, tuple[str, int]]:
    """The Python processes below `root` (Spark's workers): pid -> (kind, private
    bytes: resident and not shared, so a worker forked from Spark's daemon does not
    count the modules it shares with it).
    kind: "source" for the streaming source's driver-side process, "worker" else."""
    parent: dict[int, int] = {}
    info: dict[int, tuple[str, int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        pid = int(entry)
        try:
            with open(f"/proc/{pid}/stat") as f:
                parent[pid] = int(f.read().rsplit(")", 1)[1].split()[1])
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
            with open(f"/proc/{pid}/smaps_rollup") as f:  # its own pages: not those
                resident = sum(int(line.split()[1]) * 1024 for line in f  # shared with
                               if line.startswith(("Private_Clean", "Private_Dirty")))
        except OSError:
            continue
        text = b" ".join(argv)
        if b"python" not in argv[0] or b"pyspark" not in text:  # not the JVM, nor the
            continue  # disq nodes (children of this process too)
        kind = "source" if b"python_streaming_source_runner" in text else "worker"
        info[pid] = (kind, resident)
    out = {}
    for pid, value in info.items():
        p = parent.get(pid)
        while p is not None and p > 1:
            if p == root:
                out[pid] = value
                break
            p = parent.get(p)
    return out


class PeakMemory:
    """Samples the private memory of Spark's Python processes while a figure runs."""

    def __init__(self) -> None:
        self.peak: dict[str, int] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        root = os.getpid()
        while not self._stop.wait(0.05):
            for kind, resident in _python_workers(root).values():
                self.peak[kind] = max(self.peak.get(kind, 0), resident)

    def __enter__(self) -> PeakMemory:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def _registered(servers: Servers) -> int:
    """The jobs the nodes hold, each copy counted."""
    return sum(int(_info(a, "jobs")["registered_jobs"]) for a in servers.addresses)


def _timed(servers: Servers, run: Callable[[], None]) -> dict[str, Any]:
    """Run one figure: wall time, CPU of the nodes and of Spark, peak memory, and the
    copies the nodes took meanwhile (more than REPLICATE a job: ADDJOBs that waited
    over 50 ms for their copies, which then go to one more node)."""
    node_cpu = [_node_cpu(a) for a in servers.addresses]
    spark_cpu = _children_cpu(os.getpid(), servers.pids)
    copies = _registered(servers)
    with PeakMemory() as memory:
        start = time.perf_counter()
        run()
        wall = time.perf_counter() - start
    return {"wall": wall, "peak": memory.peak,
            "spark_cpu": _children_cpu(os.getpid(), servers.pids) - spark_cpu,
            "node_cpu": sum(_node_cpu(a) - c
                            for a, c in zip(servers.addresses, node_cpu, strict=True)),
            "copies": _registered(servers) - copies}


def _queued(servers: Servers, queue: str) -> int:
    return sum(int(command(a, "QLEN", queue)) for a in servers.addresses)


def _held(servers: Servers, queue: str) -> int:
    """Jobs of `queue` the nodes still hold, in any state but acknowledged."""
    total = 0
    for address in servers.addresses:
        cursor = b"0"
        while True:
            cursor, ids = command(address, "JSCAN", cursor, "COUNT", 10000, "QUEUE", queue,
                                  "STATE", "queued", "STATE", "active")
            total += len(ids)
            if cursor == b"0":
                break
    return total


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--files", type=int, default=12)
    parser.add_argument("--files-per-trigger", type=int, default=0)
    parser.add_argument("--body-bytes", type=int, default=100)
    parser.add_argument("--nodes", type=int, default=3)
    parser.add_argument("--replicate", type=int, default=2)
    parser.add_argument("--max-jobs-per-batch", type=int, default=100_000)
    parser.add_argument("--ack", default="ackjob", choices=("ackjob", "fastack"))
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--batch-size", type=int, default=1000,
                        help="the writer's batch_size option (ADDJOBs per write)")
    parser.add_argument("--pipeline", type=int, default=2,
                        help="the writer's pipeline option (writes in flight per task)")
    args = parser.parse_args(argv)
    per_trigger = args.files_per_trigger or max(args.files // 2, 1)

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    root = Path(__file__).resolve().parent.parent  # this process and Spark's workers
    ours = [str(root / "spark"), str(root / "clients" / "python"), str(root)]  # import
    sys.path[:0] = ours  # this checkout's disq_spark and disq_client
    os.environ["PYTHONPATH"] = os.pathsep.join(
        ours + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])
    from disq_spark import register
    from pyspark.sql import SparkSession

    spark = (SparkSession.builder.master(args.master).appName("disq-source-bench")
             .config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false")
             # one partition per file, batch and streaming alike
             .config("spark.sql.files.openCostInBytes", str(1 << 30))
             .config("spark.sql.files.maxPartitionBytes", str(1 << 30))
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    figures: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="disq-source-bench-") as tmp:
        data = str(Path(tmp) / "rows")
        (spark.range(args.rows, numPartitions=args.files)
         .selectExpr(f"rpad(concat('row-', id, '-'), {args.body_bytes}, 'x') AS body")
         .write.parquet(data))

        def options(writer: Any, nodes: list[str], queue: str) -> Any:
            return (writer.format("disq").option("nodes", ",".join(nodes))
                    .option("queue", queue).option("replicate", args.replicate)
                    .option("batch_size", args.batch_size).option("pipeline", args.pipeline))

        warm_data = str(Path(tmp) / "warm-rows")
        (spark.range(20_000, numPartitions=args.files)
         .selectExpr(f"rpad(concat('warm-', id, '-'), {args.body_bytes}, 'x') AS body")
         .write.parquet(warm_data))

        def fresh_nodes(name: str, stream: bool = False) -> tuple[Servers, list[str]]:
            """New nodes, and a 20,000-row write to them of the kind timed next (batch,
            or a streaming query of two micro-batches), not timed: the Python workers
            start and import, the JVM compiles that path (a first streaming query
            costs ~2-3 s more than the next ones in one application)."""
            servers = start_disq(args.nodes, Path(tmp) / name)
            nodes = [f"{h}:{p}" for h, p in servers.addresses]
            try:
                if stream:
                    source = (spark.readStream.schema("body string")
                              .option("maxFilesPerTrigger", per_trigger).parquet(warm_data))
                    (options(source.writeStream, nodes, "warm-up")
                     .option("checkpointLocation", str(Path(tmp) / f"chk-warm-{name}"))
                     .trigger(availableNow=True).start().awaitTermination())
                else:
                    options(spark.read.parquet(warm_data).write.mode("append"), nodes,
                            "warm-up").save()
            except BaseException:
                servers.stop()
                raise
            return servers, nodes

        # 1. batch write
        servers, nodes = fresh_nodes("batch")
        try:
            figures["batch write"] = _timed(servers, lambda: options(
                spark.read.parquet(data).write.mode("append"), nodes, "batch").save())
            if _queued(servers, "batch") != args.rows:
                raise SystemExit(f"batch write: {_queued(servers, 'batch')} jobs queued")
        finally:
            servers.stop()

        # 2. streaming write, 3. streaming read + ack
        servers, nodes = fresh_nodes("stream", stream=True)
        try:
            def stream_write() -> None:
                source = (spark.readStream.schema("body string")
                          .option("maxFilesPerTrigger", per_trigger).parquet(data))
                query = (options(source.writeStream, nodes, "stream")
                         .option("checkpointLocation", str(Path(tmp) / "chk-write"))
                         .trigger(availableNow=True).start())
                query.awaitTermination()

            figures["streaming write"] = _timed(servers, stream_write)
            if _queued(servers, "stream") != args.rows:
                raise SystemExit(f"streaming write: {_queued(servers, 'stream')} jobs queued")

            def stream_read(queue: str = "stream") -> None:
                query = (spark.readStream.format("disq").option("nodes", ",".join(nodes))
                         .option("queue", queue).option("ack", args.ack)
                         .option("max_jobs_per_batch", args.max_jobs_per_batch).load()
                         .writeStream.format("noop")
                         .option("checkpointLocation", str(Path(tmp) / f"chk-read-{queue}"))
                         .trigger(availableNow=True).start())
                query.awaitTermination()

            stream_read("warm-up")  # the warm-up write's 20,000 jobs, not timed
            figures["streaming read + ack"] = _timed(servers, stream_read)
            left = _held(servers, "stream")
            if left:
                raise SystemExit(f"streaming read: {left} jobs not acknowledged")
        finally:
            servers.stop()
    spark.stop()

    cores = os.cpu_count() or 1
    for name, f in figures.items():
        peak = ", ".join(f"{kind} {size / 2**20:.0f} MiB" for kind, size in
                         sorted(f["peak"].items()))
        print(f"{name}: {args.rows / f['wall']:,.0f} jobs/s ({f['wall']:.1f} s; CPU s: disq "
              f"nodes {f['node_cpu']:.1f}, Spark {f['spark_cpu']:.1f}, of "
              f"{f['wall'] * cores:.1f}; peak private memory of Spark's Python processes: {peak}"
              + (f"; copies a job {f['copies'] / args.rows:.3f})" if "write" in name else ")"))
    batch, stream = (args.rows / figures[k]["wall"] for k in ("batch write", "streaming write"))
    print(f"streaming write / batch write: {stream / batch:.2f} ({args.rows:,} rows of "
          f"{args.body_bytes} B, {args.files} files, {per_trigger} a trigger; {args.nodes} "
          f"nodes, REPLICATE {args.replicate}, {args.master}, max_jobs_per_batch "
          f"{args.max_jobs_per_batch}, ack {args.ack})")


if __name__ == "__main__":
    main()
