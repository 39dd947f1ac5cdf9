"""Delivery across nodes: scheduled jobs, NACKed jobs and priorities when
the consumer is on another node than the job.

    python -m bench.delivery [--jobs 300] [--disque-jobs 40] [--nacks 20] [--disque-nacks 3]
                             [--skip scheduled,nack,priority] [--disque-bin PATH]

Three nodes of disq (and of antirez's Disque where it has the feature; bench/disque.py
finds or builds it), one consumer blocked on B (`GETJOB TIMEOUT`), one job at a time:

- scheduled: ADDJOB on A with `AT` (Unix ms) or `DELAY-MS`, due 50-250 ms ahead
  (the two kinds alternate), default REPLICATE; lateness = the time B's GETJOB reply
  was read minus the due time, on the machine's one clock. Disque has DELAY in
  seconds: `DELAY 1`, lateness counted from the ADDJOB sent + 1 s.
- nack: a job added on A (RETRY 60), taken on A by a GETJOB there and NACKed there
  while B's consumer waits; the time from the NACK sent to B's reply.
- priority: 100 jobs PRIORITY 200 on A, then 10 PRIORITY 0 on B (REPLICATE 1), then
  a consumer on A takes them one at a time (GETJOB, ACKJOB): a delivery is an
  inversion when a more urgent job was still queued on either node. Disque has no
  priorities.
"""

from __future__ import annotations

import argparse
import random
import socket
import tempfile
import time
from pathlib import Path
from typing import Any

import hiredis

from . import disque
from . import servers as srv
from .protocols import resp


class Conn:
    """One RESP connection: requests sent at once, replies read in order."""

    def __init__(self, address: tuple[str, int]) -> None:
        self.sock = socket.create_connection(address, timeout=60)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.reader = hiredis.Reader()

    def send(self, *args: object) -> None:
        self.sock.sendall(resp(*(a if isinstance(a, bytes) else str(a).encode()
                                 for a in args)))

    def read(self) -> Any:
        while (reply := self.reader.gets()) is False:
            data = self.sock.recv(1 << 16)
            if not data:
                raise ConnectionError("closed")
            self.reader.feed(data)
        if isinstance(reply, hiredis.ReplyError):
            raise RuntimeError(str(reply))
        return reply

    def call(self, *args: object) -> Any:
        self.send(*args)
        return self.read()

    def close(self) -> None:
        self.sock.close()


def wall_ms() -> float:
    return time.time_ns() / 1e6


def percentiles(values: list[float]) -> dict[str, float]:
    values = sorted(values)
    return {"n": len(values), "p50_ms": round(values[len(values) // 2], 2),
            "p99_ms": round(values[min(len(values) - 1, int(len(values) * 0.99))], 2),
            "max_ms": round(values[-1], 2)}


def wait_blocked(address: tuple[str, int], queue: str) -> None:
    """Until a consumer is blocked on `queue` there (QSTAT's `blocked`)."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        stat = srv.command(address, "QSTAT", queue)
        if isinstance(stat, list) and dict(zip(stat[::2], stat[1::2], strict=True))[b"blocked"] >= 1:
            return
        time.sleep(0.001)
    raise RuntimeError("the consumer did not block")


def scheduled(nodes: srv.Servers, jobs: int, system: str) -> dict[str, dict[str, float]]:
    a, b = Conn(nodes.addresses[0]), Conn(nodes.addresses[1])
    kinds = ["AT", "DELAY-MS"] if system == "disq" else ["DELAY"]
    late: dict[str, list[float]] = {kind: [] for kind in kinds}
    queue = f"sched-{random.randrange(1 << 30)}"
    for i in range(jobs):
        kind = kinds[i % len(kinds)]
        b.send("GETJOB", "TIMEOUT", 10_000, "FROM", queue)
        wait_blocked(nodes.addresses[1], queue)
        ahead = random.randint(50, 250)
        sent = wall_ms()
        if kind == "AT":
            due = float(int(sent) + ahead)
            a.call("ADDJOB", queue, "x", 0, "AT", int(due))
        elif kind == "DELAY-MS":
            due = sent + ahead
            a.call("ADDJOB", queue, "x", 0, "DELAY-MS", ahead)
        else:
            due = sent + 1000
            a.call("ADDJOB", queue, "x", 0, "DELAY", 1)
        reply = b.read()
        read_at = wall_ms()
        if not reply:
            raise RuntimeError(f"{kind} job {i}: B's GETJOB timed out")
        late[kind].append(read_at - due)
        b.call("ACKJOB", reply[0][1])
    a.close()
    b.close()
    return {kind: percentiles(values) for kind, values in late.items()}


def nack(nodes: srv.Servers, rounds: int, origin: str) -> dict[str, float]:
    a, b, c = (Conn(address) for address in nodes.addresses)
    took: list[float] = []
    queue = f"nack-{random.randrange(1 << 30)}"
    for i in range(rounds):
        producer = a if origin == "A" else c
        job_id = producer.call("ADDJOB", queue, "x", 0, "RETRY", 60)
        assert a.call("GETJOB", "TIMEOUT", 5000, "FROM", queue)[0][1] == job_id
        b.send("GETJOB", "TIMEOUT", 30_000, "FROM", queue)
        wait_blocked(nodes.addresses[1], queue)
        sent = wall_ms()
        a.call("NACK", job_id)
        reply = b.read()
        if not reply:
            raise RuntimeError(f"round {i}: the NACKed job did not reach B in 30 s")
        took.append(wall_ms() - sent)
        b.call("ACKJOB", job_id)
    for conn in (a, b, c):
        conn.close()
    return percentiles(took)


def priority(nodes: srv.Servers) -> str:
    a, b = Conn(nodes.addresses[0]), Conn(nodes.addresses[1])
    queue = f"prio-{random.randrange(1 << 30)}"
    for i in range(100):
        a.call("ADDJOB", queue, f"200-{i}", 0, "PRIORITY", 200, "REPLICATE", 1)
    for i in range(10):
        b.call("ADDJOB", queue, f"0-{i}", 0, "PRIORITY", 0, "REPLICATE", 1)
    left = {0: 10, 200: 100}
    inversions = delivered = 0
    first_urgent = None
    while delivered < 110:
        reply = a.call("GETJOB", "TIMEOUT", 5000, "FROM", queue)
        if not reply:
            break
        level = int(reply[0][2].split(b"-")[0])
        if any(left[p] for p in left if p < level):
            inversions += 1
        left[level] -= 1
        if level == 0 and first_urgent is None:
            first_urgent = delivered
        delivered += 1
        a.call("ACKJOB", reply[0][1])
    a.close()
    b.close()
    return (f"{delivered} deliveries on A, {inversions} inversions (a PRIORITY 200 job "
            f"delivered while a PRIORITY 0 one was queued on B); the first PRIORITY 0 "
            f"job was delivery #{first_urgent}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=300)
    parser.add_argument("--nacks", type=int, default=20)
    parser.add_argument("--disque-jobs", type=int, default=40)
    parser.add_argument("--disque-nacks", type=int, default=3)
    parser.add_argument("--skip", default="")
    parser.add_argument("--disque-bin")
    parser.add_argument("--disque-src")
    parser.add_argument("--systems", default="disq,disque")
    args = parser.parse_args(argv)
    skip = set(args.skip.split(","))
    for system in args.systems.split(","):
        with tempfile.TemporaryDirectory() as workdir:
            if system == "disque":
                binary = disque.binary(args.disque_bin, args.disque_src)
                nodes = srv.start_disque(3, Path(workdir), binary)
            else:
                nodes = srv.start_disq(3, Path(workdir))
            try:
                if "scheduled" not in skip:
                    jobs = args.jobs if system == "disq" else args.disque_jobs
                    for kind, figures in scheduled(nodes, jobs, system).items():
                        print(f"{system} scheduled {kind}, consumer on another node: "
                              f"lateness {figures}", flush=True)
                if "nack" not in skip:
                    rounds = args.nacks if system == "disq" else args.disque_nacks
                    for origin in ("A", "C"):
                        print(f"{system} NACK on A of a job added on {origin}, consumer "
                              f"blocked on B: {nack(nodes, rounds, origin)}", flush=True)
                if "priority" not in skip and system == "disq":
                    print(f"{system} priority across nodes: {priority(nodes)}", flush=True)
            finally:
                nodes.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
