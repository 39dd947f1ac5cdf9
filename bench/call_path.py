"""How many Python calls, functions and files one request's path takes, in every node
it touches: the measure behind docs/ARCHITECTURE.md's "path of a job" counts, so a
refactor can show what it changed (run it on two checkouts).

    python bench/call_path.py [CHECKOUT ...] [--runs 7] [--case TEXT] [--functions]

Each node of the checkout runs pure Python (`DISQ_PURE_PYTHON=1`: compiled functions
are invisible to a profiler) under a `sys.setprofile` hook that a SIGUSR1 turns on
and the next one turns off, writing every call of a function of the checkout's
`disq` made meanwhile (with the callback it ran under: the outermost disq frame).
A case turns every node's hook on, does its one request, waits for its answer, and
turns them off; the connections it uses are made before. The periodic housekeeping
(`*._run_cron`, at `--hz 1`) is left out; gossip or another timer can still fall in
the window: of `--runs` windows, the one with the fewest calls is kept, node by node,
and `--functions` lists its calls and callbacks so a stray one shows. Cases:

- ADDJOB REPLICATE 3 with the AOF on (appendfsync everysec), three nodes.
- A blocking GETJOB served by federation: a consumer waits in GETJOB on node 0 (its
  NEEDJOBS already sent), then one ADDJOB REPLICATE 1 ASYNC on node 1, whose queue
  has no consumer: node 1 sends the job to node 0, which serves it.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import hiredis  # noqa: E402
from common import free_port, stop, stop_nodes_on_sigterm, wait_port  # noqa: E402

# Runs in each node: the node's own `python -m disq`, with the hook and its switch.
BOOT = r"""
import json, os, runpy, signal, sys
root = os.path.join(os.getcwd(), "disq") + os.sep
out = os.environ["CALL_PATH_OUT"]
calls = []
windows = 0

def layer(filename):
    part = filename[len(root):].split(os.sep)[0]
    return part if part in ("server", "cluster", "replication", "aof") else "core"

def hook(frame, event, arg):
    if event != "call" or not frame.f_code.co_filename.startswith(root):
        return
    outer = frame  # the callback the loop called, below `server/app.py: run`
    layers = []  # of the disq frames under this call, newest first
    back = frame.f_back
    while back is not None and back.f_code is not loop_runner:
        if back.f_code.co_filename.startswith(root):
            outer = back
            layers.append(layer(back.f_code.co_filename))
        back = back.f_back
    mine = layer(frame.f_code.co_filename)
    # a layer entered again from another it called, further down (core -> replication
    # -> core): the doubling back a layered design avoids
    reentry = bool(layers) and layers[0] != mine and mine in layers
    if outer.f_code.co_name == "_run_cron":  # housekeeping's tick: not the request's
        return
    caller = frame.f_back
    calls.append((frame.f_code.co_filename[len(root):], frame.f_code.co_qualname,
                  outer.f_code.co_qualname,
                  caller.f_code.co_filename[len(root):] if caller is not None
                  and caller.f_code.co_filename.startswith(root) else "", reentry))

def switch(signum, frame):
    global windows
    if sys.getprofile() is None:
        calls.clear()
        sys.setprofile(hook)
        open(out + ".on", "w").close()
    else:
        sys.setprofile(None)
        windows += 1
        with open(out + ".tmp", "w") as fh:
            json.dump(calls, fh)
        os.replace(out + ".tmp", out + ".%d" % windows)

signal.signal(signal.SIGUSR1, switch)
from disq.server import app
loop_runner = app.run.__code__
sys.argv = ["disq", *sys.argv[1:]]
runpy.run_module("disq", run_name="__main__", alter_sys=True)
"""

# file (under disq/), function, the callback it ran under, the caller's file, whether
# it enters again a layer (server, cluster, replication, aof, core) that called another
Call = tuple[str, str, str, str, bool]


class Node:
    def __init__(self, proc: subprocess.Popen[bytes], port: int, out: str) -> None:
        self.proc, self.port, self.out = proc, port, out
        self.windows = 0


def request(port: int, *args: str, timeout: float = 30) -> object:
    """One command's reply."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.sendall(_encode(args))
        return _read_reply(sock)


def _encode(args: tuple[str, ...]) -> bytes:
    out = b"*%d\r\n" % len(args)
    for arg in args:
        data = arg.encode()
        out += b"$%d\r\n%s\r\n" % (len(data), data)
    return out


def _read_reply(sock: socket.socket) -> object:
    reader = hiredis.Reader()
    while (reply := reader.gets()) is False:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError("the node closed the connection")
        reader.feed(chunk)
    return reply


def _bytes(reply: object) -> bytes:
    return reply if isinstance(reply, bytes) else b""


@contextmanager
def cluster(checkout: Path, count: int, extra: list[str]) -> Iterator[list[Node]]:
    workdir = tempfile.mkdtemp(prefix="disq-call-path-")
    env = dict(os.environ, DISQ_PURE_PYTHON="1", PYTHONHASHSEED="0",
               PYTHONPATH=os.pathsep.join([str(checkout), str(checkout / "clients" / "python")]))
    nodes: list[Node] = []
    try:
        for i in range(count):
            port = free_port()
            path = Path(workdir, f"node{i}")
            path.mkdir()
            out = str(path / "calls")
            proc = subprocess.Popen(
                [sys.executable, "-c", BOOT, "--port", str(port), "--bind", "127.0.0.1",
                 "--dir", str(path), "--hz", "1", *extra],
                cwd=checkout, env=dict(env, CALL_PATH_OUT=out),
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            nodes.append(Node(proc, port, out))
            wait_port(port, timeout=60)
        for node in nodes[1:]:
            request(nodes[0].port, "CLUSTER", "MEET", "127.0.0.1", str(node.port))
        want = b"cluster_reachable_nodes:%d" % (count - 1)
        _await(lambda: all(want in _bytes(request(n.port, "CLUSTER", "INFO")) for n in nodes),
               "the cluster did not form")
        yield nodes
    finally:
        for node in nodes:
            stop(node.proc)


def _await(condition: Callable[[], bool], failure: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise RuntimeError(failure)
        time.sleep(0.02)


def window(nodes: list[Node], action: Callable[[], None]) -> list[list[Call]]:
    """Every node's calls while `action` runs."""
    for node in nodes:
        marker = Path(node.out + ".on")
        marker.unlink(missing_ok=True)
        node.proc.send_signal(signal.SIGUSR1)
        _await(marker.exists, "a node did not start recording")
    action()
    calls = []
    for node in nodes:
        node.windows += 1
        node.proc.send_signal(signal.SIGUSR1)
        dump = Path(f"{node.out}.{node.windows}")
        _await(dump.exists, "a node did not write its calls")
        calls.append([tuple(call) for call in json.loads(dump.read_text())])
    return calls


def addjob_r3(nodes: list[Node]) -> Callable[[], None]:
    producer = socket.create_connection(("127.0.0.1", nodes[0].port), timeout=30)

    def action() -> None:
        with producer:
            producer.sendall(_encode(("ADDJOB", "q", "x", "5000", "REPLICATE", "3")))
            reply = _read_reply(producer)
        assert isinstance(reply, bytes) and reply.startswith(b"D-"), reply
    return action


def getjob_federation(nodes: list[Node]) -> Callable[[], None]:
    consumer = socket.create_connection(("127.0.0.1", nodes[0].port), timeout=30)
    consumer.sendall(_encode(("GETJOB", "TIMEOUT", "20000", "FROM", "fq")))
    _await(lambda: b"blocked_clients:1" in _bytes(request(nodes[0].port, "INFO", "clients")),
           "the consumer did not block")
    time.sleep(0.3)  # (its NEEDJOBS reaches the peers: not part of the window)

    producer = socket.create_connection(("127.0.0.1", nodes[1].port), timeout=30)

    def action() -> None:
        with producer:
            producer.sendall(_encode(("ADDJOB", "fq", "x", "0", "REPLICATE", "1", "ASYNC")))
            reply = _read_reply(producer)
        assert isinstance(reply, bytes) and reply.startswith(b"D-"), reply
        served = _read_reply(consumer)
        consumer.close()
        assert isinstance(served, list) and served[0][0] == b"fq", served
        time.sleep(0.05)  # node 1 learns the job left (its copy deleted): in the path
    return action


CASES: list[tuple[str, int, list[str], Callable[[list[Node]], Callable[[], None]]]] = [
    ("ADDJOB REPLICATE 3, AOF on", 3, ["--appendonly", "yes", "--appendfsync", "everysec"],
     addjob_r3),
    ("blocking GETJOB served by federation", 2, [], getjob_federation),
]


def measure(checkout: Path, case: str, runs: int) -> list[list[Call]]:
    """Each node's calls of the least noisy of `runs` windows of `case`."""
    _, count, extra, make = next(c for c in CASES if c[0] == case)
    best: list[list[Call] | None] = [None] * count
    with cluster(checkout, count, extra) as nodes:
        for _ in range(runs):
            for i, calls in enumerate(window(nodes, make(nodes))):
                if best[i] is None or len(calls) < len(best[i] or []):
                    best[i] = calls
    return [calls or [] for calls in best]


def summary(calls: list[Call]) -> tuple[int, int, int, int, int]:
    """Calls, distinct functions, distinct files, calls into another file (from a
    function of disq's: not the loop's calls of callbacks), re-entries into a layer."""
    return (len(calls), len({c[:2] for c in calls}), len({c[0] for c in calls}),
            sum(c[3] != "" and c[0] != c[3] for c in calls), sum(c[4] for c in calls))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checkouts", type=Path, nargs="*",
                        default=[Path(__file__).resolve().parent.parent])
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--case", default="", help="only the cases whose name has this")
    parser.add_argument("--functions", action="store_true",
                        help="list each node's functions and callbacks too")
    args = parser.parse_args()
    stop_nodes_on_sigterm()
    print("| case | checkout | node | calls | functions | files | calls into another file "
          "| re-entries into a layer |")
    print("|---|---|---|---|---|---|---|---|")
    for name, *_ in [c for c in CASES if args.case in c[0]]:
        for checkout in args.checkouts:
            nodes = measure(checkout.resolve(), name, args.runs)
            commit = subprocess.run(["git", "-C", str(checkout), "rev-parse", "--short",
                                     "HEAD"], capture_output=True, text=True).stdout.strip()
            calls_in_all: list[Call] = []
            for i, calls in enumerate(nodes):
                print(f"| {name} | {commit} | {i} | " + " | ".join(map(str, summary(calls)))
                      + " |")
                calls_in_all += calls
                if args.functions:
                    for (where, function), times in Counter(c[:2] for c in calls).items():
                        print(f"    {times:4d} {where}: {function}", file=sys.stderr)
                    for root, times in Counter(c[2] for c in calls).items():
                        print(f"    callback {root}: {times} calls", file=sys.stderr)
                    for where, function, *_ in (c for c in calls if c[4]):
                        print(f"    re-entry: {where}: {function}", file=sys.stderr)
            print(f"| {name} | {commit} | all | "
                  + " | ".join(map(str, summary(calls_in_all))) + " |")


if __name__ == "__main__":
    main()
