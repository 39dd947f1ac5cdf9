"""The load generator: worker processes, each driving one or more pipelined connections.

Every worker is a separate process (so that the generator is not the bottleneck)
with raw sockets and a hiredis.Reader (or the beanstalkd reader), a window of up to
`pipeline` requests in flight per connection, and the time each request was sent:
a request's latency runs from its send to its reply. Producers put the send time
(monotonic ns, shared by every process on the machine) at the start of each body,
so consumers measure the end-to-end delay from produce to consume. Workers count
what they did in a shared array (for the progress line and the producers' backlog
cap) and hand back histograms (Counter of microseconds) when done.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import queue
import selectors
import socket
import sys
import time
import traceback
from array import array
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .protocols import STAMP, SYSTEMS, System, read_one

PRODUCE, FETCH, ACK = 0, 1, 2


@dataclass
class WorkerSpec:
    """What one worker process does."""
    index: int
    role: str  # "producer" or "consumer"
    system: str
    queue: str
    addresses: list[tuple[str, int]]  # one connection per entry
    pipeline: int = 1
    body_size: int = 100
    options: dict[str, Any] = field(default_factory=dict)
    jobs: int | None = None  # producer: how many to produce (None: until the deadline)
    batch: int = 1  # consumer: jobs asked per fetch
    fetch_timeout_ms: int = 1000  # consumer: how long a fetch may block (0: never; a
    # blocking fetch is sent alone, after the acks: the next request would wait behind it)
    stop_on_empty: bool = False  # consumer: an empty fetch ends a connection's work
    target: int | None = None  # consumer: stop once every consumer together got this many
    max_backlog: int | None = None  # producer: pause while produced - consumed exceeds it
    rate: float = 0.0  # producer: jobs per second at most (0: as fast as it can)
    e2e: bool = False  # consumer: measure the produce -> consume delay from the bodies


@dataclass
class WorkerResult:
    index: int
    role: str
    produced: int = 0
    consumed: int = 0
    acked: int = 0
    last_produce_ns: int = 0
    last_consume_ns: int = 0
    last_ack_ns: int = 0
    latency_us: dict[str, Counter[int]] = field(default_factory=dict)
    errors: Counter[str] = field(default_factory=Counter)
    error_samples: list[str] = field(default_factory=list)
    cpu_s: float = 0.0
    exception: str | None = None


class Conn:
    __slots__ = ("sock", "reader", "pending", "acks", "done", "fetching")

    def __init__(self, sock: socket.socket, reader: Any) -> None:
        self.sock = sock
        self.reader = reader
        self.pending: deque[tuple[int, int, int]] = deque()  # (kind, sent ns, jobs)
        self.acks: deque[tuple[bytes, int]] = deque()  # ack requests waiting to be sent
        self.done = False
        self.fetching = 0  # fetches in flight


class Worker:
    """One process's load loop (producer or consumer)."""

    def __init__(self, spec: WorkerSpec, counts: Any, times: Any) -> None:
        self.spec = spec
        self.counts = counts
        self.times = times
        self.system: System = SYSTEMS[spec.system](spec.queue, spec.body_size, spec.options)
        self.result = WorkerResult(spec.index, spec.role)
        self.conns: list[Conn] = []
        s = self.system
        self.lat = {PRODUCE: array("q"), FETCH: array("q"), ACK: array("q")}
        self.e2e = array("q")
        self.names = {PRODUCE: s.produce_name,
                      FETCH: s.fetch_name if spec.fetch_timeout_ms else s.drain_name,
                      ACK: s.ack_name}
        self.budget = spec.jobs
        self.acks_in_flight = 0
        self.sent = 0
        self.fetch_request = s.fetch(spec.batch, spec.fetch_timeout_ms)

    def connect(self) -> None:
        for address in self.spec.addresses:
            sock = socket.create_connection(address, timeout=30)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            conn = Conn(sock, self.system.reader())
            for request in self.system.setup(self.spec.role):
                sock.sendall(request)
                read_one(sock, conn.reader)
            sock.settimeout(None)
            self.conns.append(conn)

    # -- counters shared with the parent and the other workers ------------------------
    def publish(self) -> None:
        slot = 2 * self.spec.index
        self.counts[slot] = self.result.produced
        self.counts[slot + 1] = self.result.consumed

    def consumed_total(self) -> int:
        return sum(self.counts[1::2])

    def backlog(self) -> int:
        counts = self.counts[:]
        return sum(counts[0::2]) - sum(counts[1::2])

    def error(self, name: str, text: str) -> None:
        self.result.errors[name] += 1
        if len(self.result.error_samples) < 5:
            self.result.error_samples.append(f"{name}: {text}")

    # -- sending ----------------------------------------------------------------------
    def fill_producer(self, conn: Conn) -> bool:
        """Top up the window; False when held back by the rate or the backlog cap."""
        room = self.spec.pipeline - len(conn.pending)
        if self.budget is not None:
            room = min(room, self.budget)
        if room <= 0:
            return True
        now = time.monotonic_ns()
        if self.spec.rate:
            room = min(room, int((now - self.times[0]) * self.spec.rate / 1e9) + 1 - self.sent)
            if room <= 0:
                return False
        if self.spec.max_backlog is not None and self.backlog() >= self.spec.max_backlog:
            return False
        request = self.system.produce(b"%019d" % now + self.system.pad)
        conn.sock.sendall(request * room if room > 1 else request)
        conn.pending.extend([(PRODUCE, now, 1)] * room)
        self.sent += room
        if self.budget is not None:
            self.budget -= room
        return True

    def fill_consumer(self, conn: Conn) -> None:
        room = self.spec.pipeline - len(conn.pending)
        if room <= 0:
            return
        now = time.monotonic_ns()
        parts = []
        while conn.acks and room > 0:
            request, jobs = conn.acks.popleft()
            parts.append(request)
            conn.pending.append((ACK, now, jobs))
            self.acks_in_flight += 1
            room -= 1
        if self.spec.fetch_timeout_ms:  # a blocked fetch holds the connection: one at a time
            room = min(room, 1 - conn.fetching)
        if room > 0 and not conn.done:
            parts.append(self.fetch_request * room)
            conn.pending.extend([(FETCH, now, 0)] * room)
            conn.fetching += room
        if parts:
            conn.sock.sendall(b"".join(parts))

    # -- receiving --------------------------------------------------------------------
    def on_replies(self, conn: Conn) -> None:
        data = conn.sock.recv(65536)
        if not data:
            raise ConnectionError("connection closed by the server")
        reader = conn.reader
        reader.feed(data)
        now = time.monotonic_ns()
        system, result, lat = self.system, self.result, self.lat
        while (reply := reader.gets()) is not False:
            kind, sent, jobs = conn.pending.popleft()
            lat[kind].append((now - sent) // 1000)
            if kind == PRODUCE:
                problem = system.produced(reply)
                if problem is None:
                    result.produced += 1
                    result.last_produce_ns = now
                else:
                    self.error(self.names[PRODUCE], problem)
            elif kind == FETCH:
                conn.fetching -= 1
                got = system.fetched(reply)
                if got.error is not None:
                    self.error(self.names[FETCH], got.error)
                elif not got.items:
                    if self.spec.stop_on_empty:
                        conn.done = True
                else:
                    result.consumed += len(got.items)
                    result.last_consume_ns = now
                    if self.spec.e2e:
                        for _, body in got.items:
                            head = body[:STAMP]
                            if head.isdigit():
                                self.e2e.append((now - int(head)) // 1000)
                    ids = [job_id for job_id, _ in got.items if job_id is not None]
                    if ids:
                        requests = system.ack(ids)
                        per = len(ids) // max(1, len(requests))
                        conn.acks.extend((request, per) for request in requests)
            else:
                count, problem = system.acked(reply)
                self.acks_in_flight -= 1
                result.acked += count
                result.last_ack_ns = now
                if problem is not None:
                    self.error(self.names[ACK], problem)

    # -- the loop ---------------------------------------------------------------------
    def run(self) -> WorkerResult:
        spec = self.spec
        cpu = time.process_time()
        producer = spec.role == "producer"
        sel = selectors.DefaultSelector()
        for conn in self.conns:
            sel.register(conn.sock, selectors.EVENT_READ, conn)
        ready = list(self.conns)
        paused = finishing = False
        while True:
            deadline = self.times[1]  # the parent may move it (stall, interrupt)
            if deadline and time.monotonic_ns() >= deadline:
                break
            if producer:
                paused = False
                for conn in ready:
                    if not self.fill_producer(conn):
                        paused = True
                if self.budget == 0 and not any(c.pending for c in self.conns):
                    break
            else:
                if (not finishing and spec.target is not None
                        and self.consumed_total() >= spec.target):
                    finishing = True  # no more fetches: only our acks remain
                    for conn in self.conns:
                        conn.done = True
                for conn in ready:
                    self.fill_consumer(conn)
                if finishing and not self.acks_in_flight and not any(
                        c.acks for c in self.conns):
                    break
                if all(c.done and not c.pending and not c.acks for c in self.conns):
                    break
            events = sel.select(0.001 if paused else 0.05)
            ready = list(self.conns) if paused else []
            for key, _ in events:
                self.on_replies(key.data)
                if not paused:
                    ready.append(key.data)
            self.publish()
        for conn in self.conns:
            conn.sock.close()
        self.publish()
        result = self.result
        for kind, samples in self.lat.items():
            if samples:
                result.latency_us[self.names[kind]] = Counter(samples)
        if self.e2e:
            result.latency_us["end-to-end"] = Counter(self.e2e)
        result.cpu_s = time.process_time() - cpu
        return result


def worker_main(spec: WorkerSpec, counts: Any, times: Any, go: Any, results: Any) -> None:
    """Process entry: connect, say ready, wait for the start, run, hand back results."""
    try:
        worker = Worker(spec, counts, times)
        worker.connect()
        results.put(("ready", spec.index))
        go.wait()
        results.put(("done", worker.run()))
    except BaseException:  # noqa: BLE001 - every failure goes back to the parent
        results.put(("done", WorkerResult(spec.index, spec.role,
                                          exception=traceback.format_exc())))


@dataclass
class PhaseResult:
    workers: list[WorkerResult]
    start_ns: int
    end_ns: int
    server_cpu_s: float
    stopped: str = ""  # why the phase was cut short, if it was


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (0 if it is gone)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Progress:
    """One `\\r` line on stderr while a phase runs."""

    def __init__(self, label: str, enabled: bool) -> None:
        self.label = label
        self.enabled = enabled
        self.width = 0

    def show(self, fraction: float, elapsed: float, produced: int, consumed: int) -> None:
        if not self.enabled:
            return
        fraction = min(max(fraction, 0.0), 1.0)
        bar = "#" * int(fraction * 20)
        rate = max(produced, consumed) / elapsed if elapsed > 0 else 0.0
        line = (f"\r{self.label} [{bar:<20}] {fraction * 100:3.0f}% {elapsed:5.1f}s  "
                f"produced {produced:,}  consumed {consumed:,}  ({rate:,.0f}/s)")
        self.width = max(self.width, len(line))
        sys.stderr.write(line.ljust(self.width))
        sys.stderr.flush()

    def close(self) -> None:
        if self.enabled and self.width:
            sys.stderr.write("\r" + " " * self.width + "\r")
            sys.stderr.flush()


def run_phase(specs: list[WorkerSpec], duration: float | None, progress: Progress,
              goal: int | None = None, server_pids: list[int] | None = None,
              start_timeout: float = 60.0, stall_s: float = 15.0,
              on_tick: Callable[[], None] | None = None) -> PhaseResult:
    """Run the workers together: start them, release them at once, wait for them.
    `goal` (jobs) or `duration` drives the progress line."""
    ctx = mp.get_context("fork")
    counts = ctx.RawArray("q", 2 * len(specs))
    times = ctx.RawArray("q", 2)
    go = ctx.Event()
    results = ctx.Queue()
    procs = [ctx.Process(target=worker_main, args=(spec, counts, times, go, results),
                         daemon=True) for spec in specs]
    for proc in procs:
        proc.start()
    done: dict[int, WorkerResult] = {}
    stalled = ""
    try:
        ready = 0
        deadline = time.monotonic() + start_timeout
        while ready < len(specs):
            tag, value = results.get(timeout=max(0.1, deadline - time.monotonic()))
            if tag == "ready":
                ready += 1
            else:
                done[value.index] = value
                if value.exception:
                    raise RuntimeError(f"worker {value.index} failed to start:\n"
                                       + value.exception)
        cpu0 = sum(cpu_seconds(pid) for pid in server_pids or [])
        start = time.monotonic_ns()
        times[0] = start
        times[1] = start + int(duration * 1e9) if duration else 0
        go.set()
        last_change, last_counts = time.monotonic(), (0, 0)
        while len(done) < len(specs):
            try:
                tag, value = results.get(timeout=0.2)
                done[value.index] = value
            except queue.Empty:
                pass
            except KeyboardInterrupt:
                times[1] = time.monotonic_ns()  # every worker stops at its next turn
                stalled = "interrupted"
                continue
            elapsed = (time.monotonic_ns() - start) / 1e9
            snapshot = counts[:]
            produced, consumed = sum(snapshot[0::2]), sum(snapshot[1::2])
            if (produced, consumed) != last_counts:
                last_change, last_counts = time.monotonic(), (produced, consumed)
            elif time.monotonic() - last_change > stall_s and not stalled:
                times[1] = time.monotonic_ns()
                stalled = f"no progress for {stall_s:.0f} s: stopped"
            if goal:
                fraction = max(produced, consumed) / goal
            elif duration:
                fraction = elapsed / duration
            else:
                fraction = 0.0
            progress.show(fraction, elapsed, produced, consumed)
            if on_tick:
                on_tick()
            if not any(p.is_alive() for p in procs) and results.empty():
                break
        end = time.monotonic_ns()
        cpu1 = sum(cpu_seconds(pid) for pid in server_pids or [])
    finally:
        progress.close()
        go.set()
        for proc in procs:
            proc.join(5)
            if proc.is_alive():
                proc.kill()
                proc.join()
    missing = [spec.index for spec in specs if spec.index not in done]
    for index in missing:
        done[index] = WorkerResult(index, specs[index].role,
                                   exception="the worker process died without a result")
    return PhaseResult([done[spec.index] for spec in specs], start, end, cpu1 - cpu0,
                       stalled)
