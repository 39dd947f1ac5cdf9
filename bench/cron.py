"""CRON across a node failure (issue #18): one job per tick, counted.

    python bench/cron.py [--schedules 20] [--seconds 120] [--kill-at 40] [--restart-at 80]

Three nodes; `--schedules` schedules firing every second (`* * * * * *`, REPLICATE 2,
body = the schedule's name), defined on the first node. At `--kill-at` seconds the
node firing most ticks is killed (SIGKILL), at `--restart-at` it starts again on its
directory and port. At the end every job of the surviving nodes is read (JSCAN REPLY
all: its body and ctime) and each schedule's jobs are counted per tick second:
duplicates (two jobs for one tick) and missing ticks are reported. Missing ticks are
expected only while the killed node was still thought alive (until the cluster node
timeout marks it failing, its turn is nobody's) — they are counted apart.
"""

from __future__ import annotations

import argparse
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from cluster import start_cluster
from common import stop, wait_port


def call(port: int, *args: object) -> object:
    import redis

    return redis.Redis(port=port, socket_timeout=30).execute_command(*args)


def restart(workdir: str, port: int) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "disq", "--port", str(port), "--bind", "127.0.0.1",
         "--dir", workdir, "--maxmemory", "16gb"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_port(port)
    return proc


def jobs_of(port: int) -> dict[bytes, tuple[bytes, int]]:
    """job id -> (body, ctime second) of every job a node holds."""
    out = {}
    cursor = b"0"
    while True:
        cursor, items = call(port, "JSCAN", cursor, "COUNT", 1000, "REPLY", "all")
        for item in items:
            fields = dict(zip(item[::2], item[1::2], strict=True))
            out[fields[b"id"]] = (fields[b"body"], fields[b"ctime"] // 1_000_000_000)
        if cursor == b"0":
            return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--schedules", type=int, default=20)
    parser.add_argument("--seconds", type=int, default=120)
    parser.add_argument("--kill-at", type=int, default=40)
    parser.add_argument("--restart-at", type=int, default=80)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="disq-cron-") as workdir:
        nodes = start_cluster(workdir)
        procs = [proc for proc, _ in nodes]
        ports = [port for _, port in nodes]
        try:
            names = [f"s{i:02d}" for i in range(args.schedules)]
            first_tick = {}  # the first tick after the definition (its version)
            for name in names:
                call(ports[0], "CRON", "ADD", name, "ticks", "* * * * * *", name,
                     "REPLICATE", 2, "TTL", 3600)
                first_tick[name] = int(time.time()) + 1
            start = time.time()
            killed = None
            while time.time() - start < args.seconds:
                elapsed = time.time() - start
                if killed is None and elapsed >= args.kill_at:
                    killed = max(range(3), key=lambda i: call(ports[i], "QLEN", "ticks"))
                    procs[killed].send_signal(signal.SIGKILL)
                    procs[killed].wait()
                    print(f"killed node {killed} at +{elapsed:.0f}s", flush=True)
                elif killed is not None and procs[killed].poll() is not None and (
                        elapsed >= args.restart_at):
                    procs[killed] = restart(str(Path(workdir) / f"node{killed}"),
                                            ports[killed])
                    print(f"restarted node {killed} at +{elapsed:.0f}s", flush=True)
                time.sleep(0.2)
            last_fires = {}
            for item in call(ports[0], "CRON", "LIST"):
                fields = dict(zip(item[::2], item[1::2], strict=True))
                last_fires[fields[b"name"].decode()] = fields[b"last-fire"]
            for name in names:
                call(ports[0], "CRON", "DEL", name)
            time.sleep(2)  # the ticks fired meanwhile reach their nodes
            jobs: dict[bytes, tuple[bytes, int]] = {}
            for port in ports:
                try:
                    jobs.update(jobs_of(port))
                except OSError:
                    pass
        finally:
            for proc in procs:
                stop(proc)
    # Each schedule's jobs against its ticks, from the first after CRON ADD to the one
    # CRON LIST showed fired last before CRON DEL (the job of a tick fired late, by the
    # node taking over, is created later: counted by schedule, not by second).
    per_schedule = Counter(body.decode() for body, _ in jobs.values())
    expected = {n: (last_fires[n] // 1000 - first_tick[n] + 1) for n in names}
    extra = sum(max(per_schedule[n] - expected[n], 0) for n in names)
    missing = sum(max(expected[n] - per_schedule[n], 0) for n in names)
    print("| schedules | ticks expected | jobs | more than one per tick | missing |")
    print("|---|---|---|---|---|")
    print(f"| {len(names)} | {sum(expected.values())} | {sum(per_schedule.values())} | "
          f"{extra} | {missing} |")


if __name__ == "__main__":
    main()
