"""Fixtures for disq_spark's tests: one local[2] SparkSession per test module and
real disq-server processes (the server's tests/support.py). The tests skip when no
Java runtime is installed; pyspark itself is a test dependency (`make test`).

A test out of time fails alone. Its Spark jobs and streams are cancelled from another
thread at WATCHDOG_SHARE of its timeout (`SharedSession.cancel_everything`), so the call
it waits in ends with Spark's error: pytest-timeout's SIGALRM may reach one of py4j's
threads and never the main one, and when it does reach it, its exception leaves the
thread's py4j connection waiting for the job's reply, which the next call then reads, and
the job on the task slots (one test out of time on a loaded machine failed the five after
it). After a failed test the session is cleaned up and checked, and made anew when it
does not answer (`SharedSession.clean_up`)."""

from __future__ import annotations

import os
import shutil
import sys
import threading
import time
from collections.abc import Callable, Generator, Iterator
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
# A Spark test's time unless it says otherwise: on a loaded 2-core machine a session's
# start and a streaming test took minutes (the suite's 120 s timed them out)
SPARK_TEST_TIMEOUT_S = 360
WATCHDOG_SHARE = 0.8  # the rest of the timeout: for the test to fail and clean up
CLEAN_UP_TIMEOUT_S = 120  # each step of the clean-up after a failed test
CALL_REPORT = pytest.StashKey[pytest.TestReport]()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    skip = pytest.mark.skip(reason="no Java runtime: Spark cannot start")
    for item in items:
        if "spark" not in item.fixturenames:
            continue
        if not HAS_JAVA:
            item.add_marker(skip)
        elif item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(SPARK_TEST_TIMEOUT_S))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item,
                              call: pytest.CallInfo[None]) -> Generator[None, Any, Any]:
    report = yield
    if report.when == "call":
        item.stash[CALL_REPORT] = report
    return report


def new_session() -> Any:
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
    return session


def in_a_thread_of_its_own(work: Callable[[], Any]) -> bool:
    """Whether `work` returned within CLEAN_UP_TIMEOUT_S, run by a new thread: py4j
    gives it a connection (and a JVM thread) of its own, not the one left waiting."""
    done: list[Any] = []
    thread = threading.Thread(target=lambda: done.append(work()), daemon=True)
    thread.start()
    thread.join(CLEAN_UP_TIMEOUT_S)
    return bool(done)


class SharedSession:
    """A module's SparkSession, made again when a test left it broken."""

    def __init__(self) -> None:
        self.session: Any = None

    def get(self) -> Any:
        if self.session is None:
            self.session = new_session()
        return self.session

    def cancel_everything(self) -> None:
        """Stop the session's streams and cancel its jobs (from any thread)."""
        if self.session is not None:
            for query in self.session.streams.active:
                query.stop()
            self.session.sparkContext.cancelAllJobs()

    def clean_up(self) -> None:
        """After a failed test: its py4j connection dropped, its streams stopped and jobs
        cancelled (only one test at a time uses the session), then the session checked
        with a job of its own; a session that does not answer is stopped and made anew
        for the next test."""
        session = self.session
        if session is None:
            return
        # (py4j's pinned threads, pyspark's default: a connection per Python thread)
        client = session.sparkContext._gateway._gateway_client
        connection = getattr(client, "get_thread_connection", lambda: None)()
        if connection is not None:
            connection.close(True)  # the next call of this thread opens another

        def stop_everything() -> bool:
            self.cancel_everything()
            return bool(session.range(10).count() == 10)

        if not in_a_thread_of_its_own(stop_everything):
            in_a_thread_of_its_own(session.stop)
            self.session = None

    def stop(self) -> None:
        if self.session is not None:
            self.session.stop()


@pytest.fixture(scope="module")
def shared_spark() -> Iterator[SharedSession]:
    shared = SharedSession()
    try:
        yield shared
    finally:
        shared.stop()


@pytest.fixture
def spark(shared_spark: SharedSession, request: pytest.FixtureRequest) -> Iterator[Any]:
    """The module's session (`new_session`), its jobs cancelled when the test runs out
    of time, cleaned up after a test that failed."""
    started = time.monotonic()
    session = shared_spark.get()
    marker = request.node.get_closest_marker("timeout")
    timeout = float(marker.args[0]) if marker and marker.args else SPARK_TEST_TIMEOUT_S
    watchdog = threading.Timer(timeout * WATCHDOG_SHARE - (time.monotonic() - started),
                               shared_spark.cancel_everything)
    watchdog.daemon = True
    watchdog.start()
    yield session
    watchdog.cancel()
    report = request.node.stash.get(CALL_REPORT, None)
    if report is None or report.failed:
        shared_spark.clean_up()


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
