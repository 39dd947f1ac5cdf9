"""`python -m bench`: run scenarios against disq and the reference systems, print the
report, write the JSON and the PNG chart."""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import shlex
import sys
import tempfile
from pathlib import Path
from typing import Any

from . import disque, report
from .scenarios import SCENARIOS, Settings, run_scenario
from .scenarios import __doc__ as scenarios_doc
from .servers import ROOT, parse_address

SYSTEMS = ("disq", "disque", "redis", "beanstalkd")
DEFAULT_SYSTEMS = ("disq", "redis", "beanstalkd")  # disque: built on first use (a download)
OUT = ROOT / "bench" / "out"


def _names(choices: tuple[str, ...], all_word: str | None = None) -> Any:
    def parse(text: str) -> list[str]:
        names = [n.strip() for n in text.split(",") if n.strip()]
        if all_word and names == [all_word]:
            return list(choices)
        bad = [n for n in names if n not in choices]
        if bad or not names:
            raise argparse.ArgumentTypeError(
                f"choose from {', '.join(choices)}" + (f" or {all_word}" if all_word else ""))
        return names
    return parse


def _targets(text: str) -> tuple[str, list[tuple[str, int]]]:
    system, sep, addresses = text.partition("=")
    if not sep:
        system, addresses = "disq", text
    if system not in SYSTEMS:
        raise argparse.ArgumentTypeError(f"unknown system {system!r}")
    try:
        return system, [parse_address(a) for a in addresses.split(",") if a.strip()]
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"bad address in {text!r}") from exc


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError("must be 1 or more")
    return value


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m bench",
        description="Benchmark disq against redis-server (a list queue) and beanstalkd, "
                    "each started on free loopback ports.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=scenarios_doc)
    p.add_argument("--scenario", type=_names(SCENARIOS, "all"), default=list(SCENARIOS),
                   help="comma-separated: " + ", ".join(SCENARIOS) + " or all (default all)")
    p.add_argument("--systems", type=_names(SYSTEMS), default=list(DEFAULT_SYSTEMS),
                   help="comma-separated from " + ", ".join(SYSTEMS) + " (default "
                        + ",".join(DEFAULT_SYSTEMS) + "); a reference that is not "
                        "installed is skipped; disque is antirez's Disque (bench/disque.py "
                        "finds or builds it) and runs --nodes nodes as disq does")
    p.add_argument("--nodes", type=_positive, default=1,
                   help="disq nodes (cross-node always uses 3); references run one")
    p.add_argument("--replicate", type=_positive, help="ADDJOB REPLICATE n")
    p.add_argument("--async", dest="async_", action="store_true", help="ADDJOB ASYNC")
    p.add_argument("--retry", type=int, help="ADDJOB RETRY seconds")
    p.add_argument("--ack", choices=("ackjob", "fastack", "none"), default="ackjob",
                   help="how disq consumers acknowledge (beanstalkd: delete unless none)")
    p.add_argument("--pipeline", type=_positive, default=1,
                   help="requests in flight per connection (default 1)")
    p.add_argument("--connections", type=_positive, default=10,
                   help="connections per worker process (default 10)")
    p.add_argument("--workers", type=_positive, default=2,
                   help="load processes; cycle scenarios split them between producers "
                        "and consumers, at least one each (default 2)")
    p.add_argument("--body-size", type=int, default=100,
                   help="job body bytes, 19 or more: the body starts with the produce "
                        "time (default 100)")
    size = p.add_mutually_exclusive_group()
    size.add_argument("--duration", type=float, default=10.0,
                      help="seconds per measured phase (default 10)")
    size.add_argument("--jobs", type=_positive,
                      help="jobs per scenario instead of a duration")
    p.add_argument("--prefill", type=_positive, default=200_000,
                   help="jobs queued before consume and drain when no --jobs (default 200k)")
    p.add_argument("--memory-jobs", type=_positive, default=1_000_000,
                   help="jobs the memory scenario queues (default 1M)")
    p.add_argument("--batch", type=_positive, default=1,
                   help="GETJOB COUNT of consumers in consume and cycle (default 1)")
    p.add_argument("--drain-batch", type=_positive, default=1000,
                   help="GETJOB COUNT / LPOP count in drain (default 1000)")
    p.add_argument("--max-backlog", type=_positive, default=1000,
                   help="cycle producers pause while this many jobs wait (default 1000); "
                        "at saturation the end-to-end delay is mostly that wait")
    p.add_argument("--rate", type=float, default=0.0,
                   help="cycle scenarios: produce at most this many jobs/s, to measure the "
                        "end-to-end delay below saturation (default 0: as fast as possible)")
    p.add_argument("--aof", choices=("off", "everysec", "always"), default="off",
                   help="disq and redis: --appendonly yes --appendfsync X; beanstalkd: "
                        "binlog fsynced every 1000 ms or every write")
    p.add_argument("--targets", type=_targets, action="append", default=[],
                   metavar="[SYSTEM=]HOST:PORT,...",
                   help="use running servers instead of starting them (no SYSTEM: disq)")
    p.add_argument("--disq-src", type=Path, default=ROOT,
                   help="checkout whose disq is started (default: this one)")
    disque_options(p)
    p.add_argument("--json", type=Path, default=OUT / "bench.json")
    p.add_argument("--png", type=Path, default=OUT / "bench.png")
    p.add_argument("--workdir", type=Path, help="server directories (default: a temp dir)")
    p.add_argument("--quiet", action="store_true", help="no progress line")
    return p


def disque_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--disque-bin", type=Path,
                   help="antirez's disque-server to run (default: DISQUE_BIN, else built "
                        "from --disque-src)")
    p.add_argument("--disque-src", type=Path,
                   help="Disque's source tree, cloned and built there when absent "
                        f"(default: DISQUE_SRC, else {disque.DEFAULT_SRC})")


def machine() -> dict[str, Any]:
    return {"cpus": os.cpu_count(), "platform": platform.platform(),
            "python": platform.python_version(), "host": platform.node()}


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.body_size < 19:
        parser().error("--body-size must be 19 or more")
    disque_bin = None
    if "disque" in args.systems and "disque" not in dict(args.targets):
        try:
            disque_bin = disque.binary(args.disque_bin, args.disque_src)
        except disque.DisqueUnavailable as exc:  # its cases are skipped, with this
            print(f"disque: {exc}", file=sys.stderr)
    settings = Settings(
        nodes=args.nodes, replicate=args.replicate, async_=args.async_, retry=args.retry,
        ack=args.ack, pipeline=args.pipeline, connections=args.connections,
        workers=args.workers, body_size=args.body_size,
        duration=args.duration, jobs=args.jobs, prefill=args.prefill,
        memory_jobs=args.memory_jobs, batch=args.batch,
        drain_batch=args.drain_batch, max_backlog=args.max_backlog, rate=args.rate, aof=args.aof,
        targets=dict(args.targets), disq_src=args.disq_src.resolve(), disque_bin=disque_bin,
        progress=not args.quiet and sys.stderr.isatty())
    command = "python -m bench " + shlex.join(sys.argv[1:] if argv is None else argv)
    result: dict[str, Any] = {
        "command": command.strip(),
        "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        "machine": machine(), "settings": settings.public(), "records": []}
    print(f"# {result['command']}\n# {result['date']}, {machine()['cpus']} cores: the "
          "servers and the load processes share them", file=sys.stderr)
    with tempfile.TemporaryDirectory(prefix="disq-bench-") as tmp:
        workdir = args.workdir or Path(tmp)
        try:
            for scenario in args.scenario:
                for system in args.systems:
                    record = run_scenario(scenario, system, settings, workdir)
                    result["records"].append(record)
                    result["ratios"] = report.ratios(result["records"])
                    report.write_json(result, args.json)
                    print(one_line(record), file=sys.stderr)
        except KeyboardInterrupt:  # the servers of the case running were stopped
            print("interrupted: the report has what ran", file=sys.stderr)
            result["interrupted"] = True
    print(report.markdown(result))
    print(f"JSON: {args.json}", file=sys.stderr)
    problem = report.write_png(result, args.png)
    print(problem or f"PNG: {args.png}", file=sys.stderr)
    return 0 if all(r["status"] != "failed" for r in result["records"]) else 1


def one_line(record: dict[str, Any]) -> str:
    head = f"{record['scenario']:<10} {record['system']:<10}"
    if record["status"] in ("skipped", "failed"):
        return f"{head} {record['status']}: {record.get('reason', '')}"
    if record["scenario"] == "memory":
        m = record["memory"]
        return (f"{head} {m['queued_jobs']:,} jobs, {m['bytes_per_job']:.0f} bytes/job "
                f"({m['beyond_body']:.0f} beyond the body)")
    errors = sum(record["errors"].values())
    return (f"{head} {record['jobs_per_s']:,.0f} jobs/s"
            + (f", {errors} errors" if errors else "")
            + (f" ({record['status']}: {record['stopped']})" if record["stopped"] else ""))
