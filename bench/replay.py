"""Retention and replay: N acked jobs of a RETAIN queue kept on disk, then one REPLAY of
them all into another queue.

    python bench/replay.py [--jobs 1000000] [--body 100]

One node. The queue gets `QPOLICY q SET RETAIN 86400`; N jobs of `--body` bytes are
added, taken and acked (pipelined, 1000 at a time), which appends each to the queue's
segment files. Reported: the fill's rate (ADDJOB + GETJOB + ACKJOB, with the retention
writes), the disk per retained job (the segment files' bytes / N), the node's RSS per
retained job after the fill (the index is per segment: a job costs its memory only while
queued), the REPLAY's time and rate (every job read back, in creation order, and added
with its DEDUP key), the RSS the REPLAY added per job (mostly the N jobs it queued: a
queued job's own footprint, plus the DEDUP keys), and a second REPLAY's time (every key
known: nothing added).
"""

from __future__ import annotations

import argparse
import os
import tempfile
import threading
import time

import redis
from common import rss, start_disq, stop, stop_nodes_on_sigterm

BATCH = 1000


def fill(client: redis.Redis, queue: str, jobs: int, body: bytes) -> float:
    """Seconds to add, take and ack `jobs` jobs."""
    start = time.perf_counter()
    done = 0
    while done < jobs:
        n = min(BATCH, jobs - done)
        pipe = client.pipeline(transaction=False)
        for _ in range(n):
            pipe.execute_command("ADDJOB", queue, body, 0)
        pipe.execute()
        got = client.execute_command("GETJOB", "NOHANG", "COUNT", n, "FROM", queue)
        client.execute_command("ACKJOB", *[job[1] for job in got])
        done += len(got)
    return time.perf_counter() - start


def info(client: redis.Redis) -> dict[str, int]:
    return {k: int(v) for k, v in client.info("retention").items()
            if k.startswith("retained_")}


def disk_bytes(directory: str) -> int:
    total = 0
    for root, _, files in os.walk(directory):
        total += sum(os.path.getsize(os.path.join(root, f)) for f in files)
    return total


class PeakRss(threading.Thread):
    """The process's highest RSS while running (sampled every 50 ms)."""

    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        self.pid = pid
        self.peak = rss(pid)
        self.stopped = threading.Event()

    def run(self) -> None:
        while not self.stopped.wait(0.05):
            self.peak = max(self.peak, rss(self.pid))


def replay(client: redis.Redis, pid: int, *args: object) -> tuple[float, dict[str, int], int]:
    watch = PeakRss(pid)
    watch.start()
    start = time.perf_counter()
    reply = client.execute_command("REPLAY", *args)
    seconds = time.perf_counter() - start
    watch.stopped.set()
    watch.join()
    fields = {reply[i].decode(): reply[i + 1] for i in range(0, len(reply), 2)}
    return seconds, fields, watch.peak


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=1_000_000)
    parser.add_argument("--body", type=int, default=100)
    args = parser.parse_args()
    stop_nodes_on_sigterm()
    n = args.jobs
    with tempfile.TemporaryDirectory() as workdir:
        proc, port = start_disq(workdir)
        try:
            client = redis.Redis(port=port, socket_timeout=3600)
            client.execute_command("QPOLICY", "rq", "SET", "RETAIN", 86400)
            base = rss(proc.pid)
            t0 = int(time.time() * 1000)
            fill_s = fill(client, "rq", n, b"x" * args.body)
            while info(client)["retained_jobs"] < n:
                time.sleep(0.1)
            time.sleep(1.5)  # the last writes and an fsync
            kept = info(client)
            disk = disk_bytes(os.path.join(workdir, "retain"))
            after_fill = rss(proc.pid)
            t1 = int(time.time() * 1000)
            seconds, result, peak = replay(client, proc.pid, "rq", "FROM", t0, "TO", t1,
                                           "INTO", "rq2")
            after_replay = rss(proc.pid)
            again_s, again, _ = replay(client, proc.pid, "rq", "FROM", t0, "TO", t1,
                                       "INTO", "rq2")
            queued = client.execute_command("QLEN", "rq2")
        finally:
            stop(proc)
        # the same fill on a node without RETAIN: what the RSS keeps of acked jobs anyway
        os.makedirs(os.path.join(workdir, "plain"))
        proc, port = start_disq(os.path.join(workdir, "plain"))
        try:
            client = redis.Redis(port=port, socket_timeout=3600)
            plain_base = rss(proc.pid)
            fill(client, "pq", n, b"x" * args.body)
            plain_after = rss(proc.pid)
        finally:
            stop(proc)
    print(f"jobs: {n:,} of {args.body} B")
    print(f"fill (ADDJOB + GETJOB + ACKJOB, retained): {fill_s:.1f} s, {n / fill_s:,.0f} jobs/s")
    print(f"retained: {kept['retained_jobs']:,} jobs, {kept['retained_bytes']:,} B indexed, "
          f"{disk:,} B on disk = {disk / n:.1f} B/job")
    print(f"RSS: {base / 2**20:.1f} MiB before, {after_fill / 2**20:.1f} MiB after the fill "
          f"= {(after_fill - base) / n:.1f} B/retained job; without RETAIN "
          f"{(plain_after - plain_base) / n:.1f} B/acked job (what the allocator keeps)")
    print(f"REPLAY: {seconds:.1f} s, {result['added'] / seconds:,.0f} jobs/s, {result}; "
          f"RSS peak +{(peak - after_fill) / 2**20:.1f} MiB, after "
          f"+{(after_replay - after_fill) / 2**20:.1f} MiB = "
          f"{(after_replay - after_fill) / n:.0f} B/job replayed (queued in rq2: {queued:,})")
    print(f"REPLAY again: {again_s:.1f} s, {again}")


if __name__ == "__main__":
    main()
