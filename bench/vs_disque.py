"""disq beside antirez's Disque: every single-node and cluster scenario
against both, alternated, with medians and ratios; redis-server as a second reference
where it has an equivalent.

    python -m bench.vs_disque [--runs 5] [--requests 200000] [--cluster-requests 100000]
        [--duration 10] [--memory-jobs 1000000] [--memory-runs 2] [--starts 20]
        [--cases addjob,addjob-P16,cycle,repl3,repl3-P16,memory,startup]
    make bench-disque ARGS="..."                   (the same, in the bench venv)
    python -m bench.vs_disque --runs 1 --requests 20000 --cluster-requests 10000 \\
        --duration 2 --memory-jobs 50000 --memory-runs 1 --starts 3    (a smoke run)

Disque comes from bench/disque.py (--disque-bin, or built once from --disque-src).
Each run measures every case, and within a case every system, on servers started
for that measurement and stopped after it; the order of the systems is reversed
every other run. A case's figure is the median of its runs; its ratio disq ÷ Disque
is the median of the runs' ratios (each from measurements taken back to back).

The cases:
  addjob, addjob-P16     1 node, redis-benchmark -c 50 [-P 16]: ADDJOB q x 0
                         (redis: RPUSH q x); --requests (x4 with -P 16)
  cycle                  1 node, the harness's cycle (bench/scenarios.py): producers
                         ADDJOB, consumers GETJOB TIMEOUT + ACKJOB at once (redis:
                         RPUSH and BLPOP); --duration s, 2 workers x 10 connections
  repl3, repl3-P16       3 nodes joined by CLUSTER MEET, redis-benchmark -c 50 [-P 16]
                         on one: ADDJOB q x 0 REPLICATE 3; --cluster-requests (x4)
  memory                 1 node, --memory-jobs jobs of 100 B queued (pipelined):
                         RSS growth per job (redis: the same bodies in one list)
  startup                exec -> first PING answered, ms; --starts starts
Throughput cases also give the servers' CPU (user + system, every node) per request.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import shlex
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from . import disque
from . import servers as srv
from .common import free_port, redis_benchmark_summary
from .load import cpu_seconds
from .report import write_json
from .scenarios import Settings, run_scenario

OUT = srv.ROOT / "bench" / "out"
COLORS = {"disq": "#1f77b4", "disque": "#ff7f0e", "redis": "#d62728"}
LABELS = {"disq": "disq", "disque": "Disque", "redis": "redis"}


@dataclass(frozen=True)
class Case:
    name: str
    title: str
    kind: str  # "benchmark" (redis-benchmark), "harness" (a bench/scenarios.py scenario),
    # "startup"
    nodes: int
    systems: tuple[str, ...]
    unit: str
    higher_is_better: bool
    goal: float  # disq ÷ Disque the issue asks for (startup: ms)
    pipeline: int = 1


CASES = (
    Case("addjob", "1 node ADDJOB, unpipelined (redis-benchmark -c 50)", "benchmark", 1,
         ("disq", "disque", "redis"), "req/s", True, 0.8),
    Case("addjob-P16", "1 node ADDJOB, -P 16", "benchmark", 1,
         ("disq", "disque", "redis"), "req/s", True, 0.8, 16),
    Case("cycle", "1 node ADDJOB + GETJOB + ACKJOB cycle (bench cycle, 2x10 connections)",
         "harness", 1, ("disq", "disque", "redis"), "jobs/s", True, 0.8),
    Case("repl3", "3 nodes ADDJOB REPLICATE 3, unpipelined", "benchmark", 3,
         ("disq", "disque"), "req/s", True, 1.5),
    Case("repl3-P16", "3 nodes ADDJOB REPLICATE 3, -P 16", "benchmark", 3,
         ("disq", "disque"), "req/s", True, 2.0, 16),
    Case("memory", "memory per queued job (100 B bodies)", "harness", 1,
         ("disq", "disque", "redis"), "B/job", False, 1.0),
    Case("startup", "start-up: exec -> first PING answered", "startup", 1,
         ("disq", "disque", "redis"), "ms", False, 50.0),
)
BY_NAME = {case.name: case for case in CASES}


# -- measuring one case on one system -------------------------------------------------
class Bench:
    def __init__(self, args: argparse.Namespace, disque_bin: Path, workdir: Path) -> None:
        self.args = args
        self.disque_bin = disque_bin
        self.workdir = workdir
        self.settings = Settings(duration=args.duration, memory_jobs=args.memory_jobs,
                                 disq_src=args.disq_src, disque_bin=disque_bin,
                                 progress=False)
        self.count = 0

    def where(self, case: Case, system: str) -> Path:
        self.count += 1  # a fresh directory for every measurement
        return self.workdir / f"{self.count:04d}-{case.name}-{system}"

    def measure(self, case: Case, system: str) -> dict[str, float]:
        if case.kind == "benchmark":
            return self.benchmark(case, system)
        if case.kind == "startup":
            return {"value": startup_ms(system, self.where(case, system), self.disque_bin,
                                        self.args.disq_src)}
        return self.harness(case, system)

    def benchmark(self, case: Case, system: str) -> dict[str, float]:
        servers = srv.start(system, case.nodes, self.where(case, system), "off", 100,
                            self.args.disq_src, self.disque_bin)
        try:
            command = ["RPUSH", "q", "x"] if system == "redis" else ["ADDJOB", "q", "x", "0"]
            if case.nodes > 1:
                command += ["REPLICATE", str(case.nodes)]
            requests = self.args.cluster_requests if case.nodes > 1 else self.args.requests
            requests *= 4 if case.pipeline > 1 else 1
            cpu0 = sum(cpu_seconds(pid) for pid in servers.pids)
            summary = redis_benchmark_summary(servers.addresses[0][1], requests,
                                              case.pipeline, *command)
            cpu = sum(cpu_seconds(pid) for pid in servers.pids) - cpu0
        finally:
            servers.stop()
        return {"value": summary["rps"], "p50_ms": summary["p50"], "p99_ms": summary["p99"],
                "cpu_us_per_request": 1e6 * cpu / requests}

    def harness(self, case: Case, system: str) -> dict[str, float]:
        # memory fills pipelined (16 in flight per connection): only the RSS counts
        settings = (replace(self.settings, pipeline=16) if case.name == "memory"
                    else self.settings)
        record = run_scenario(case.name, system, settings, self.where(case, system))
        if record["status"] != "ok":
            raise RuntimeError(f"{case.name} on {system}: {record['status']}: "
                               f"{record.get('reason') or record.get('error_samples')}")
        if case.name == "memory":
            return {"value": record["memory"]["bytes_per_job"]}
        return {"value": record["jobs_per_s"],
                "p50_ms": record["latency_ms"]["end-to-end"].get("p50", float("nan"))}


def compile_checkout(src: Path) -> None:
    """The bytecode of disq and disq_client, as an installed package has it (pip
    compiles at install; an editable checkout only where Python may write, and never
    with PYTHONDONTWRITEBYTECODE): else every start compiles them again."""
    import compileall

    for package in (src / "disq", src / "clients" / "python" / "disq_client"):
        compileall.compile_dir(str(package), quiet=1)


def startup_argv(system: str, port: int, where: Path, disque_bin: Path) -> list[str]:
    common = ["--port", str(port), "--bind", "127.0.0.1", "--dir", str(where)]
    if system == "disq":
        return [sys.executable, "-m", "disq", *common]
    if system == "disque":
        return [str(disque_bin), *common]
    return ["redis-server", *common, "--save", "", "--appendonly", "no"]


def startup_ms(system: str, where: Path, disque_bin: Path, src: Path = srv.ROOT) -> float:
    """From just before the exec to the first +PONG, polling every 0.5 ms (disq: of
    the checkout at `src`)."""
    where.mkdir(parents=True)
    port = free_port()
    env = srv.disq_env(src)
    argv = startup_argv(system, port, where, disque_bin)
    start = time.perf_counter()
    proc = subprocess.Popen(argv, cwd=where, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = start + 30
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
                    sock.sendall(b"PING\r\n")
                    if sock.recv(100).startswith(b"+PONG"):
                        return (time.perf_counter() - start) * 1000
            except OSError:
                pass
            if proc.poll() is not None:
                raise RuntimeError(f"{system} exited ({proc.returncode}) before answering")
            if time.perf_counter() > deadline:
                raise RuntimeError(f"{system} did not answer PING within 30 s")
            time.sleep(0.0005)
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)  # nothing to save: no need to wait for it
        proc.wait()


# -- the run ----------------------------------------------------------------------------
def rounds(case: Case, args: argparse.Namespace) -> int:
    if case.name == "memory":
        return args.memory_runs
    if case.name == "startup":
        return args.starts
    return args.runs


def run(args: argparse.Namespace, disque_bin: Path, workdir: Path,
        result: dict[str, Any]) -> None:
    """Every case's runs, interleaved: run r measures every case that has an r-th run,
    each system in turn, the order reversed on odd runs."""
    bench = Bench(args, disque_bin, workdir)
    cases = [BY_NAME[name] for name in args.cases]
    if "startup" in args.cases:
        compile_checkout(args.disq_src)
    samples: dict[str, dict[str, list[dict[str, float]]]] = result["samples"]
    for case in cases:
        samples[case.name] = {system: [] for system in systems_of(case)}
    for r in range(max(rounds(case, args) for case in cases)):
        for case in cases:
            if r >= rounds(case, args):
                continue
            order = systems_of(case)
            for system in (order if r % 2 == 0 else order[::-1]):
                figures = bench.measure(case, system)
                samples[case.name][system].append(figures)
                if not args.quiet:
                    print(f"run {r + 1} {case.name:<10} {system:<7} "
                          f"{figures['value']:>12,.1f} {case.unit}", file=sys.stderr)
        write_json(result, args.json)


def systems_of(case: Case) -> list[str]:
    return [s for s in case.systems if s != "redis" or shutil.which("redis-server")]


# -- the report -------------------------------------------------------------------------
def summary(result: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Per case: each system's median, min and max, and disq's ratios."""
    out: dict[str, dict[str, Any]] = {}
    for name, by_system in result["samples"].items():
        values = {s: [f["value"] for f in figs] for s, figs in by_system.items() if figs}
        if "disq" not in values:
            continue
        entry: dict[str, Any] = {"median": {s: statistics.median(v) for s, v in values.items()},
                                 "min": {s: min(v) for s, v in values.items()},
                                 "max": {s: max(v) for s, v in values.items()},
                                 "runs": {s: len(v) for s, v in values.items()},
                                 "ratio": {}}
        cpu = {s: [f["cpu_us_per_request"] for f in figs if "cpu_us_per_request" in f]
               for s, figs in by_system.items()}
        entry["cpu_us_per_request"] = {s: statistics.median(v) for s, v in cpu.items() if v}
        for ref, ref_values in values.items():
            if ref != "disq":  # runs paired in order: run k of both was taken back to back
                pairs = [a / b for a, b in zip(values["disq"], ref_values, strict=False) if b]
                if pairs:
                    entry["ratio"][ref] = statistics.median(pairs)
        out[name] = entry
    return out


def _number(value: float, unit: str) -> str:
    return f"{value:,.1f}" if unit == "ms" else f"{value:,.0f}"


def _figure(value: float, unit: str) -> str:
    return f"{_number(value, unit)} {unit}"


def goal_text(case: Case, entry: dict[str, Any]) -> str:
    if case.name == "startup":
        met = entry["median"]["disq"] <= case.goal
        return f"disq ≤ {case.goal:g} ms: {'met' if met else 'not met'}"
    ratio = entry["ratio"].get("disque")
    if ratio is None:
        return ""
    met = ratio >= case.goal if case.higher_is_better else ratio <= case.goal
    sign = "≥" if case.higher_is_better else "≤"
    return f"{sign} {case.goal:g}: {'met' if met else 'not met'}"


def _cell(entry: dict[str, Any], system: str, unit: str) -> str:
    """A system's median, with the range of its runs."""
    if system not in entry["median"]:
        return "—"
    text = _figure(entry["median"][system], unit)
    if entry["runs"][system] > 1:
        low, high = (_number(entry[k][system], unit) for k in ("min", "max"))
        text += f" ({low}–{high})"
    return text


def _ratio(entry: dict[str, Any], ref: str) -> str:
    return f"{entry['ratio'][ref]:.2f}" if ref in entry["ratio"] else "—"


def markdown(result: dict[str, Any]) -> str:
    table = summary(result)
    lines = [f"`{result['command']}` — {result['date']}, commit {result['commit']}, "
             f"{result['host']}.", "",
             "| case | disq | Disque | disq ÷ Disque | goal | redis | disq ÷ redis |",
             "|---|---|---|---|---|---|---|"]
    for name, entry in table.items():
        case = BY_NAME[name]
        redis = _cell(entry, "redis", case.unit)
        if case.kind == "benchmark" and "redis" in entry["median"]:
            redis = "RPUSH " + redis
        lines.append(f"| {case.title} | {_cell(entry, 'disq', case.unit)} "
                     f"| {_cell(entry, 'disque', case.unit)} | {_ratio(entry, 'disque')} "
                     f"| {goal_text(case, entry)} | {redis} | {_ratio(entry, 'redis')} |")
    lines += ["", "Figures: medians of the runs (min–max); a ratio is the median of the "
              "runs' ratios, each run measuring the systems back to back (the order "
              "reversed every other run). Memory and start-up: lower is better, so a "
              "ratio below 1 favours disq there.", ""]
    cpu_rows = [(BY_NAME[n], e["cpu_us_per_request"]) for n, e in table.items()
                if e["cpu_us_per_request"]]
    if cpu_rows:
        lines += ["| server CPU per request (user + system, all nodes) | disq | Disque "
                  "| redis |", "|---|---|---|---|"]
        for case, cpu in cpu_rows:
            lines.append(f"| {case.title} | " + " | ".join(
                f"{cpu[s]:.1f} µs" if s in cpu else "—" for s in ("disq", "disque", "redis"))
                + " |")
        lines.append("")
    return "\n".join(lines)


def write_png(result: dict[str, Any], path: Path) -> str | None:
    """One panel per case: each system's median, whiskers from min to max of its runs,
    the ratio to Disque in the title. None when written, else why not."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.ticker import FuncFormatter
    except ImportError:
        return "matplotlib is not installed: no PNG (pip install -e '.[bench]' installs it)"
    table = summary(result)
    if not table:
        return "nothing was measured: no PNG"
    columns = min(4, len(table))
    rows = (len(table) + columns - 1) // columns
    fig, axes = plt.subplots(rows, columns, figsize=(3.6 * columns, 3.4 * rows),
                             squeeze=False)
    for ax in axes.flat[len(table):]:
        ax.axis("off")
    for ax, (name, entry) in zip(axes.flat, table.items(), strict=False):
        case = BY_NAME[name]
        systems = list(entry["median"])
        med = [entry["median"][s] for s in systems]
        err = [[m - entry["min"][s] for s, m in zip(systems, med, strict=True)],
               [entry["max"][s] - m for s, m in zip(systems, med, strict=True)]]
        bars = ax.bar([LABELS[s] for s in systems], med, yerr=err, capsize=3,
                      color=[COLORS[s] for s in systems])
        ax.bar_label(bars, labels=[_number(m, case.unit) for m in med], fontsize=7,
                     padding=2)
        ratio = entry["ratio"].get("disque")
        head = f"{name}: disq ÷ Disque {ratio:.2f}" if ratio is not None else name
        ax.set_title(f"{head}\n{case.unit}, " + ("higher" if case.higher_is_better
                                                  else "lower") + " is better", fontsize=9)
        ax.tick_params(labelsize=8)
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:,.0f}"))
        ax.margins(y=0.18)
    fig.suptitle(f"disq vs Disque 1.0-rc1 — {result['date']}, commit {result['commit']}, "
                 f"{result['host']}", fontsize=9)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return None


# -- where and what -----------------------------------------------------------------------
def commit(src: Path) -> str:
    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(src), *args], capture_output=True,
                              text=True).stdout.strip()
    head = git("rev-parse", "--short", "HEAD") or "?"
    dirty = git("status", "--porcelain", "--untracked-files=no")
    return head + (" + uncommitted changes" if dirty else "")


def host() -> str:
    model = "?"
    try:
        with open("/proc/cpuinfo") as fh:
            model = next((line.split(":", 1)[1].strip() for line in fh
                          if line.startswith("model name")), "?")
    except OSError:
        pass
    return (f"{platform.node()}: {os.cpu_count()} cores ({model}), Linux "
            f"{platform.release()}, CPython {platform.python_version()}")


def versions(disque_bin: Path) -> dict[str, str]:
    out = {"disque": disque.version(disque_bin)}
    if shutil.which("redis-server"):
        out["redis"] = subprocess.run(["redis-server", "--version"], capture_output=True,
                                      text=True).stdout.strip()
    return out


def _cases(text: str) -> list[str]:
    names = [n.strip() for n in text.split(",") if n.strip()]
    bad = [n for n in names if n not in BY_NAME]
    if bad or not names:
        raise argparse.ArgumentTypeError("choose from " + ", ".join(BY_NAME))
    return names


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m bench.vs_disque", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cases", type=_cases, default=list(BY_NAME),
                   help="comma-separated (default: all)")
    p.add_argument("--runs", type=int, default=5, help="runs of each throughput case")
    p.add_argument("--requests", type=int, default=200_000,
                   help="redis-benchmark requests, 1 node (x4 with -P 16)")
    p.add_argument("--cluster-requests", type=int, default=100_000,
                   help="redis-benchmark requests, 3 nodes (x4 with -P 16)")
    p.add_argument("--duration", type=float, default=10.0, help="seconds of each cycle")
    p.add_argument("--memory-jobs", type=int, default=1_000_000)
    p.add_argument("--memory-runs", type=int, default=2)
    p.add_argument("--starts", type=int, default=20, help="start-ups of each system")
    p.add_argument("--disq-src", type=Path, default=srv.ROOT,
                   help="checkout whose disq is started (default: this one)")
    p.add_argument("--disque-bin", type=Path, help="a built disque-server (or DISQUE_BIN)")
    p.add_argument("--disque-src", type=Path, help="Disque's source tree, cloned and built "
                   f"when absent (or DISQUE_SRC; default {disque.DEFAULT_SRC})")
    p.add_argument("--json", type=Path, default=OUT / "vs_disque.json")
    p.add_argument("--png", type=Path, default=OUT / "vs_disque.png")
    p.add_argument("--workdir", type=Path, help="server directories (default: a temp dir)")
    p.add_argument("--quiet", action="store_true", help="no line per measurement")
    return p


def begin(module: str, argv: list[str] | None, src: Path,
          disque_bin: Path | None) -> dict[str, Any]:
    """A run's record before its first figure: the command line, the commit of `src`,
    the machine, the date, the references' versions and the load average, printed."""
    command = f"python -m bench.{module} " + shlex.join(sys.argv[1:] if argv is None
                                                         else argv)
    result: dict[str, Any] = {
        "command": command.strip(), "commit": commit(src), "host": host(),
        "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        "versions": versions(disque_bin) if disque_bin else {},
        "disque_bin": str(disque_bin) if disque_bin else None,
        "load": os.getloadavg(), "samples": {}}
    print(f"# {result['command']}\n# {result['date']}, {result['host']}\n"
          f"# {result['versions']}", file=sys.stderr)
    return result


def run_in(workdir: Path | None, prefix: str, result: dict[str, Any],
           measure: Callable[[Path], None]) -> None:
    """`measure` with its servers' directories in `workdir` (else a temporary one);
    Ctrl-C stops it and the record keeps what ran; the load average after it."""
    with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
        try:
            measure(workdir or Path(tmp))
        except KeyboardInterrupt:
            print("interrupted: the report has what ran", file=sys.stderr)
            result["interrupted"] = True
    result["load_after"] = os.getloadavg()


def report(result: dict[str, Any], json_path: Path,
           summarize: Callable[[dict[str, Any]], dict[str, Any]],
           render: Callable[[dict[str, Any]], str]) -> None:
    """The record's summary, the record written as JSON, the Markdown printed."""
    result["summary"] = summarize(result)
    write_json(result, json_path)
    print(render(result))
    print(f"JSON: {json_path}", file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    args.disq_src = args.disq_src.resolve()
    if shutil.which("redis-benchmark") is None:
        sys.exit("redis-benchmark not found (Debian: apt-get install redis-tools)")
    try:
        disque_bin = disque.binary(args.disque_bin, args.disque_src)
    except disque.DisqueUnavailable as exc:
        sys.exit(str(exc))
    result = begin("vs_disque", argv, args.disq_src, disque_bin)
    run_in(args.workdir, "disq-vs-disque-", result,
           lambda workdir: run(args, disque_bin, workdir, result))
    report(result, args.json, summary, markdown)
    problem = write_png(result, args.png)
    print(problem or f"PNG: {args.png}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
