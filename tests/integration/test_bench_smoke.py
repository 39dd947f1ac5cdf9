"""The benchmark harness keeps working: each scenario runs for about a second against
disq alone (one node; three for cross-node) and counts jobs. No speed is asserted."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCENARIOS = ("produce", "consume", "cycle", "cross-node", "drain", "memory")


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_scenario_runs_and_counts_jobs(scenario: str, tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    proc = subprocess.run(
        [sys.executable, "-m", "bench", "--scenario", scenario, "--systems", "disq",
         "--duration", "1", "--prefill", "2000", "--memory-jobs", "5000",
         "--workers", "2", "--connections", "2", "--pipeline", "4", "--quiet",
         "--json", str(out), "--png", str(tmp_path / "bench.png"),
         "--workdir", str(tmp_path / "servers")],
        cwd=ROOT, capture_output=True, text=True, timeout=100)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"### {scenario}:" in proc.stdout
    result = json.loads(out.read_text())
    [record] = result["records"]
    assert record["status"] == "ok", record
    assert record["nodes"] == (3 if scenario == "cross-node" else 1)
    jobs = record["jobs"]
    latency = record["latency_ms"]
    if scenario in ("produce", "memory"):
        assert jobs["produced"] > 0 and latency["ADDJOB"]["count"] > 0
    if scenario in ("consume", "cycle", "cross-node", "drain"):
        assert jobs["consumed"] > 0 and jobs["acked"] > 0
        assert latency["GETJOB"]["count"] > 0 and latency["ACKJOB"]["count"] > 0
    if scenario in ("consume", "drain"):
        assert jobs["consumed"] == 2000  # the whole prefilled queue
    if scenario in ("cycle", "cross-node"):
        assert jobs["produced"] > 0 and latency["end-to-end"]["count"] > 0
    if scenario == "memory":
        assert record["memory"]["queued_jobs"] == 5000
        assert record["memory"]["bytes_per_job"] > 0
    assert record["errors"] == {}


def test_delivery_bench_runs_on_disq() -> None:
    """bench/delivery.py against disq: a few jobs of each scenario, each reported. The
    priority case's inversions are a measurement (0 on a quiet machine; a node that
    waits for a peer's best priority waits 100 ms at most, which a loaded machine can
    exceed): test_federation checks the ordering itself, awaiting its conditions."""
    proc = subprocess.run(
        [sys.executable, "-m", "bench.delivery", "--systems", "disq", "--jobs", "4",
         "--nacks", "2"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "scheduled AT" in proc.stdout and "scheduled DELAY-MS" in proc.stdout
    assert proc.stdout.count("NACK on A") == 2
    assert "110 deliveries on A, " in proc.stdout and " inversions " in proc.stdout


def test_job_ends_bench_runs() -> None:
    """bench/job_ends.py: a few waits across nodes and a few kept results, each reported."""
    proc = subprocess.run(
        [sys.executable, "bench/job_ends.py", "--jobs", "20", "--batch", "10",
         "--results", "200"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.count("ACK to WAITJOB answer") == 2
    assert "200 results of 100 bytes kept" in proc.stdout
