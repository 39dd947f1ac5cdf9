"""Before/after for a change that must not slow disq down: the server CPU per ADDJOB
of two checkouts, alternated in one run.

    python bench/compare_checkouts.py BEFORE_DIR [AFTER_DIR] [--rounds 4]
        [--server-args "--cluster-secret s3cret"]

BEFORE_DIR is another checkout of disq (`git worktree add --detach /tmp/before REV`);
AFTER_DIR defaults to this one. Each round starts fresh nodes from each checkout in
turn and drives them with redis-benchmark (-c 50): one node, ADDJOB unpipelined and
with -P 16; three nodes, ADDJOB REPLICATE 3 with -P 16 (the CPU of all three). CPU
(user + sys of the disq processes, from /proc) per request is steadier than
throughput on a shared machine, which is what the medians and the after/before ratio
report. `--server-args`: directives every node of both sides starts with.

Several nodes each under load (one redis-benchmark per node, REPLICATE 2 and 3):
`python -m bench.scale_out --before BEFORE_DIR [--disq-src AFTER_DIR]`.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from cluster import start_cluster
from common import redis_benchmark, start_disq, stop

TICK = os.sysconf("SC_CLK_TCK")
CASES = [  # name, nodes, requests, pipeline, command
    ("1 node, ADDJOB", 1, 60_000, 1, ["ADDJOB", "q", "x", "0"]),
    ("1 node, ADDJOB -P 16", 1, 300_000, 16, ["ADDJOB", "q", "x", "0"]),
    ("3 nodes, ADDJOB REPLICATE 3 -P 16", 3, 100_000, 16, ["ADDJOB", "q", "x", "0"]),
]


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


@contextmanager
def nodes_of(checkout: Path, count: int,
             extra: list[str]) -> Iterator[list[tuple[object, int]]]:
    """`count` running nodes (a formed cluster if more than one) of `checkout`'s disq:
    `python -m disq` imports the disq of its working directory."""
    here = os.getcwd()
    os.chdir(checkout)
    workdir = tempfile.mkdtemp(prefix="disq-compare-")
    try:
        nodes = (start_cluster(workdir, count, *extra) if count > 1
                 else [start_disq(workdir, *extra)])
    finally:
        os.chdir(here)
    try:
        yield nodes
    finally:
        for proc, _ in nodes:
            stop(proc)  # type: ignore[arg-type]


def measure(checkout: Path, count: int, requests: int, pipeline: int,
            command: list[str], extra: list[str]) -> float:
    """Server CPU microseconds per request."""
    with nodes_of(checkout, count, extra) as nodes:
        pids = [proc.pid for proc, _ in nodes]  # type: ignore[attr-defined]
        before = sum(map(cpu_seconds, pids))
        redis_benchmark(nodes[0][1], requests, pipeline, *command)
        return (sum(map(cpu_seconds, pids)) - before) / requests * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("before", type=Path)
    parser.add_argument("after", type=Path, nargs="?",
                        default=Path(__file__).resolve().parent.parent)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--server-args", default="",
                        help="directives for every node, e.g. '--cluster-secret s3cret'")
    args = parser.parse_args()
    extra = args.server_args.split()
    sides = {"before": args.before.resolve(), "after": args.after.resolve()}
    results: dict[tuple[str, str], list[float]] = {}
    for round_no in range(args.rounds):
        # Each side goes first every other round, so neither pays for going second.
        # (The same checkout on both sides, 10 rounds, the second side always second:
        # medians 0.87 to 1.13 apart on this shared 2-core VM, 5 of 6 "slower" second.)
        order = list(sides.items())
        for side, checkout in order if round_no % 2 == 0 else order[::-1]:
            for name, count, requests, pipeline, command in CASES:
                us = measure(checkout, count, requests, pipeline, command, extra)
                results.setdefault((name, side), []).append(us)
                print(f"round {round_no + 1} {side} {name}: {us:.2f} us/request",
                      file=sys.stderr)
    print("| case | server CPU per request, before (median) | after (median) | after/before |")
    print("|---|---|---|---|")
    for name, *_ in CASES:
        before = statistics.median(results[(name, "before")])
        after = statistics.median(results[(name, "after")])
        print(f"| {name} | {before:.2f} us | {after:.2f} us | {after / before:.3f} |")


if __name__ == "__main__":
    main()
