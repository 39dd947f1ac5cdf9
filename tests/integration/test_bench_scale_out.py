"""bench/scale_out.py keeps working: two nodes, one redis-benchmark on each, every job
counted and its CPU read; this checkout as both the after and the before, and Disque
beside them when a build of it is at hand (this test never downloads or builds it). No
speed is asserted."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from bench.disque import found as built_disque  # noqa: E402
from bench.scale_out import default_nodes  # noqa: E402


def test_the_default_sizes_follow_the_cores() -> None:
    assert default_nodes(2) == [2, 3, 4]
    assert default_nodes(12) == [2, 3, 4, 5, 6]
    assert default_nodes(64) == [2, 3, 4, 5, 6, 7, 8]


@pytest.mark.skipif(shutil.which("redis-benchmark") is None,
                    reason="no redis-benchmark (make test installs Debian's redis-tools as root)")
def test_a_tiny_run_measures_every_system(tmp_path: Path) -> None:
    out = tmp_path / "scale.json"
    disque = built_disque()
    proc = subprocess.run(
        [sys.executable, "-m", "bench.scale_out", "--nodes", "2", "--replicate", "2,3",
         "--rounds", "1", "--requests", "2000", "--before", str(ROOT), "--quiet",
         *(["--disque-bin", str(disque)] if disque else ["--no-disque"]),
         "--json", str(out), "--workdir", str(tmp_path / "servers")],
        cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "| 2x R2 |" in proc.stdout and "R3" not in proc.stdout  # R > N: skipped
    result = json.loads(out.read_text())
    systems = ["disq", "before"] + (["disque"] if disque else [])
    assert sorted(result["samples"]["2x R2"]) == sorted(systems)
    for system in systems:
        [figures] = result["samples"]["2x R2"][system]
        assert figures["value"] > 0 and figures["cpu_us_per_job"] > 0, system
    assert result["summary"]["2x R2"]["ratio"]["before"]["value"] > 0
