"""A node's start-up, exec -> first PING answered, of one or more disq checkouts
(before/after a change), alternated, beside the floor under it: the interpreter alone,
and the interpreter importing what any asyncio node needs.

    python -m bench.startup [--starts 20] CHECKOUT [CHECKOUT ...]

Each round starts every checkout's node once (the order reversed every other round)
and runs each floor command once; medians and ranges of the rounds, and each
checkout's median ratio to the first one's. Bytecode is compiled first, as an
installed package has it (bench/vs_disque.py: compile_checkout).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from .servers import disq_env
from .vs_disque import compile_checkout, startup_ms

FLOOR = {
    "python -c pass": "pass",
    "python importing asyncio, uvloop, hiredis, msgpack":
        "import asyncio, uvloop, hiredis, msgpack",
    "python importing every module a plain node imports (first checkout)":
        "import disq.__main__, disq.server.app, disq.replication.replicator; "
        "from disq.server.commands import load_commands; load_commands()",
}


def exec_ms(code: str, env: dict[str, str]) -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], env=env, check=True)
    return (time.perf_counter() - start) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checkouts", type=Path, nargs="+")
    parser.add_argument("--starts", type=int, default=20)
    args = parser.parse_args()
    checkouts = [c.resolve() for c in args.checkouts]
    for checkout in checkouts:
        compile_checkout(checkout)
    env = disq_env(checkouts[0])
    node: dict[Path, list[float]] = {c: [] for c in checkouts}
    floor: dict[str, list[float]] = {name: [] for name in FLOOR}
    with tempfile.TemporaryDirectory(prefix="disq-startup-") as tmp:
        for r in range(args.starts):
            for k, checkout in enumerate(checkouts if r % 2 == 0 else checkouts[::-1]):
                node[checkout].append(startup_ms("disq", Path(tmp) / f"{r}-{k}",
                                                 Path("/nonexistent"), checkout))
            for name, code in FLOOR.items():
                floor[name].append(exec_ms(code, env))
    print(f"| {args.starts} rounds | median | range | ÷ first checkout |")
    print("|---|---|---|---|")
    for checkout, values in node.items():
        ratio = statistics.median(v / f for v, f in zip(values, node[checkouts[0]],
                                                        strict=True))
        print(f"| exec -> PING, {checkout} | {statistics.median(values):.1f} ms "
              f"| {min(values):.0f}–{max(values):.0f} | {ratio:.2f} |")
    for name, values in floor.items():
        print(f"| {name} | {statistics.median(values):.1f} ms "
              f"| {min(values):.0f}–{max(values):.0f} | |")


if __name__ == "__main__":
    main()
