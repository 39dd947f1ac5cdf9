"""Scale-out: N nodes of disq beside N of antirez's Disque, one redis-benchmark per node
at once, ADDJOB REPLICATE 2 and 3: jobs/s of the cluster and its CPU per job.

    python -m bench.scale_out [--nodes 2,3,4] [--replicate 2,3] [--rounds 3]
        [--requests 100000] [--pipeline 16] [--before DIR] [--disq-src DIR] [--no-disque]
    python -m bench.scale_out --nodes 2 --replicate 2 --rounds 1 --requests 5000  (a smoke run)

For each N (default 2 up to half the cores, at least 2,3,4 and at most 8: each node and
each load generator wants a core of its own for the jobs/s to scale) and each REPLICATE
R <= N, a round starts N fresh nodes of each system in turn, joined by CLUSTER MEET,
runs one `redis-benchmark -c 50 -P 16 -n REQUESTS ADDJOB q x 0 REPLICATE R` against each
node at the same time, and stops them (by PID). Per system: jobs/s of the whole cluster
(all the requests over the time from the first benchmark started to the last one done)
and per node, and the CPU per job (user + system of every node process, from /proc,
over all the jobs). The order of the systems is reversed every other round; a figure is
the median of the rounds and a ratio the median of the rounds' ratios (each round
measures the systems back to back).

Two checkouts: `--before DIR` adds the disq of another checkout (`git worktree add
--detach /tmp/before REV`) as a third system, alternated with the others, and the report
gives after ÷ before (the after being `--disq-src`, default this checkout): a refactor
shows it is not slower on several nodes. `--no-disque` leaves Disque out.

On a machine with fewer cores than nodes plus load generators, jobs/s measure the
scheduler more than the code: the CPU per job and the ratios are what to compare there.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from . import disque
from . import servers as srv
from .common import redis_benchmark_summary
from .load import cpu_seconds
from .report import write_json
from .vs_disque import begin, commit, report, run_in

OUT = srv.ROOT / "bench" / "out"
LABELS = {"disq": "disq", "disque": "Disque", "before": "before"}


def default_nodes(cores: int | None = None) -> list[int]:
    """2 up to half the cores (a node and its load generator each), within 4..8."""
    top = max(4, min(8, (cores or os.cpu_count() or 2) // 2))
    return list(range(2, top + 1))


def measure(servers: srv.Servers, replicate: int, requests: int,
            pipeline: int) -> dict[str, float]:
    """One redis-benchmark per node, all at once; the cluster's figures."""
    command = ["ADDJOB", "q", "x", "0", "REPLICATE", str(replicate)]
    ports = [port for _, port in servers.addresses]
    load_before = os.getloadavg()[0]
    cpu0 = sum(cpu_seconds(pid) for pid in servers.pids)
    start = time.perf_counter()
    with ThreadPoolExecutor(len(ports)) as pool:
        summaries = list(pool.map(
            lambda port: redis_benchmark_summary(port, requests, pipeline, *command),
            ports))
    seconds = time.perf_counter() - start
    cpu = sum(cpu_seconds(pid) for pid in servers.pids) - cpu0
    jobs = requests * len(ports)
    return {"value": jobs / seconds, "per_node": jobs / seconds / len(ports),
            "cpu_us_per_job": 1e6 * cpu / jobs, "seconds": seconds,
            "p99_ms": max(s["p99"] for s in summaries), "load": load_before}


def start(system: str, nodes: int, where: Path, args: argparse.Namespace,
          disque_bin: Path | None) -> srv.Servers:
    if system == "disque":
        assert disque_bin is not None
        return srv.start_disque(nodes, where, disque_bin)
    return srv.start_disq(nodes, where, src=args.before if system == "before"
                          else args.disq_src)


def run(args: argparse.Namespace, disque_bin: Path | None, workdir: Path,
        result: dict[str, Any]) -> None:
    """Every (N, R) in turn, its rounds alternating the systems."""
    systems = ["disq"] + (["disque"] if disque_bin else []) + (["before"] if args.before
                                                                else [])
    samples: dict[str, dict[str, list[dict[str, float]]]] = result["samples"]
    count = 0
    for nodes in args.nodes:
        for replicate in (r for r in args.replicate if r <= nodes):
            key = f"{nodes}x R{replicate}"
            samples[key] = {system: [] for system in systems}
            for r in range(args.rounds):
                for system in (systems if r % 2 == 0 else systems[::-1]):
                    count += 1
                    servers = start(system, nodes, workdir / f"{count:04d}-{system}", args,
                                    disque_bin)
                    try:
                        figures = measure(servers, replicate, args.requests, args.pipeline)
                    finally:
                        servers.stop()
                    samples[key][system].append(figures)
                    if not args.quiet:
                        print(f"round {r + 1} {key:<7} {system:<6} "
                              f"{figures['value']:>9,.0f} jobs/s "
                              f"{figures['cpu_us_per_job']:6.1f} us/job "
                              f"load {figures['load']:.1f}", file=sys.stderr)
            write_json(result, args.json)


def paired_ratio(ours: list[float], theirs: list[float]) -> float | None:
    """The median of the rounds' ratios (round k of both measured back to back)."""
    pairs = [a / b for a, b in zip(ours, theirs, strict=False) if b]
    return statistics.median(pairs) if pairs else None


def summary(result: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Per (N, R): each system's medians, and disq's ratios to the others."""
    out: dict[str, dict[str, Any]] = {}
    for key, by_system in result["samples"].items():
        figures = {s: f for s, f in by_system.items() if f}
        if "disq" not in figures:
            continue
        entry: dict[str, Any] = {"median": {}, "ratio": {}}
        for system, runs in figures.items():
            entry["median"][system] = {
                name: statistics.median(run[name] for run in runs)
                for name in ("value", "per_node", "cpu_us_per_job", "p99_ms", "load")}
            if system != "disq":
                entry["ratio"][system] = {
                    name: paired_ratio([f[name] for f in figures["disq"]],
                                       [f[name] for f in runs])
                    for name in ("value", "cpu_us_per_job")}
        out[key] = entry
    return out


def _ratio(value: float | None) -> str:
    return "—" if value is None else f"{value:.2f}"


def markdown(result: dict[str, Any]) -> str:
    table = summary(result)
    others = [s for s in ("disque", "before") if any(s in e["median"] for e in table.values())]
    head = "| nodes × REPLICATE | disq jobs/s (per node) | disq CPU/job |"
    rule = "|---|---|---|"
    for system in others:
        name = "after ÷ before" if system == "before" else "disq ÷ Disque"
        head += (f" {LABELS[system]} jobs/s (per node) | {LABELS[system]} CPU/job "
                 f"| {name} jobs/s | {name} CPU/job |")
        rule += "---|---|---|---|"
    lines = [f"`{result['command']}` — {result['date']}, commit {result['commit']}"
             + (f" (before: {result['before_commit']})" if result.get("before_commit")
                else "")
             + f", {result['host']}; load average {result['load'][0]:.1f} at the start, "
             f"{result.get('load_after', result['load'])[0]:.1f} at the end.", "",
             head, rule]
    for key, entry in table.items():
        row = f"| {key} | {_cell(entry, 'disq')}"
        for system in others:
            ratio = entry["ratio"].get(system, {})
            row += (f" | {_cell(entry, system)} | {_ratio(ratio.get('value'))} "
                    f"| {_ratio(ratio.get('cpu_us_per_job'))}")
        lines.append(row + " |")
    lines += ["", "jobs/s: all the nodes' ADDJOBs over the time from the first "
              "redis-benchmark started to the last one done (per node: ÷ N). CPU/job: "
              "user + system of every node process per job. Medians of the rounds; a "
              "ratio is the median of the rounds' ratios (CPU/job: lower is better).", ""]
    return "\n".join(lines)


def _cell(entry: dict[str, Any], system: str) -> str:
    if system not in entry["median"]:
        return "— | —"
    m = entry["median"][system]
    return f"{m['value']:,.0f} ({m['per_node']:,.0f}) | {m['cpu_us_per_job']:.1f} µs"


def _ints(text: str) -> list[int]:
    try:
        values = [int(n) for n in text.split(",") if n.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError("a comma-separated list of integers") from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError("a comma-separated list of positive integers")
    return values


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m bench.scale_out", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--nodes", type=_ints, default=default_nodes(),
                   help=f"cluster sizes (default here: {','.join(map(str, default_nodes()))})")
    p.add_argument("--replicate", type=_ints, default=[2, 3],
                   help="REPLICATE values (those above N are skipped)")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--requests", type=int, default=100_000,
                   help="requests of each node's redis-benchmark")
    p.add_argument("--pipeline", type=int, default=16)
    p.add_argument("--disq-src", type=Path, default=srv.ROOT,
                   help="checkout whose disq is measured (the after; default this one)")
    p.add_argument("--before", type=Path, help="another checkout, measured as 'before'")
    p.add_argument("--no-disque", action="store_true", help="leave Disque out")
    p.add_argument("--disque-bin", type=Path, help="a built disque-server (or DISQUE_BIN)")
    p.add_argument("--disque-src", type=Path, help="Disque's source tree, cloned and built "
                   f"when absent (or DISQUE_SRC; default {disque.DEFAULT_SRC})")
    p.add_argument("--json", type=Path, default=OUT / "scale_out.json")
    p.add_argument("--workdir", type=Path, help="server directories (default: a temp dir)")
    p.add_argument("--quiet", action="store_true", help="no line per measurement")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    args.disq_src = args.disq_src.resolve()
    args.before = args.before.resolve() if args.before else None
    if shutil.which("redis-benchmark") is None:
        sys.exit("redis-benchmark not found (Debian: apt-get install redis-tools)")
    disque_bin = None
    if not args.no_disque:
        try:
            disque_bin = disque.binary(args.disque_bin, args.disque_src)
        except disque.DisqueUnavailable as exc:
            sys.exit(f"{exc}\n(--no-disque measures disq alone)")
    result = begin("scale_out", argv, args.disq_src, disque_bin)
    result.update(before_commit=commit(args.before) if args.before else None,
                  nodes=args.nodes, replicate=args.replicate)
    run_in(args.workdir, "disq-scale-out-", result,
           lambda workdir: run(args, disque_bin, workdir, result))
    report(result, args.json, summary, markdown)
    return 0


if __name__ == "__main__":
    sys.exit(main())
