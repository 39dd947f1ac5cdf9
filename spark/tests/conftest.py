"""Fixtures for disq_spark's tests: one local[2] SparkSession per test module and
real disq-server processes (the server's tests/support.py). The tests skip when no
Java runtime is installed; pyspark itself is a test dependency (`make test`)."""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
for path in (ROOT / "tests", ROOT / "clients" / "python", ROOT / "spark"):  # support.py;
    # disq_spark and disq_client of this checkout, even if another one is installed
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))
pytest.register_assert_rewrite("support")

from support import DisqProcess, running_cluster  # noqa: E402

HAS_JAVA = bool(shutil.which("java") or os.environ.get("JAVA_HOME"))


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    if HAS_JAVA:
        return
    skip = pytest.mark.skip(reason="no Java runtime: Spark cannot start")
    for item in items:
        if "spark" in item.fixturenames:
            item.add_marker(skip)


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    """local[2] (2 task threads) where a failed task is tried again (4 attempts)."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    # Spark's Python workers import this checkout's packages, not those another checkout
    # installed in the venv (the JVM and its workers inherit this environment)
    ours = [str(ROOT / "spark"), str(ROOT / "clients" / "python"), str(ROOT)]
    rest = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p and p not in ours]
    os.environ["PYTHONPATH"] = os.pathsep.join(ours + rest)
    from pyspark.sql import SparkSession

    session = (SparkSession.builder.master("local[2,4]").appName("disq-spark-tests")
               .config("spark.ui.enabled", "false")
               .config("spark.sql.shuffle.partitions", "4")
               .config("spark.driver.memory", "1g")
               .config("spark.python.worker.reuse", "true")
               .getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    try:
        yield session
    finally:
        session.stop()


@pytest.fixture(scope="module")
def trio(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[DisqProcess]]:
    """Three formed disq nodes shared by a module's tests (each uses its own queue)."""
    with running_cluster(tmp_path_factory.mktemp("spark-trio")) as nodes:
        yield nodes


@pytest.fixture
def own_trio(tmp_path: Path) -> Iterator[list[DisqProcess]]:
    """Three formed disq nodes for one test (one that kills a node)."""
    with running_cluster(tmp_path) as nodes:
        yield nodes


@pytest.fixture
def node(tmp_path: Path) -> Iterator[DisqProcess]:
    """One disq node for one test."""
    proc = DisqProcess(tmp_path / "node").start()
    try:
        yield proc
    finally:
        proc.stop()
