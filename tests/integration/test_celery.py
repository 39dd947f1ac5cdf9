"""A real Celery worker on disq: the Python client's kombu transport as its broker and
its result backend (docs/guides/celery.md). Tasks, results, a retry, an ETA not run
early, a chord, and a 3-node run with a node killed mid-run losing no task."""

from __future__ import annotations

import importlib.util
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from disq_client import Client
from support import ROOT, DisqProcess, wait_for

pytest.importorskip("celery")

APP_SOURCE = '''
import os
import time

import disq_client.celery_backend  # registers disq:// for Celery's result_backend
import disq_client.kombu_transport  # registers disq:// with kombu
from celery import Celery

app = Celery("disqtest", broker=os.environ["DISQ_BROKER"], backend=os.environ["DISQ_BACKEND"])
app.conf.update(
    task_acks_late=True,
    worker_prefetch_multiplier=1,
    worker_enable_remote_control=False,
    broker_connection_retry_on_startup=True,
    broker_transport_options={"visibility_timeout": int(os.environ["DISQ_VISIBILITY"]),
                              "replicate": 2},
    result_backend_transport_options={"replicate": 2},
)
LOG = os.environ["DISQ_TASK_LOG"]


def record(*fields):
    with open(LOG, "a") as log:
        log.write(" ".join(map(str, fields)) + "\\n")


@app.task(name="add")
def add(x, y):
    record("add", x, y)
    return x + y


@app.task(name="total")
def total(values):
    record("total", sum(values))
    return sum(values)


@app.task(name="stamp")
def stamp(key):
    now = time.time()
    record("stamp", key, now)
    return now


@app.task(name="flaky", bind=True, max_retries=3)
def flaky(self, key):
    with open(LOG, "a+") as log:
        log.seek(0)
        tries = sum(1 for line in log if line.startswith(f"flaky {key} "))
    record("flaky", key, time.time())
    if tries == 0:
        raise self.retry(countdown=1)
    return tries + 1


@app.task(name="hang_once")
def hang_once(key):
    with open(LOG, "a+") as log:
        log.seek(0)
        tries = sum(1 for line in log if line.startswith(f"hang {key} "))
    record("hang", key, os.getpid())
    if tries == 0:
        time.sleep(120)  # the first worker is killed meanwhile
    return tries + 1


@app.task(name="step")
def step(i):
    time.sleep(0.05)
    record("step", i)
    return i
'''


def broker_url(nodes: list[DisqProcess]) -> str:
    return ";".join(f"disq://127.0.0.1:{node.port}" for node in nodes)


def load_app(path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"disq_celery_app_{id(path)}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class CeleryRun:
    """The test app (its module, loaded in this process too, to send tasks and read
    results) and its worker processes, on the nodes given."""

    def __init__(self, tmp_path: Path, nodes: list[DisqProcess], visibility: int,
                 monkeypatch: pytest.MonkeyPatch) -> None:
        self.app_dir = tmp_path / "app"
        self.app_dir.mkdir()
        (self.app_dir / "disqtest.py").write_text(APP_SOURCE)
        self.log = tmp_path / "tasks.log"
        self.log.touch()
        self.worker_log = tmp_path / "worker.log"
        url = broker_url(nodes)
        settings = {"DISQ_BROKER": url, "DISQ_BACKEND": url,
                    "DISQ_VISIBILITY": str(visibility), "DISQ_TASK_LOG": str(self.log)}
        for name, value in settings.items():  # read by the app module loaded here
            monkeypatch.setenv(name, value)
        self.env = dict(os.environ, **settings, PYTHONPATH=os.pathsep.join(
            [str(self.app_dir), str(ROOT / "clients" / "python"), str(ROOT),
             os.environ.get("PYTHONPATH", "")]))
        self.module = load_app(self.app_dir / "disqtest.py")
        self.workers: list[subprocess.Popen[bytes]] = []

    def start_worker(self) -> subprocess.Popen[bytes]:
        with open(self.worker_log, "ab") as out:
            worker = subprocess.Popen(
                [sys.executable, "-m", "celery", "-A", "disqtest", "worker", "--pool=solo",
                 "--without-mingle", "--without-gossip", "--without-heartbeat",
                 "--loglevel=INFO"], cwd=self.app_dir, env=self.env, stdout=out,
                stderr=subprocess.STDOUT)
        self.workers.append(worker)
        return worker

    def stop(self) -> None:
        for worker in self.workers:
            if worker.poll() is not None:
                continue
            worker.send_signal(signal.SIGTERM)
            try:
                worker.wait(10)
            except subprocess.TimeoutExpired:
                worker.kill()
                worker.wait(5)
        self.module.app.close()


@pytest.fixture
def celery_run(tmp_path: Path,
               monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., CeleryRun]]:
    """celery_run(nodes, visibility=5): the app and one worker started; every worker
    is stopped at the end."""
    runs: list[CeleryRun] = []

    def run(nodes: list[DisqProcess], visibility: int = 5) -> CeleryRun:
        runs.append(CeleryRun(tmp_path, nodes, visibility, monkeypatch))
        runs[-1].start_worker()
        return runs[-1]

    yield run
    for started in runs:
        started.stop()


def lines(log: Path, kind: str) -> list[list[str]]:
    return [line.split()[1:] for line in log.read_text().splitlines()
            if line.startswith(kind + " ")]


def test_tasks_retry_eta_and_chord(make_cluster: Callable[..., list[DisqProcess]],
                                   celery_run: Callable[..., CeleryRun]) -> None:
    from celery import chord
    nodes = make_cluster(3)
    run = celery_run(nodes)
    module, log = run.module, run.log
    # plain tasks and their results
    assert module.add.delay(2, 3).get(timeout=30) == 5
    results = [module.add.delay(i, 1) for i in range(5)]
    assert [r.get(timeout=20) for r in results] == [1, 2, 3, 4, 5]

    # ETA: held by the broker, run no earlier
    eta_sent = time.time()
    eta = module.stamp.apply_async(("eta",), countdown=2)
    ran_at = eta.get(timeout=20)
    assert ran_at >= eta_sent + 2 - 0.01, (ran_at, eta_sent)

    # a retry with a countdown: a second run, no earlier than a second after the first
    assert module.flaky.delay("k").get(timeout=20) == 2
    first, second = (float(fields[1]) for fields in lines(log, "flaky"))
    assert second >= first + 1 - 0.01

    # a chord: a group of 8 and a callback with the sum, through chord_unlock
    outcome = chord(module.add.s(i, i) for i in range(8))(module.total.s())
    assert outcome.get(timeout=40) == sum(2 * i for i in range(8))
    assert lines(log, "total") == [["56"]]

    # priorities and ETAs reach the broker: a queue no worker reads shows them (on the
    # node the producer is on: a job is queued where it was added)
    module.add.apply_async((1, 1), queue="idle", priority=9)
    module.add.apply_async((1, 2), queue="idle", priority=0)
    module.add.apply_async((1, 3), queue="idle", countdown=3600)
    module.add.apply_async((1, 4), queue="idle", countdown=3 * 86400)  # past a day's TTL
    queued = []
    for node in nodes:
        with Client(f"127.0.0.1:{node.port}") as client:
            queued += [job.priority for job in client.qpeek("idle", 10)]
    assert sorted(queued) == [0, 255]  # the ETA jobs are held, not queued


def test_node_killed_mid_run_loses_no_task(
        make_cluster: Callable[..., list[DisqProcess]],
        celery_run: Callable[..., CeleryRun]) -> None:
    nodes = make_cluster(3)
    run = celery_run(nodes, visibility=3)
    module, log = run.module, run.log
    count = 40
    results: list[Any] = [module.step.delay(i) for i in range(count)]
    wait_for(lambda: len(lines(log, "step")) >= 5, 30, 0.05, "the worker to run tasks")
    nodes[0].kill()  # the first seed: where the worker and this producer started
    assert len(lines(log, "step")) < count, "the node was killed after the run, not in it"
    wait_for(lambda: {int(f[0]) for f in lines(log, "step")} == set(range(count)), 45, 0.1,
             "every task to run despite the killed node")
    assert sorted(r.get(timeout=30) for r in results) == list(range(count))


def test_worker_killed_mid_task_is_run_again(
        make_cluster: Callable[..., list[DisqProcess]],
        celery_run: Callable[..., CeleryRun]) -> None:
    """acks_late: the job of a task whose worker died (kill -9) is not acked, and its
    RETRY (the visibility timeout) hands it to another worker."""
    nodes = make_cluster(3)
    run = celery_run(nodes, visibility=2)
    module, log = run.module, run.log
    result = module.hang_once.delay("w")
    wait_for(lambda: lines(log, "hang"), 30, 0.05, "the first worker to start the task")
    first = run.workers[0]
    first.kill()
    first.wait(10)
    run.start_worker()
    assert result.get(timeout=30) == 2
    pids = [fields[1] for fields in lines(log, "hang")]
    assert len(pids) == 2 and pids[0] != pids[1]


def test_the_first_ready_result_stored_is_kept(
        start_node: Callable[..., DisqProcess]) -> None:
    """A task run twice (its worker lost before the ack) stores twice: the first result
    stays; states before a ready one are not stored (they read as PENDING)."""
    import disq_client.celery_backend  # noqa: F401  (registers disq://, as the app does)
    from celery import Celery

    node = start_node()
    app = Celery("results", backend=f"disq://127.0.0.1:{node.port}")
    backend = app.backend
    backend.store_result("t1", None, "STARTED")
    assert backend.get_state("t1") == "PENDING"
    backend.store_result("t1", 1, "SUCCESS")
    backend.store_result("t1", 2, "SUCCESS")
    fresh = Celery("reader", backend=f"disq://127.0.0.1:{node.port}").backend
    assert fresh.get_task_meta("t1")["result"] == 1
    assert fresh.wait_for("t1", timeout=5)["status"] == "SUCCESS"
    with pytest.raises(Exception, match="timed out"):
        fresh.wait_for("never-run", timeout=0.3)
    app.close()
