"""The scenarios: which workers run against which nodes, and what each run reports.

produce     producers only: ADDJOB / RPUSH / put
consume     a queue filled first (--prefill jobs, not measured), then consumers only:
            GETJOB NOHANG + ACKJOB / LPOP / reserve-with-timeout 0 + delete, until it
            is empty
cycle       producers and consumers at once on the same nodes; consumers block
            (GETJOB TIMEOUT / BLPOP / reserve-with-timeout), one fetch in flight per
            connection, acks sent before it; end-to-end delay from the produce time in
            each body to its consumption
cross-node  the cycle with producers on one disq node and consumers on the others
            (3 nodes: jobs cross the cluster); a reference has one node, so for it
            this is the cycle again
drain       a queue filled first, then emptied with batched fetches (GETJOB NOHANG
            COUNT --drain-batch / LPOP count / reserve), acked by one ACKJOB per batch;
            with --nodes 3 filled on one node and drained from the others with blocking
            GETJOBs (that is what makes the nodes move jobs)
memory      --memory-jobs (default 1,000,000) jobs queued on a fresh server: RSS and bytes
            per job
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from . import servers as srv
from .load import PhaseResult, Progress, WorkerSpec, run_phase

SCENARIOS = ("produce", "consume", "cycle", "cross-node", "drain", "memory")
CLUSTERED = ("disq", "disque")  # the systems that run --nodes nodes, and take ADDJOB's options


@dataclass
class Settings:
    """The knobs of a run (the command line's flags)."""
    nodes: int = 1
    replicate: int | None = None
    async_: bool = False
    retry: int | None = None
    ack: str = "ackjob"  # ackjob | fastack | none
    pipeline: int = 1
    connections: int = 10
    workers: int = 2
    body_size: int = 100
    duration: float = 10.0
    jobs: int | None = None
    prefill: int = 200_000
    memory_jobs: int = 1_000_000
    batch: int = 1
    drain_batch: int = 1000
    max_backlog: int = 1000  # cycle: producers pause while this many jobs wait
    rate: float = 0.0  # cycle: jobs/s all producers together (0: as fast as they can)
    aof: str = "off"
    targets: dict[str, list[tuple[str, int]]] = field(default_factory=dict)
    disq_src: Path = srv.ROOT
    disque_bin: Path | None = None  # antirez's disque-server (bench/disque.py)
    progress: bool = True

    def disq_options(self) -> dict[str, Any]:
        return {"replicate": self.replicate, "async": self.async_, "retry": self.retry,
                "ack": self.ack}

    def public(self) -> dict[str, Any]:
        out = asdict(self)
        out["async"] = out.pop("async_")
        out["targets"] = {k: [f"{h}:{p}" for h, p in v] for k, v in self.targets.items()}
        out["disq_src"] = str(self.disq_src)
        out["disque_bin"] = str(self.disque_bin) if self.disque_bin else None
        return out


# -- statistics ---------------------------------------------------------------------------
def percentiles(hist: Counter[int]) -> dict[str, float]:
    """count, p50/p90/p99/max in ms from a histogram of microseconds."""
    total = sum(hist.values())
    out: dict[str, float] = {"count": total}
    if not total:
        return out
    keys = sorted(hist)
    marks = [("p50", 0.50), ("p90", 0.90), ("p99", 0.99)]
    seen, i = 0, 0
    for key in keys:
        seen += hist[key]
        while i < len(marks) and seen >= marks[i][1] * total:
            out[marks[i][0]] = key / 1000
            i += 1
    out["max"] = keys[-1] / 1000
    return out


def summarize(phase: PhaseResult, role_of_headline: str, local: bool = True) -> dict[str, Any]:
    """Counts, rates, latency percentiles and errors of one measured phase."""
    workers = phase.workers
    hists: dict[str, Counter[int]] = {}
    errors: Counter[str] = Counter()
    samples: list[str] = []
    for w in workers:
        for name, hist in w.latency_us.items():
            hists.setdefault(name, Counter()).update(hist)
        errors.update(w.errors)
        samples += w.error_samples
        if w.exception:
            samples.append(w.exception.strip().splitlines()[-1])
    produced = sum(w.produced for w in workers)
    consumed = sum(w.consumed for w in workers)
    if role_of_headline == "producer":
        done, last = produced, max((w.last_produce_ns for w in workers), default=0)
    else:
        # a consumed job is done once acknowledged, when it is
        done, last = consumed, max((max(w.last_consume_ns, w.last_ack_ns) for w in workers),
                                   default=0)
    elapsed = max(last - phase.start_ns, 1) / 1e9 if done else (
        phase.end_ns - phase.start_ns) / 1e9
    wall = (phase.end_ns - phase.start_ns) / 1e9
    load_cpu = sum(w.cpu_s for w in workers)
    return {
        "elapsed_s": round(elapsed, 3),
        "jobs": {"produced": produced, "consumed": consumed,
                 "acked": sum(w.acked for w in workers)},
        "jobs_per_s": round(done / elapsed, 1) if elapsed else 0.0,
        "commands_per_s": {name: round(sum(h.values()) / wall, 1)
                           for name, h in hists.items() if name != "end-to-end"},
        "latency_ms": {name: percentiles(h) for name, h in hists.items()},
        "errors": dict(errors),
        "error_samples": samples[:5],
        # CPU of the servers (all nodes together; None for --targets) and of the load
        # processes, in % of one core over the phase's wall time
        "cpu": {"server_s": round(phase.server_cpu_s, 2) if local else None,
                "server_pct": round(100 * phase.server_cpu_s / wall, 1) if local and wall
                else None,
                "load_s": round(load_cpu, 2),
                "load_pct": round(100 * load_cpu / wall, 1) if wall else 0},
        "stopped": phase.stopped,
        "failed_workers": [w.exception for w in workers if w.exception],
    }


# -- building the workers -----------------------------------------------------------------
def spread(addresses: list[tuple[str, int]], workers: int, connections: int,
           first: int = 0) -> list[list[tuple[str, int]]]:
    """Connections of each worker, round-robin over the addresses."""
    out, k = [], first
    for _ in range(workers):
        conns = []
        for _ in range(connections):
            conns.append(addresses[k % len(addresses)])
            k += 1
        out.append(conns)
    return out


def split(total: int, parts: int) -> list[int]:
    return [total // parts + (1 if i < total % parts else 0) for i in range(parts)]


class Run:
    """One scenario against one system's servers."""

    def __init__(self, scenario: str, system: str, settings: Settings, servers: srv.Servers,
                 queue: str) -> None:
        self.scenario = scenario
        self.system = system
        self.s = settings
        self.servers = servers
        self.queue = queue
        self.options = (settings.disq_options() if system in CLUSTERED
                        else {"ack": settings.ack})

    def spec(self, index: int, role: str, addresses: list[tuple[str, int]],
             **kw: Any) -> WorkerSpec:
        kw.setdefault("pipeline", self.s.pipeline)
        return WorkerSpec(index=index, role=role, system=self.system, queue=self.queue,
                          addresses=addresses, body_size=self.s.body_size,
                          options=self.options, **kw)

    def progress(self, what: str) -> Progress:
        return Progress(f"{self.scenario:<10} {self.system:<10} {what:<8}", self.s.progress)

    def phase(self, specs: list[WorkerSpec], what: str, goal: int | None,
              duration: float | None, headline: str = "consumer") -> dict[str, Any]:
        """Run the workers and summarize; `headline`: whose jobs/s the record gives."""
        result = run_phase(specs, duration, self.progress(what), goal, self.servers.pids)
        return summarize(result, headline, bool(self.servers.procs))

    def fill(self, addresses: list[tuple[str, int]], jobs: int) -> dict[str, Any]:
        """Queue `jobs` jobs before the measured phase (pipelined, not timed)."""
        workers = max(1, self.s.workers)
        specs = [self.spec(i, "producer", conns, jobs=n, pipeline=max(self.s.pipeline, 32))
                 for i, (conns, n) in enumerate(zip(
                     spread(addresses, workers, self.s.connections), split(jobs, workers),
                     strict=True))]
        result = self.phase(specs, "prefill", jobs, None, "producer")
        if result["jobs"]["produced"] < jobs:
            raise RuntimeError(f"prefill queued {result['jobs']['produced']} of {jobs} jobs: "
                               f"{result['error_samples']}")
        return result

    def duration(self) -> float | None:
        return None if self.s.jobs else self.s.duration

    # -- the scenarios --------------------------------------------------------------------
    def produce(self) -> dict[str, Any]:
        w, jobs = self.s.workers, self.s.jobs
        counts = split(jobs, w) if jobs else [None] * w
        specs = [self.spec(i, "producer", conns, jobs=n) for i, (conns, n) in enumerate(
            zip(spread(self.servers.addresses, w, self.s.connections), counts, strict=True))]
        return self.phase(specs, "run", jobs, self.duration(), "producer")

    def consume(self) -> dict[str, Any]:
        total = self.s.jobs or self.s.prefill
        prefill = self.fill(self.servers.addresses, total)
        w = self.s.workers
        specs = [self.spec(i, "consumer", conns, batch=self.s.batch, stop_on_empty=True,
                           target=total, fetch_timeout_ms=0)
                 for i, conns in enumerate(spread(self.servers.addresses, w,
                                                  self.s.connections))]
        out = self.phase(specs, "run", total, self.duration())
        out["prefill"] = {"jobs": total, "jobs_per_s": prefill["jobs_per_s"]}
        return out

    def cycle(self, cross: bool = False) -> dict[str, Any]:
        addresses = self.servers.addresses
        if cross and len(addresses) > 1:
            produce_to, consume_from = addresses[:1], addresses[1:]
        else:
            produce_to = consume_from = addresses
        producers = max(1, self.s.workers // 2)
        consumers = max(1, self.s.workers - producers)
        jobs = self.s.jobs
        counts = split(jobs, producers) if jobs else [None] * producers
        # producers pause while --max-backlog jobs wait, so that the queue does not grow
        # without end when they outrun the consumers (they look every millisecond: a cap
        # much below 1000 would cap the rate); at saturation the end-to-end delay is
        # that queue's, below it (--rate) the system's
        backlog = self.s.max_backlog
        specs = [self.spec(i, "producer", conns, jobs=n, max_backlog=backlog,
                           rate=self.s.rate / producers)
                 for i, (conns, n) in enumerate(zip(
                     spread(produce_to, producers, self.s.connections), counts, strict=True))]
        specs += [self.spec(producers + i, "consumer", conns, batch=self.s.batch, e2e=True,
                            target=jobs)
                  for i, conns in enumerate(spread(consume_from, consumers,
                                                   self.s.connections))]
        out = self.phase(specs, "run", jobs, self.duration())
        out["max_backlog"] = backlog
        out["produce_nodes"] = [f"{h}:{p}" for h, p in produce_to]
        out["consume_nodes"] = [f"{h}:{p}" for h, p in consume_from]
        return out

    def drain(self) -> dict[str, Any]:
        addresses = self.servers.addresses
        total = self.s.jobs or self.s.prefill
        prefill = self.fill(addresses[:1], total)
        source = addresses[1:] if len(addresses) > 1 else addresses
        w = self.s.workers
        # from another node a fetch must block: that is what asks the others for jobs
        wait = 1000 if source is not addresses else 0
        specs = [self.spec(i, "consumer", conns, batch=self.s.drain_batch, stop_on_empty=True,
                           target=total, fetch_timeout_ms=wait)
                 for i, conns in enumerate(spread(source, w, self.s.connections))]
        out = self.phase(specs, "run", total, self.duration())
        out["prefill"] = {"jobs": total, "jobs_per_s": prefill["jobs_per_s"],
                          "node": "{}:{}".format(*addresses[0])}
        out["drain_nodes"] = [f"{h}:{p}" for h, p in source]
        return out

    def memory(self) -> dict[str, Any]:
        pids = self.servers.pids
        if not pids:
            raise srv.Skip("memory needs servers this run started (not --targets)")
        jobs = self.s.memory_jobs
        time.sleep(0.5)
        before = [srv.rss(pid) for pid in pids]
        w = self.s.workers
        specs = [self.spec(i, "producer", conns, jobs=n) for i, (conns, n) in enumerate(zip(
            spread(self.servers.addresses, w, self.s.connections), split(jobs, w),
            strict=True))]
        out = self.phase(specs, "fill", jobs, None, "producer")
        time.sleep(0.5)
        after = [srv.rss(pid) for pid in pids]
        queued = out["jobs"]["produced"]
        per_job = (sum(after) - sum(before)) / queued if queued else 0.0
        out["memory"] = {
            "queued_jobs": queued, "body_bytes": self.s.body_size,
            "rss_before_mib": [round(b / 2**20, 1) for b in before],
            "rss_after_mib": [round(a / 2**20, 1) for a in after],
            "bytes_per_job": round(per_job, 1),
            "beyond_body": round(per_job - self.s.body_size, 1),
        }
        return out

    def run(self) -> dict[str, Any]:
        if self.scenario == "cross-node":
            return self.cycle(cross=True)
        return getattr(self, self.scenario)()


def nodes_for(scenario: str, system: str, settings: Settings) -> int:
    if system not in CLUSTERED:
        return 1
    return 3 if scenario == "cross-node" else settings.nodes


def run_scenario(scenario: str, system: str, settings: Settings, workdir: Path) -> dict[str, Any]:
    """Start the servers (or use the targets), run, stop; always returns a record."""
    nodes = nodes_for(scenario, system, settings)
    record: dict[str, Any] = {"scenario": scenario, "system": system, "nodes": nodes,
                              "status": "ok"}
    queue = f"bench-{scenario}"
    targets = settings.targets.get(system)
    servers: srv.Servers | None = None
    try:
        if targets:
            if scenario == "cross-node" and system in CLUSTERED and len(targets) < 2:
                raise srv.Skip(f"cross-node needs two or more {system} --targets")
            queue = f"bench-{scenario}-{int(time.time())}"
            servers = srv.Servers(system, targets)
            record["nodes"] = len(targets)
        else:
            servers = srv.start(system, nodes, workdir / f"{scenario}-{system}",
                                settings.aof, settings.body_size, settings.disq_src,
                                settings.disque_bin)
        record["addresses"] = [f"{h}:{p}" for h, p in servers.addresses]
        record.update(Run(scenario, system, settings, servers, queue).run())
        if record.get("failed_workers") or record.get("stopped"):
            record["status"] = "failed" if record.get("failed_workers") else "partial"
    except srv.Skip as skip:
        record.update(status="skipped", reason=str(skip))
    except Exception as exc:  # noqa: BLE001 - one failed case does not end the run
        record.update(status="failed", reason=f"{type(exc).__name__}: {exc}")
    finally:
        if servers is not None:
            if servers.procs:
                servers.stop()
            elif targets:
                try:
                    srv.cleanup_target(system, targets, queue)
                except Exception as exc:  # noqa: BLE001
                    record["cleanup_error"] = str(exc)
    return record
