"""Before/after for a change that must not slow disq down, in instructions: the
server's instructions per request of two checkouts, counted by valgrind's callgrind.

    python bench/instructions.py BEFORE_DIR [AFTER_DIR] [--requests 5000] [--runs 3]
        [--case TEXT] [--before-args "--appendonly yes ..."] [--after-args "..."]
        [--all-args "--cluster-secret s3cret"]

BEFORE_DIR is another checkout of disq (`git worktree add --detach /tmp/before REV`);
AFTER_DIR defaults to this one. CPU time per request (compare_checkouts.py) moves by
5-10% with whatever else the machine does; an instruction count moves by well under
1% (the same code on the same input; PYTHONHASHSEED=0), so a change of a few percent
shows. The node under measure runs under callgrind (about 50x slower); the count goes
from `callgrind_control --zero` right before a redis-benchmark load (-c 1) to a dump
right after it, so start-up and shutdown are not in it. Cases: one node, ADDJOB with
-P 16 and unpipelined; three nodes, ADDJOB REPLICATE 3 -P 16 and unpipelined (only
the node taking the ADDJOBs counted: its two peers run at full speed); one node, a GETJOB + ACKJOB
cycle (`--requests` jobs added first, untimed). Each figure is the median of
`--runs` loads after one warm-up load. The instructions include the node's cron and
bus work over the load's time, which grows with the load's wall time (about 50x
longer under callgrind, longer still on a busy machine): the measured node runs its
cron once a second (`--hz 1`) so that this stays well under 1% of the count.
`--case` keeps the cases whose name contains TEXT; `--before-args` / `--after-args` are
directives for the measured node of each side (e.g. one checkout twice, with the AOF
in two formats: `. . --before-args "--appendonly yes --aof-checksum no" --after-args
"--appendonly yes"`); `--all-args` are directives of every node of both sides, peers
included (a cluster-secret must be on all of them).
"""

from __future__ import annotations

import argparse
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from cluster import command
from common import free_port, start_disq, stop, stop_nodes_on_sigterm, wait_port

CASES = [  # name, nodes, pipeline, command
    ("1 node, ADDJOB -P 16", 1, 16, ["ADDJOB", "q", "x", "0"]),
    ("1 node, ADDJOB", 1, 1, ["ADDJOB", "q", "x", "0"]),
    ("3 nodes, ADDJOB REPLICATE 3 -P 16", 3, 16, ["ADDJOB", "q", "x", "0"]),
    # one client's ADDJOBs one at a time: each takes a frame to each peer and back
    ("3 nodes, ADDJOB REPLICATE 3 unpipelined", 3, 1, ["ADDJOB", "q", "x", "0"]),
    ("1 node, GETJOB + ACKJOB", 1, 1, ["__cycle__"]),
]


def start_under_callgrind(workdir: str, out_dir: str,
                          extra: list[str]) -> tuple[subprocess.Popen[bytes], int]:
    port = free_port()
    env = dict(os.environ, PYTHONHASHSEED="0")
    proc = subprocess.Popen(
        ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out_dir}/cg.%p",
         sys.executable, "-m", "disq", "--port", str(port), "--bind", "127.0.0.1",
         "--dir", workdir, "--maxmemory", "16gb", "--hz", "1", *extra],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    wait_port(port, timeout=120)
    return proc, port


@contextmanager
def nodes_of(checkout: Path, count: int, extra: list[str],
             common: list[str]) -> Iterator[tuple[int, int, str]]:
    """(pid under callgrind, its port, callgrind's output folder) of a node of
    `checkout`'s disq (`python -m disq` imports the disq of its working directory),
    with `count - 1` peers at full speed, the cluster formed; `extra`: the measured
    node's directives, `common`: every node's."""
    here = os.getcwd()
    workdir = tempfile.mkdtemp(prefix="disq-instructions-")
    os.chdir(checkout)
    procs: list[subprocess.Popen[bytes]] = []
    try:
        os.mkdir(f"{workdir}/measured")
        proc, port = start_under_callgrind(f"{workdir}/measured", workdir,
                                           [*common, *extra])
        procs.append(proc)
        for i in range(count - 1):
            os.mkdir(f"{workdir}/peer{i}")
            peer, peer_port = start_disq(f"{workdir}/peer{i}", *common)
            procs.append(peer)
            command(port, "CLUSTER", "MEET", "127.0.0.1", str(peer_port))
        deadline = time.monotonic() + 120
        while f"cluster_reachable_nodes:{count - 1}".encode() not in command(
                port, "CLUSTER", "INFO"):
            if time.monotonic() > deadline:
                raise RuntimeError("the cluster did not form")
            time.sleep(0.2)
    finally:
        os.chdir(here)
    try:
        yield proc.pid, port, workdir
    finally:
        for p in procs:
            stop(p)


def bench(port: int, requests: int, pipeline: int, *args: str) -> None:
    done = subprocess.run(["redis-benchmark", "-h", "127.0.0.1", "-p", str(port), "-c", "1",
                           "-n", str(requests), "-P", str(pipeline), "-q", *args],
                          capture_output=True, text=True, timeout=3600)
    if done.returncode:  # (what it printed: the reason is in it)
        raise RuntimeError(f"redis-benchmark exited with {done.returncode}: "
                           f"{done.stdout[-500:]!r} {done.stderr[-500:]!r}")


def cycle(port: int, requests: int) -> None:
    """`requests` GETJOB + ACKJOB pairs, unpipelined, on jobs added beforehand."""
    import redis

    client = redis.Redis(port=port, socket_timeout=600)
    for _ in range(requests):
        ((_, job_id, _),) = client.execute_command("GETJOB", "NOHANG", "FROM", "q")
        client.execute_command("ACKJOB", job_id)


def counted(pid: int, out_dir: str, load: Callable[[], None]) -> int:
    """Instructions of process `pid` while `load` runs."""
    before = set(Path(out_dir).glob("cg.*"))
    subprocess.run(["callgrind_control", "--zero", str(pid)], capture_output=True, check=True)
    load()
    subprocess.run(["callgrind_control", "--dump", str(pid)], capture_output=True, check=True)
    (dump,) = set(Path(out_dir).glob("cg.*")) - before
    for line in dump.read_text().splitlines():
        if line.startswith("summary:"):
            return int(line.split()[1])
    raise RuntimeError(f"no summary in {dump}")


def measure(checkout: Path, case: tuple[str, int, int, list[str]], requests: int,
            runs: int, extra: list[str], common: list[str]) -> float:
    """The median of `runs` loads' instructions per request (after a warm-up)."""
    _, count, pipeline, args = case
    figures = []
    with nodes_of(checkout, count, extra, common) as (pid, port, out_dir):
        for run in range(runs + 1):
            if args == ["__cycle__"]:
                bench(port, requests, 16, "ADDJOB", "q", "x", "0")
                per_request = counted(pid, out_dir, lambda: cycle(port, requests)) / (
                    2 * requests)
            else:
                per_request = counted(
                    pid, out_dir, lambda: bench(port, requests, pipeline, *args)) / requests
            if run:  # the first load warms up (queue, caches, specialized bytecode)
                figures.append(per_request)
    return statistics.median(figures)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("before", type=Path)
    parser.add_argument("after", type=Path, nargs="?",
                        default=Path(__file__).resolve().parent.parent)
    parser.add_argument("--requests", type=int, default=5000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--case", default="", help="only the cases whose name has this")
    parser.add_argument("--before-args", default="", help="directives of the before node")
    parser.add_argument("--after-args", default="", help="directives of the after node")
    parser.add_argument("--all-args", default="", help="directives of every node")
    args = parser.parse_args()
    stop_nodes_on_sigterm()
    sides = {"before": (args.before.resolve(), shlex.split(args.before_args)),
             "after": (args.after.resolve(), shlex.split(args.after_args))}
    cases = [case for case in CASES if args.case in case[0]]
    results: dict[tuple[str, str], float] = {}
    for case in cases:
        for side, (checkout, extra) in sides.items():
            results[(case[0], side)] = figure = measure(
                checkout, case, args.requests, args.runs, extra, shlex.split(args.all_args))
            print(f"{side} {case[0]}: {figure:,.0f} instructions/request", file=sys.stderr)
    print("| case | server instructions per request, before | after | after/before |")
    print("|---|---|---|---|")
    for name, *_ in cases:
        before, after = results[(name, "before")], results[(name, "after")]
        print(f"| {name} | {before:,.0f} | {after:,.0f} | {after / before:.3f} |")


if __name__ == "__main__":
    main()
