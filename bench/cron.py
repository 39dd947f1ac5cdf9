"""CRON across a node failure: one job per tick, counted.

    python bench/cron.py [--schedules 20] [--seconds 120] [--kill-at 40] [--restart-at 80]

Three nodes; `--schedules` schedules firing every second (`* * * * * *`, REPLICATE 2,
body = the schedule's name), defined on the first node. At `--kill-at` seconds the
node firing most ticks is killed (SIGKILL), at `--restart-at` it starts again on its
directory and port. At the end every job of the surviving nodes is read (JSCAN REPLY
all: its body), then each tick of each schedule is matched with its job: a tick's job
carries the DEDUP key `cron:<name>:<tick ms>`, so `ADDJOB ... DEDUP <that key>`
answers the ID of the job that tick made (or adds a new one: a tick with no job). A
tick from the first after CRON ADD to the last CRON LIST shows fired is *missing* if
its key names no job of the schedule; a job of a schedule that no tick's key names is
a *second job* for some tick.
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


def jobs_of(port: int) -> dict[bytes, bytes]:
    """job id -> body of every job a node holds."""
    out = {}
    cursor = b"0"
    while True:
        cursor, items = call(port, "JSCAN", cursor, "COUNT", 1000, "REPLY", "all")
        for item in items:
            fields = dict(zip(item[::2], item[1::2], strict=True))
            out[fields[b"id"]] = fields[b"body"]
        if cursor == b"0":
            return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--schedules", type=int, default=20)
    parser.add_argument("--seconds", type=int, default=120)
    parser.add_argument("--kill-at", type=int, default=40)
    parser.add_argument("--restart-at", type=int, default=80)
    parser.add_argument("--kill-node", type=int, choices=(0, 1, 2),
                        help="the node to kill (default: the one that fired most ticks)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="disq-cron-") as workdir:
        nodes = start_cluster(workdir)
        procs = [proc for proc, _ in nodes]
        ports = [port for _, port in nodes]
        try:
            names = [f"s{i:02d}" for i in range(args.schedules)]
            first_tick = {}  # the first tick after the definition (its version)
            for name in names:
                before = time.time()  # the definition's version is later: its first
                call(ports[0], "CRON", "ADD", name, "ticks", "* * * * * *", name,
                     "REPLICATE", 2, "TTL", 3600)
                first_tick[name] = int(before) + 1  # tick is the next whole second

            start = time.time()
            killed = None
            while time.time() - start < args.seconds:
                elapsed = time.time() - start
                if killed is None and elapsed >= args.kill_at:
                    killed = args.kill_node if args.kill_node is not None else max(
                        range(3), key=lambda i: call(ports[i], "QLEN", "ticks"))
                    procs[killed].send_signal(signal.SIGKILL)
                    procs[killed].wait()
                    print(f"killed node {killed} at +{elapsed:.0f}s", flush=True)
                elif killed is not None and procs[killed].poll() is not None and (
                        elapsed >= args.restart_at):
                    procs[killed] = restart(str(Path(workdir) / f"node{killed}"),
                                            ports[killed])
                    print(f"restarted node {killed} at +{elapsed:.0f}s", flush=True)
                time.sleep(0.2)
            last_fires: dict[str, int] = {}  # the newest tick fired, as any node knows it
            for port in ports:
                for item in call(port, "CRON", "LIST"):
                    fields = dict(zip(item[::2], item[1::2], strict=True))
                    name = fields[b"name"].decode()
                    last_fires[name] = max(last_fires.get(name, 0), fields[b"last-fire"] or 0)
            for name in names:
                call(ports[0], "CRON", "DEL", name)
            deleted_at = int(time.time() * 1000)
            time.sleep(2)  # the ticks fired meanwhile reach their nodes
            jobs: dict[bytes, bytes] = {}
            for port in ports:
                try:
                    jobs.update(jobs_of(port))
                except OSError:
                    pass
            # Each tick's job, by its DEDUP key, up to CRON DEL (the last ones may not
            # have fired: a new ID then, missing only if the tick was <= last-fire).
            tick_jobs = {
                (name, tick): call(ports[1], "ADDJOB", "probes", "probe", 5000, "REPLICATE",
                                   2, "TTL", 600, "DEDUP", f"cron:{name}:{tick}")
                for name in names
                for tick in range(first_tick[name] * 1000, deleted_at + 1, 1000)}
        finally:
            for proc in procs:
                stop(proc)
    per_schedule = Counter(body.decode() for body in jobs.values())
    matched = {job_id for job_id in tick_jobs.values() if job_id in jobs}
    expected = [(name, tick) for name, tick in tick_jobs if tick <= last_fires[name]]
    missing = sum(1 for key in expected if tick_jobs[key] not in jobs)
    seconds = sum(1 for job_id, body in jobs.items()
                  if body.decode() in per_schedule and job_id not in matched)
    print("| schedules | ticks | jobs | ticks with their job | second jobs | missing |")
    print("|---|---|---|---|---|---|")
    print(f"| {len(names)} | {len(expected)} | {sum(per_schedule.values())} | "
          f"{len(matched)} | {seconds} | {missing} |")


if __name__ == "__main__":
    main()
