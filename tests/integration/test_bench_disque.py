"""bench/vs_disque.py keeps working: where disque-server comes from, and a
tiny run against both systems when a Disque build is at hand (this test never
downloads or builds it: `python -m bench.disque` does). No speed is asserted."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from bench import disque  # noqa: E402


def test_a_named_binary_must_be_an_executable(tmp_path: Path) -> None:
    with pytest.raises(disque.DisqueUnavailable, match="not an executable"):
        disque.binary(tmp_path / "no-such-disque-server")


def test_a_source_directory_without_disque_says_where_to_put_it(tmp_path: Path) -> None:
    (tmp_path / "something-else").write_text("")
    with pytest.raises(disque.DisqueUnavailable) as raised:
        disque.binary(src=tmp_path)
    text = str(raised.value)
    assert str(tmp_path) in text and "antirez/disque" in text and disque.COMMIT_SHORT in text


def built_disque() -> Path | None:
    return disque.found()


@pytest.mark.skipif(built_disque() is None, reason="no Disque build (python -m bench.disque)")
def test_a_tiny_run_measures_both(tmp_path: Path) -> None:
    out = tmp_path / "vs.json"
    proc = subprocess.run(
        [sys.executable, "-m", "bench.vs_disque", "--cases", "addjob,repl3,memory,startup",
         "--runs", "1", "--requests", "2000", "--cluster-requests", "1000",
         "--memory-jobs", "5000", "--memory-runs", "1", "--starts", "1", "--quiet",
         "--disque-bin", str(built_disque()), "--json", str(out),
         "--png", str(tmp_path / "vs.png"), "--workdir", str(tmp_path / "servers")],
        cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "| 3 nodes ADDJOB REPLICATE 3, unpipelined |" in proc.stdout
    samples = json.loads(out.read_text())["samples"]
    for case in ("addjob", "repl3", "memory", "startup"):
        for system in ("disq", "disque"):
            [figures] = samples[case][system]
            assert figures["value"] > 0, (case, system)
