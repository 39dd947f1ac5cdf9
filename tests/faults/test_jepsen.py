"""Short Jepsen-style runs (tests/faults/jepsen.py): 5 nodes, REPLICATE 3, a nemesis
killing and restarting nodes or cutting links; no job answered with an ID may be lost,
with or without DEDUP keys, and with them no key may have two jobs.
`python tests/faults/jepsen.py --help` runs them longer."""

from __future__ import annotations

from pathlib import Path

import pytest
from jepsen import Config, Result, run

DURATION = 20.0  # s of traffic under faults: about 30 s per test in all


def check(config: Config, workdir: Path) -> Result:
    result = run(config, workdir)
    print(result.summary())
    assert result.drained, f"jobs left per node: {result.leftover}\n{result.summary()}"
    assert not result.lost, f"lost {result.lost[:20]}\n{result.summary()}"
    assert not result.unexpected, result.summary()
    assert not result.two_jobs, f"two jobs: {result.two_jobs[:20]}\n{result.summary()}"
    assert result.added > 0 and sum(result.faults.values()) > 0, result.summary()
    return result


@pytest.mark.timeout(90)
@pytest.mark.parametrize("aof", [True, False], ids=["aof", "memory"])
def test_kill_restart(tmp_path: Path, aof: bool) -> None:
    """kill -9 and restart, at most 2 nodes down at once; without the AOF the victims
    are 2 fixed nodes (a restarted node comes back empty)."""
    check(Config(nemesis="kill", seed=11, duration=DURATION, aof=aof), tmp_path)


@pytest.mark.timeout(90)
def test_kill_restart_with_dedup_keys(tmp_path: Path) -> None:
    """ADDJOB ... DEDUP <body>, sent again after a failure until it gets an ID: no ID
    answered (by asking other nodes too) is lost, and no body has two jobs, though a
    node killed while the copies of an ADDJOB it had not answered were leaving leaves
    copies behind (the retry's copies go to the same nodes: the key's order)."""
    config = Config(nemesis="kill", seed=3, duration=DURATION, aof=False, dedup=True)
    result = check(config, tmp_path)
    assert result.retried > 0 and result.faults["kill"] > 0, result.summary()


@pytest.mark.timeout(90)
def test_kill_restart_with_dedup_batches(tmp_path: Path) -> None:
    """The same with ADDJOBS of 20 jobs (DEDUP-JOBS), as the Spark writer sends them:
    each job's entry of the reply is checked on its own, and the jobs whose entries
    were errors are sent again together to another node."""
    config = Config(nemesis="kill", seed=3, duration=DURATION, aof=False, dedup=True,
                    batch=20)
    result = check(config, tmp_path)
    assert result.retried > 0 and result.faults["kill"] > 0, result.summary()


@pytest.mark.timeout(90)
def test_partitions(tmp_path: Path) -> None:
    """A minority of 1 or 2 nodes cut from the rest, by resets or stuck links, healed."""
    check(Config(nemesis="partition", seed=12, duration=DURATION, aof=False), tmp_path)
