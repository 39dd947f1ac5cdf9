"""Single-node figures: ADDJOB vs redis-server's RPUSH, and memory per queued job.

    python bench/single_node.py [--runs 5] [--requests 200000] [--memory-jobs 1000000]

Starts redis-server (the reference, as a list queue) and disq-server on free loopback
ports, runs redis-benchmark against both, alternating, `--runs` times, and prints the
medians and ratios as a Markdown table. Then fills a fresh disq node with
`--memory-jobs` queued jobs with 100-byte bodies and reports RSS per job beyond the
bodies. Needs redis-server and redis-benchmark on PATH (Debian: redis-server,
redis-tools).
"""

from __future__ import annotations

import argparse
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time

from common import redis_benchmark, rss, start_disq, start_redis, stop

BODY_SIZE = 100


def fill(port: int, jobs: int, batch: int = 1000) -> None:
    """Pipelined ADDJOBs with distinct 100-byte bodies, reading every reply."""
    with socket.create_connection(("127.0.0.1", port)) as s:
        sent = 0
        while sent < jobs:
            n = min(batch, jobs - sent)
            parts = []
            for i in range(sent, sent + n):
                body = (b"%012d" % i) * (BODY_SIZE // 12) + b"x" * (BODY_SIZE % 12)
                parts.append(b"*4\r\n$6\r\nADDJOB\r\n$5\r\nqueue\r\n$%d\r\n%s\r\n$1\r\n0\r\n"
                             % (len(body), body))
            s.sendall(b"".join(parts))
            need, data = n, b""
            while need:
                chunk = s.recv(1 << 20)
                if not chunk:
                    raise RuntimeError("server closed the connection")
                data += chunk
                lines = data.count(b"\r\n")
                if lines >= need:
                    if b"-" in data[:1] or b"\r\n-" in data:
                        raise RuntimeError(f"error reply: {data[:200]!r}")
                    need = 0
            sent += n


def info_field(port: int, field: str) -> str:
    with socket.create_connection(("127.0.0.1", port)) as s:
        s.sendall(b"INFO\r\n")
        data = b""
        while not data.endswith(b"\r\n\r\n") or data.count(b"\r\n") < 3:
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
            if b"# CPU" in data and data.endswith(b"\r\n"):
                break
    for line in data.decode().splitlines():
        if line.startswith(field + ":"):
            return line.split(":", 1)[1]
    return ""


def throughput(args: argparse.Namespace, workdir: str) -> list[str]:
    cases = []
    for pipeline in args.pipelines:
        suffix = f" (-P {pipeline})" if pipeline > 1 else ""
        cases.append(("RPUSH q x" + suffix, "redis", pipeline, ["RPUSH", "q", "x"]))
        cases.append(("ADDJOB q x 0" + suffix, "disq", pipeline, ["ADDJOB", "q", "x", "0"]))
    results: dict[str, list[tuple[float, float]]] = {name: [] for name, *_ in cases}
    redis_proc, redis_port = start_redis(workdir)
    disq_proc, disq_port = start_disq(workdir)
    try:
        for run in range(args.runs):
            for name, system, pipeline, command in cases:
                port = redis_port if system == "redis" else disq_port
                requests = args.requests * (4 if pipeline > 1 else 1)
                results[name].append(redis_benchmark(port, requests, pipeline, *command))
                print(f"run {run + 1} {name}: {results[name][-1][0]:.0f} req/s",
                      file=sys.stderr)
            # keep memory flat between runs
            subprocess.run(["redis-cli", "-p", str(disq_port), "DEBUG", "FLUSHALL"],
                           capture_output=True)
            subprocess.run(["redis-cli", "-p", str(redis_port), "DEL", "q"],
                           capture_output=True)
    finally:
        stop(disq_proc)
        stop(redis_proc)
    med = {name: (statistics.median(r for r, _ in v), statistics.median(p for _, p in v))
           for name, v in results.items()}
    # Each run measures the reference and disq back to back: the median of the per-run
    # ratios is less sensitive to the machine's drift than the ratio of the medians.
    rows = ["| command | median req/s | median p50 ms | ratio of medians | median of run "
            "ratios |", "|---|---|---|---|---|"]
    for name, system, pipeline, _ in cases:
        ref = "RPUSH q x" + (f" (-P {pipeline})" if pipeline > 1 else "")
        ratio = med[name][0] / med[ref][0]
        run_ratios = statistics.median(
            r / ref_r for (r, _), (ref_r, _) in zip(results[name], results[ref], strict=True))
        rows.append(f"| {name} | {med[name][0]:,.0f} | {med[name][1]:.3f} | {ratio:.2f} "
                    f"| {run_ratios:.2f} |")
        if system == "disq":
            print(f"{name}: run ratios " + " ".join(
                f"{r / ref_r:.2f}" for (r, _), (ref_r, _) in
                zip(results[name], results[ref], strict=True)), file=sys.stderr)
    return rows


def memory(args: argparse.Namespace, workdir: str) -> list[str]:
    proc, port = start_disq(workdir)
    try:
        before = rss(proc.pid)
        start = time.monotonic()
        fill(port, args.memory_jobs)
        elapsed = time.monotonic() - start
        time.sleep(0.5)
        after = rss(proc.pid)
        qlen = info_field(port, "registered_jobs")
    finally:
        stop(proc)
    per_job = (after - before) / args.memory_jobs
    return [
        "| queued jobs | body | RSS before | RSS after | bytes/job | beyond body | fill rate |",
        "|---|---|---|---|---|---|---|",
        f"| {int(qlen):,} | {BODY_SIZE} B | {before / 2**20:.1f} MiB | {after / 2**20:.1f} MiB "
        f"| {per_job:.0f} | {per_job - BODY_SIZE:.0f} | {args.memory_jobs / elapsed:,.0f} jobs/s |",
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--requests", type=int, default=200_000)
    parser.add_argument("--memory-jobs", type=int, default=1_000_000)
    parser.add_argument("--pipelines", type=lambda text: [int(p) for p in text.split(",")],
                        default=[1, 16], help="comma-separated -P values (default 1,16)")
    parser.add_argument("--skip-throughput", action="store_true")
    parser.add_argument("--skip-memory", action="store_true")
    args = parser.parse_args()
    for tool in ("redis-server", "redis-benchmark", "redis-cli"):
        if shutil.which(tool) is None:
            sys.exit(f"{tool} not found (Debian: apt-get install redis-server redis-tools)")
    with tempfile.TemporaryDirectory() as workdir:
        if not args.skip_throughput:
            print("\n".join(throughput(args, workdir)))
            print()
        if not args.skip_memory:
            print("\n".join(memory(args, workdir)))


if __name__ == "__main__":
    main()
