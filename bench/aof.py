"""ADDJOB throughput with the AOF off, appendfsync everysec and always.

    python bench/aof.py [--runs 5] [--requests 800000] [--pipeline 16] [--no-auto-rewrite]
                        [--formats crc] [--clients 50]

Each run starts a fresh disq-server per case (`off`, `everysec`, `always`) in its own
empty directory, so every case writes a file from zero, runs
`redis-benchmark -c 50 -n <requests> -P <pipeline> -q ADDJOB q x 0` against it, and
stops it; the cases alternate inside each run. It prints the median req/s of each
case, the ratio of the medians to `off`, the median of the per-run ratios (each run
measures `off` next to the others), and the server's CPU time per ADDJOB (user + system,
all threads, from /proc: less sensitive than req/s to what else runs on the machine). Defaults otherwise: auto-aof-rewrite at 64 MB
and 100% growth, so a run that writes more than 64 MB (800000 ADDJOBs write 115 MB)
includes an automatic rewrite of the jobs held at that point, as in production;
`--no-auto-rewrite` measures appending alone. `--formats plain,crc,aes` runs each AOF
case in each of the file's formats: `plain` Disque's records
(`aof-checksum no`), `crc` CRC32C frames (the default), `aes` AES-256-GCM frames
(`aof-encryption-key-file`, a fresh key); the cases are then named `everysec-aes`...
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile

from common import redis_benchmark, start_disq, stop

FSYNC = {
    "everysec": ("--appendonly", "yes", "--appendfsync", "everysec"),
    "always": ("--appendonly", "yes", "--appendfsync", "always"),
}
FORMATS = {
    "plain": ("--aof-checksum", "no"),
    "crc": (),
    "aes": ("--aof-encryption-key-file", "KEY"),  # KEY: a key file made per run
}


def cases(formats: list[str]) -> dict[str, tuple[str, ...]]:
    """off, then each appendfsync policy in each format (named by the policy alone
    when only one format is measured)."""
    out: dict[str, tuple[str, ...]] = {"off": ()}
    for policy, flags in FSYNC.items():
        for fmt in formats:
            name = policy if len(formats) == 1 else f"{policy}-{fmt}"
            out[name] = flags + FORMATS[fmt]
    return out


def cpu_seconds(pid: int) -> float:
    """User + system time of a process, all its threads."""
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def one_case(args: argparse.Namespace, name: str, flags: tuple[str, ...], root: str,
             run: int) -> tuple[float, float]:
    workdir = os.path.join(root, f"{name}-{run}")
    os.makedirs(workdir)
    key = os.path.join(workdir, "aof.key")
    with open(key, "w") as fh:
        fh.write(os.urandom(32).hex())
    flags = tuple(key if flag == "KEY" else flag for flag in flags)
    extra: tuple[str, ...] = ()
    if args.no_auto_rewrite and name != "off":
        extra = ("--auto-aof-rewrite-percentage", "0")
    proc, port = start_disq(workdir, *flags, *extra)
    try:
        before = cpu_seconds(proc.pid)
        rps, _ = redis_benchmark(port, args.requests, args.pipeline, "ADDJOB", "q", "x", "0",
                                 clients=args.clients)
        cpu_us = (cpu_seconds(proc.pid) - before) * 1e6 / args.requests
    finally:
        stop(proc)
        aof = os.path.join(workdir, "disque.aof")
        size = os.path.getsize(aof) if os.path.exists(aof) else 0
        shutil.rmtree(workdir)
    print(f"run {run + 1} {name}: {rps:,.0f} req/s, {cpu_us:.2f} us CPU per ADDJOB "
          f"(AOF {size / 2**20:.1f} MiB)", file=sys.stderr)
    return rps, cpu_us


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--requests", type=int, default=800_000)
    parser.add_argument("--pipeline", type=int, default=16)
    parser.add_argument("--no-auto-rewrite", action="store_true",
                        help="auto-aof-rewrite-percentage 0 for the AOF cases")
    parser.add_argument("--formats", default="crc",
                        help="comma-separated: plain, crc, aes (the AOF file's format)")
    parser.add_argument("--clients", type=int, default=50, help="redis-benchmark -c")
    args = parser.parse_args()
    formats = args.formats.split(",")
    if not formats or any(fmt not in FORMATS for fmt in formats):
        sys.exit(f"--formats: a list of {', '.join(FORMATS)}")
    all_cases = cases(formats)
    if shutil.which("redis-benchmark") is None:
        sys.exit("redis-benchmark not found (Debian: apt-get install redis-tools)")
    results: dict[str, list[float]] = {name: [] for name in all_cases}
    cpu: dict[str, list[float]] = {name: [] for name in all_cases}
    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_DIR")) as root:
        for run in range(args.runs):
            for name, flags in all_cases.items():
                rps, cpu_us = one_case(args, name, flags, root, run)
                results[name].append(rps)
                cpu[name].append(cpu_us)
    off, off_cpu = results["off"], cpu["off"]
    print("| appendfsync | median req/s | ratio of medians | median of run ratios "
          "| CPU us per ADDJOB | CPU ratio (off / case) |")
    print("|---|---|---|---|---|---|")
    for name, values in results.items():
        ratios = [v / o for v, o in zip(values, off, strict=True)]
        cpu_ratios = [o / c for c, o in zip(cpu[name], off_cpu, strict=True)]
        print(f"| {name} | {statistics.median(values):,.0f} | "
              f"{statistics.median(values) / statistics.median(off):.2f} | "
              f"{statistics.median(ratios):.2f} | {statistics.median(cpu[name]):.2f} | "
              f"{statistics.median(cpu_ratios):.2f} |")
        print(f"{name}: run ratios " + " ".join(f"{r:.2f}" for r in ratios), file=sys.stderr)


if __name__ == "__main__":
    main()
