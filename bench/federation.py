"""Federation figures: cycle latency across nodes and bulk transfer.

    python bench/federation.py [--jobs 2000] [--bulk 200000]

Starts three nodes on free loopback ports and joins them. Cycle latency: ADDJOB on
node A, GETJOB + ACKJOB on node B, one job in flight, timed from the ADDJOB sent
until B's GETJOB returned that job (the consumer is already blocked on B); prints
p50/p90/p99/max in ms. Bulk: `--bulk N` jobs queued on A first (pipelined, REPLICATE
1, RETRY 0), then drained from B with GETJOB COUNT 1000; prints jobs per second.
"""

from __future__ import annotations

import argparse
import socket
import statistics
import tempfile
import threading
import time

from cluster import command, start_cluster
from common import stop


def read_reply(sock: socket.socket, buf: bytearray) -> None:
    """Read until the end of one reply we know the shape of (a line, or an array of
    one job whose last line ends the reply): enough for timing."""
    while True:
        chunk = sock.recv(65536)
        if not chunk:
            raise RuntimeError("connection closed")
        buf += chunk
        if buf.endswith(b"\r\n"):
            return


def bulk(port_a: int, port_b: int, total: int) -> float:
    """Queue `total` jobs on A, then time draining them from B: jobs per second."""
    producer = socket.create_connection(("127.0.0.1", port_a))
    batch = 1000
    for _ in range(0, total, batch):
        producer.sendall(b"ADDJOB bulk x 0 REPLICATE 1 RETRY 0\r\n" * batch)
        got = b""
        while got.count(b"\r\n") < batch:
            got += producer.recv(1 << 20)
    consumer = socket.create_connection(("127.0.0.1", port_b))
    moved = 0
    start = time.perf_counter()
    while moved < total:
        consumer.sendall(b"GETJOB TIMEOUT 2000 COUNT 1000 FROM bulk\r\n")
        buf = b""
        while True:  # read until every line of the reply is here
            buf += consumer.recv(1 << 20)
            if buf == b"*-1\r\n":
                raise RuntimeError(f"only {moved} of {total} jobs reached B")
            count = int(buf[1:buf.index(b"\r\n")])
            if buf.count(b"\r\n") >= 1 + count * 7:  # *3, $, queue, $, id, $, body
                break
        moved += count
    return moved / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--bulk", type=int, default=0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as workdir:
        nodes = start_cluster(workdir)
        try:
            port_a, port_b = nodes[0][1], nodes[1][1]
            producer = socket.create_connection(("127.0.0.1", port_a))
            consumer = socket.create_connection(("127.0.0.1", port_b))
            for s in (producer, consumer):
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            latencies = []
            for i in range(args.jobs):
                consumer.sendall(b"GETJOB TIMEOUT 5000 FROM cycle\r\n")
                ready = threading.Event()
                reply = bytearray()

                def wait_job(reply: bytearray = reply, ready: threading.Event = ready) -> None:
                    read_reply(consumer, reply)
                    ready.set()

                waiter = threading.Thread(target=wait_job)
                waiter.start()
                time.sleep(0.001)  # let GETJOB reach B and block there
                start = time.perf_counter()
                producer.sendall(b"ADDJOB cycle job%d 0 REPLICATE 1\r\n" % i)
                got_id = bytearray()
                read_reply(producer, got_id)
                ready.wait(10)
                latencies.append((time.perf_counter() - start) * 1000)
                waiter.join()
                job_id = bytes(got_id[1:41])
                if job_id not in reply:
                    raise RuntimeError(f"B got {bytes(reply)[:100]!r}, expected {job_id!r}")
                consumer.sendall(b"ACKJOB " + job_id + b"\r\n")
                read_reply(consumer, bytearray())
            latencies.sort()
            q = statistics.quantiles(latencies, n=100, method="inclusive")
            print("| cycles | p50 ms | p90 ms | p99 ms | max ms |")
            print("|---|---|---|---|---|")
            print(f"| {len(latencies)} | {q[49]:.2f} | {q[89]:.2f} | {q[98]:.2f} "
                  f"| {latencies[-1]:.2f} |")
            command(port_a, "PING")
            if args.bulk:
                rate = bulk(port_a, port_b, args.bulk)
                print(f"\nbulk: {args.bulk} queued jobs moved A->B at {rate:,.0f} jobs/s")
        finally:
            for proc, _ in nodes:
                stop(proc)


if __name__ == "__main__":
    main()
