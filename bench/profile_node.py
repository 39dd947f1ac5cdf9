"""Where a request's time goes in a node: py-spy samples (with native frames) of one
node under a redis-benchmark load, grouped by what the code does.

    python bench/profile_node.py [--py-spy PATH] [--rate 250] [--requests 400000]
                                 [--pipeline 1] [--cycle] [--raw OUT]

py-spy (`pip install py-spy`, or its binary given by --py-spy) samples the node from
outside; at 250 Hz it does not slow the node down measurably (2,000 Hz with native
frames does, 3x). A sample is one stack; it counts for the first frame from its leaf
that a rule below names (so the C code a Python function calls counts for it: a dict
lookup in ScanTable.add is the job table's time), and is "other" if none does. The
time spent in write() and read() is the kernel's socket work, which a compiled node
does not change. py-spy counts a node waiting in epoll_wait as busy: those samples are
left out of the shares (the node's CPU time from /proc is spread over the others).

--cycle measures GETJOB + ACKJOB: `--requests` jobs are added first, unsampled, then
4 processes of a Python client (redis-benchmark cannot chain GETJOB to ACKJOB) take
and acknowledge them; the client is slower than the node, so the node idles part of
the time (not in the samples).
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from common import start_disq, stop

WAITING = "waiting in epoll (not counted)"
# (group, pattern on "function (file:line)") in the order a frame is tried.
RULES: list[tuple[str, str]] = [
    ("socket write (kernel)", r"^(write|writev|send|sendmsg|__libc_write) \(libc"),
    ("socket read (kernel)", r"^(read|recv|recvmsg|__libc_read) \(libc"),
    (WAITING, r"^epoll_(p?wait)"),
    ("garbage collector", r"^gc_collect|^collect \("),
    ("transport write (uvloop)", r"(?i)write.*\((loop\.c|stream\.c)"),
    ("RESP parse (hiredis + RequestParser)",
     r"\((reader\.c|read\.c|hiredis/)|^RequestParser\."),
    ("dispatch (Client.data_received, _execute, dispatch)",
     r"^Client\.(data_received|_run|_execute|dispatch) "),
    ("request parse (disq/requests.py)", r"\(disq/requests\.py"),
    ("job creation and ID (job.py, ids.py, clock.py, gcfree)",
     r"\(disq/(job|ids|clock|gcfree)\.py|\(_gcfree\.c"),
    ("job table (scantable.py)", r"\(disq/scantable\.py"),
    ("queue insert/take (queue.py)", r"\(disq/queue\.py"),
    ("timers (timers.py)", r"\(disq/timers\.py"),
    ("core: Node, JobOperations (node.py, jobops.py)", r"\(disq/(node|jobops)\.py"),
    ("command handlers (server/commands/)", r"\(disq/server/commands/"),
    ("reply encode and queue (reply.py, pending.py)", r"\(disq/server/(reply|pending)\.py"),
    ("replication and bus", r"\(disq/(replication|cluster)/"),
    ("server cron and timers (app.py, cron.py, stats.py)",
     r"\(disq/server/(app|cron|stats|clients)\.py"),
    ("event loop (uvloop, libuv)", r"\((loop\.c|core\.c|linux\.c|stream\.c|uv-common\.c|"
                                   r"uvloop/|asyncio/)"),
]
_COMPILED = [(group, re.compile(pattern)) for group, pattern in RULES]


def classify(stack: list[str]) -> str:
    for frame in reversed(stack):
        for group, pattern in _COMPILED:
            if pattern.search(frame):
                return group
    return "other"


def breakdown(raw: str) -> Counter[str]:
    """Samples per group of py-spy's raw output (one `frame;frame;... count` a line)."""
    groups: Counter[str] = Counter()
    for line in raw.splitlines():
        stack, _, count = line.rpartition(" ")
        if stack:
            groups[classify(stack.split(";"))] += int(count)
    return groups


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / 100  # utime + stime, clock ticks


def _take_and_ack(port: int, count: int) -> None:
    import redis

    client = redis.Redis(port=port)
    for _ in range(count):
        ((_, job_id, _),) = client.execute_command("GETJOB", "NOHANG", "FROM", "q")
        client.execute_command("ACKJOB", job_id)


def cycle_load(port: int, total: int, processes: int = 4) -> None:
    """`total` GETJOB NOHANG + ACKJOB pairs from `processes` client processes."""
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(processes) as pool:
        list(pool.map(_take_and_ack, [port] * processes, [total // processes] * processes))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--py-spy", default=shutil.which("py-spy") or "py-spy")
    parser.add_argument("--rate", type=int, default=250)
    parser.add_argument("--requests", type=int, default=400_000)
    parser.add_argument("--pipeline", type=int, default=1)
    parser.add_argument("--cycle", action="store_true", help="GETJOB + ACKJOB instead")
    parser.add_argument("--raw", help="keep py-spy's raw stacks in this file")
    args = parser.parse_args()

    workdir = tempfile.mkdtemp(prefix="disq-profile-")
    proc, port = start_disq(workdir)
    raw = args.raw or f"{workdir}/stacks.txt"
    try:
        if args.cycle:
            subprocess.run(["redis-benchmark", "-p", str(port), "-c", "50", "-P", "16",
                            "-n", str(args.requests), "-q", "ADDJOB", "q", "x", "0"],
                           capture_output=True, check=True)
            load = [sys.executable, "-c",
                    "import sys; sys.path.insert(0, 'bench'); import profile_node; "
                    f"profile_node.cycle_load({port}, {args.requests})"]
        else:
            load = ["redis-benchmark", "-p", str(port), "-c", "50", "-n", str(args.requests),
                    "-P", str(args.pipeline), "-q", "ADDJOB", "q", "x", "0"]
        spy = subprocess.Popen([args.py_spy, "record", "--native", "-r", str(args.rate),
                                "-f", "raw", "-o", raw, "-p", str(proc.pid)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(1)
        cpu0, t0 = cpu_seconds(proc.pid), time.monotonic()
        subprocess.run(load, capture_output=True, check=True)
        cpu1, t1 = cpu_seconds(proc.pid), time.monotonic()
        spy.send_signal(2)  # SIGINT: py-spy writes what it has
        spy.wait(timeout=60)
    finally:
        stop(proc)
    groups = breakdown(Path(raw).read_text())
    waiting = groups.pop(WAITING, 0)
    total = sum(groups.values())
    requests = args.requests * (2 if args.cycle else 1)
    us = (cpu1 - cpu0) / requests * 1e6
    what = "GETJOB + ACKJOB (a pair is 2 requests)" if args.cycle else (
        f"ADDJOB q x 0, -c 50 -P {args.pipeline}")
    print(f"{what}: {requests / (t1 - t0):,.0f} req/s, node CPU {us:.2f} us/request "
          f"(user+sys from /proc), {total} samples ({waiting} more waiting in epoll)")
    print("| group | % of samples | us/request |\n|---|---|---|")
    for group, n in groups.most_common():
        print(f"| {group} | {100 * n / total:.1f} | {us * n / total:.2f} |")


if __name__ == "__main__":
    main()
