"""A Spark test that runs out of time fails alone: the module's session works for the
tests after it (pytest-timeout's exception leaves the thread's py4j connection waiting for
the timed-out job's reply, and the job holding the task slots, until the fixture cleans
up; conftest.py)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from typing import Any

import pytest

INNER = "DISQ_SPARK_TIMEOUT_INNER"  # set in the pytest run the test below starts
inner_only = pytest.mark.skipif(not os.environ.get(INNER), reason="run by the test below")


@inner_only
def test_inner_the_session_starts(spark: Any) -> None:
    """(so that the next test's time is its job's, not the session's start)"""
    assert spark.range(10).count() == 10


@inner_only
@pytest.mark.timeout(30)
def test_inner_a_job_that_never_ends(spark: Any) -> None:
    spark.sparkContext.parallelize([1], 1).map(lambda _: time.sleep(3600)).collect()


@inner_only
def test_inner_the_next_test_gets_a_working_session(spark: Any) -> None:
    assert spark.range(100).count() == 100
    assert spark.sparkContext.parallelize(range(10), 2).sum() == 45


@pytest.mark.skipif(not (shutil.which("java") or os.environ.get("JAVA_HOME")),
                    reason="no Java runtime: Spark cannot start")
@pytest.mark.timeout(600)
def test_a_timed_out_test_does_not_break_the_next() -> None:
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-n", "0", "-p", "no:cacheprovider",
         "-k", "inner", "-o", "timeout=120", __file__],
        env={**os.environ, INNER: "1"}, capture_output=True, text=True, timeout=600)
    summary = run.stdout.strip().splitlines()[-1] if run.stdout.strip() else run.stderr
    assert "1 failed, 2 passed" in summary, run.stdout[-3000:] + run.stderr[-2000:]
    assert "FAILED" in run.stdout and "test_inner_a_job_that_never_ends" in run.stdout
