"""The worker against real nodes: a thousand jobs with failures on three nodes, N jobs
at a time, WORKING heartbeats, and the disq-worker command on SIGTERM."""

from __future__ import annotations

import asyncio
import logging
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path

import pytest
from disq_client import Client, Job, QueuePolicy, Worker
from nodes_at import addr
from support import DisqProcess, wait_for

WORKER_BIN = Path(sys.executable).with_name("disq-worker")


async def run_until(worker: Worker, done: Callable[[], bool], timeout: float) -> None:
    """Serve until `done()` holds, then stop the worker and wait for it."""
    task = asyncio.create_task(worker.serve())
    deadline = time.monotonic() + timeout
    try:
        while not done():
            assert not task.done(), task.exception()
            assert time.monotonic() < deadline, "the worker did not finish in time"
            await asyncio.sleep(0.02)
    finally:
        worker.stop()
        await asyncio.wait_for(task, 10)


def jobs_left(nodes: list[DisqProcess]) -> list[str]:
    left: list[str] = []
    for n in nodes:
        with Client(addr(n), switch_after_jobs=0) as c:
            left += c.jscan()
    return left


async def test_a_thousand_jobs_some_failing(cluster: list[DisqProcess]) -> None:
    with Client(addr(cluster[0])) as producer:
        ids = producer.add_jobs("work", [b"%d" % i for i in range(1000)], retry_ms=60_000)
    failing = {job_id for i, job_id in enumerate(ids) if i % 7 == 0}
    lock = threading.Lock()
    succeeded: Counter[str] = Counter()
    failed: Counter[str] = Counter()
    nacks_seen: dict[str, int] = {}
    worker = Worker([addr(n) for n in cluster], concurrency=8, poll_ms=200)

    @worker.task("work")
    def handle(job: Job) -> None:
        assert job.nacks is not None
        with lock:
            if job.id in failing and job.nacks < 2:  # fails twice, then works
                failed[job.id] += 1
                raise RuntimeError("failing on purpose")
            succeeded[job.id] += 1
            nacks_seen[job.id] = job.nacks

    await run_until(worker, lambda: worker.acked == 1000, timeout=60)

    assert succeeded == Counter(ids)  # every job ran to the end exactly once...
    assert worker.acked == 1000  # ...and was acknowledged once
    assert failed == Counter({job_id: 2 for job_id in failing})
    assert worker.nacked == 2 * len(failing)
    # NACK requeued at once (RETRY is 60 s) and counted: the handler saw the counter grow
    assert {nacks_seen[j] for j in failing} == {2}
    assert {nacks_seen[j] for j in set(ids) - failing} == {0}
    # the acknowledgements reached every node: nothing is left anywhere
    wait_for(lambda: not jobs_left(cluster), timeout=15, interval=0.1,
             message="acknowledged jobs to be collected on every node")


async def test_n_jobs_at_a_time(node: DisqProcess) -> None:
    barrier = threading.Barrier(4, timeout=10)  # breaks unless 4 handlers run together
    with Client(addr(node)) as producer:
        producer.add_jobs("q", [b"x"] * 4)
    worker = Worker(addr(node), concurrency=4, poll_ms=100)

    @worker.task("q")
    def handle(job: Job) -> None:
        barrier.wait()

    await run_until(worker, lambda: worker.acked == 4, timeout=15)
    assert worker.nacked == 0


async def test_async_handlers(node: DisqProcess) -> None:
    with Client(addr(node)) as producer:
        ids = producer.add_jobs("q", [b"%d" % i for i in range(20)])
    runs: Counter[str] = Counter()
    worker = Worker(addr(node), concurrency=5, poll_ms=100)

    @worker.task("q")
    async def handle(job: Job) -> None:
        runs[job.id] += 1
        await asyncio.sleep(0.01)
        if int(job.body) % 2 and not job.nacks:
            raise ValueError("odd, first time")

    await run_until(worker, lambda: worker.acked == 20, timeout=15)
    assert worker.nacked == 10
    assert runs == Counter({j: 1 if i % 2 == 0 else 2 for i, j in enumerate(ids)})


async def test_long_jobs_are_kept_with_working(node: DisqProcess) -> None:
    with Client(addr(node)) as c:
        c.execute_command("CONFIG", "RESETSTAT")
        job_id = c.add_job("slow", b"x", retry_ms=1000)
        runs: list[float] = []
        worker = Worker(addr(node), concurrency=2, poll_ms=100, heartbeat_after_ms=100)

        @worker.task("slow")
        def handle(job: Job) -> None:
            runs.append(time.monotonic())
            time.sleep(2.5)  # well past RETRY: without WORKING it would run again

        await run_until(worker, lambda: worker.acked == 1, timeout=20)
        assert len(runs) == 1
        working = c.info("commandstats")["commandstats"].get("cmdstat_working")
        assert working is not None and "calls=" in str(working)
        assert int(str(working).split("calls=")[1].split(",")[0]) >= 3
        assert c.show(job_id) is None  # acked and collected


async def test_max_deliveries_and_backoff_make_a_dead_letter(
        node: DisqProcess, caplog: pytest.LogCaptureFixture) -> None:
    """A task's max_deliveries and backoff become the queue's policy: a handler that
    always raises runs 3 times, spaced by the back-off (50 then 100 ms, -20% at most),
    and the job ends in dead:<queue>; a task without them sets no policy."""
    caplog.set_level(logging.INFO, logger="disq_client.worker")
    with Client(addr(node)) as c:
        job_id = c.add_job("flaky", b"x", retry_ms=60_000)
        calls: list[float] = []
        worker = Worker(addr(node), concurrency=2, poll_ms=100)

        @worker.task("flaky", max_deliveries=3, backoff=(50, 200))
        def handle(job: Job) -> None:
            calls.append(time.monotonic())
            raise RuntimeError("failing on purpose")

        @worker.task("plain")
        def plain(job: Job) -> None:
            pass

        await run_until(worker, lambda: worker.nacked == 3, timeout=15)
        assert len(calls) == 3 and worker.acked == 0
        assert calls[1] - calls[0] >= 0.050 * 0.8
        assert calls[2] - calls[1] >= 0.100 * 0.8
        assert c.qpolicy_get("flaky") == QueuePolicy("flaky", 3, "dead:flaky", (50, 200), None)
        assert c.qpolicy_get("plain") is None
        assert (c.qlen("flaky"), c.qlen("dead:flaky")) == (0, 1)
        info = c.show(job_id)
        assert info is not None
        assert (info.queue, info.nacks, info.dead_from, info.dead_reason) == (
            "dead:flaky", 2, "flaky", "max-deliveries")
        last = [r.getMessage() for r in caplog.records if "last delivery" in r.getMessage()]
        assert last == [f"job {job_id} of queue flaky failed its 3rd and last delivery: "
                        "dead letter"]


def nack_calls(c: Client) -> int:
    stat = c.info("commandstats")["commandstats"].get("cmdstat_nack")
    return int(str(stat).split("calls=")[1].split(",")[0]) if stat is not None else 0


async def test_failing_jobs_back_off_by_default(node: DisqProcess,
                                                caplog: pytest.LogCaptureFixture) -> None:
    """Three jobs whose handler always raises, a default worker for 3 s: each is
    NACKed with a growing DELAY-MS (1 s, then 2 s, -20% at most), so it runs at most 3
    times in that window (its 4th delivery is 5.6 s away at the earliest), and each
    traceback is logged once per job; the other failures are one line each."""
    caplog.set_level(logging.INFO, logger="disq_client.worker")
    with Client(addr(node)) as c:
        c.execute_command("CONFIG", "RESETSTAT")
        ids = c.add_jobs("bad", [b"1", b"2", b"3"], retry_ms=60_000)
        runs: Counter[str] = Counter()
        worker = Worker(addr(node), concurrency=4, poll_ms=100)

        @worker.task("bad")
        def handle(job: Job) -> None:
            runs[job.id] += 1
            raise RuntimeError("failing on purpose")

        end = time.monotonic() + 3
        await run_until(worker, lambda: time.monotonic() > end, timeout=20)
        assert set(runs) == set(ids)
        assert max(runs.values()) <= 3, runs
        assert nack_calls(c) <= 9
        failures = [r for r in caplog.records if "failed" in r.getMessage()]
        assert len(failures) == sum(runs.values())
        assert len([r for r in failures if r.exc_info]) == 3  # one traceback a job
        for job_id in ids:
            info = c.show(job_id)
            assert info is not None and info.queue == "bad"  # not given up yet


async def test_delivery_limit_moves_the_job_to_dead_letters(
        node: DisqProcess, caplog: pytest.LogCaptureFixture) -> None:
    """The worker's own delivery limit (no queue policy): after its 3rd failed
    delivery the job is added to dead:<queue> (its body) and acknowledged, once."""
    caplog.set_level(logging.INFO, logger="disq_client.worker")
    with Client(addr(node)) as c:
        job_id = c.add_job("limited", b"payload", retry_ms=60_000)
        runs: list[int] = []
        worker = Worker(addr(node), concurrency=2, poll_ms=100, delivery_limit=3,
                        retry_backoff=(50, 200))

        @worker.task("limited")
        def handle(job: Job) -> None:
            assert job.nacks is not None
            runs.append(job.nacks)
            raise RuntimeError("failing on purpose")

        await run_until(worker, lambda: worker.dead_lettered == 1, timeout=20)
        assert runs == [0, 1, 2] and worker.nacked == 2
        assert c.qpolicy_get("limited") is None  # the queue's policy is not touched
        wait_for(lambda: c.show(job_id) is None, timeout=10, message="the job to be acked")
        assert c.qlen("limited") == 0
        dead = c.get_jobs("dead:limited", timeout_ms=1000)
        assert [job.body for job in dead] == [b"payload"]
        last = [r.getMessage() for r in caplog.records if "last delivery" in r.getMessage()]
        assert last == [f"job {job_id} of queue limited failed its 3rd and last delivery: "
                        f"moved to dead:limited as {dead[0].id}"]


def test_worker_retry_options_are_checked() -> None:
    with pytest.raises(ValueError, match="delivery_limit must be between 1 and 65535"):
        Worker(delivery_limit=0)
    with pytest.raises(ValueError, match="retry_backoff needs base-ms and max-ms"):
        Worker(retry_backoff=(200, 50))
    # durations in ms or as timedeltas, as the client's (a float of seconds: refused)
    with pytest.raises(TypeError, match="grace takes a datetime.timedelta.*grace_ms=10000"):
        Worker(grace=10.0)  # type: ignore[arg-type]
    assert Worker(grace=timedelta(seconds=2), heartbeat_after_ms=100).grace_ms == 2000
    assert Worker().heartbeat_after_ms == 500


def test_task_policies_are_checked_when_registered() -> None:
    worker = Worker()
    with pytest.raises(ValueError, match="MAXDELIVERIES must be between 1 and 65535"):
        worker.task("q", max_deliveries=0)
    with pytest.raises(ValueError, match="BACKOFF needs base-ms and max-ms"):
        worker.task("q", backoff=(200, 50))
    with pytest.raises(ValueError, match="BACKOFF needs base-ms and max-ms"):
        worker.task("q", backoff=(0, 50))
    assert worker.tasks == {}


# -- the disq-worker command ----------------------------------------------------------------
TASKS = """
import os
import time
from pathlib import Path

from disq_client import Worker

LOG = Path(os.environ["TASK_LOG"])
worker = Worker(concurrency=2, poll_ms=200)


def note(line):
    with LOG.open("a") as f:
        f.write(line + "\\n")


@worker.task("slow")
def slow(job):
    note("start " + job.id)
    time.sleep(float(job.body))
    note("end " + job.id)
"""


@contextmanager
def worker_process(tmp_path: Path, node: DisqProcess, *args: str
                   ) -> Iterator[subprocess.Popen[bytes]]:
    """`disq-worker slowtasks:worker` on `node`; killed at the end if still running."""
    (tmp_path / "slowtasks.py").write_text(textwrap.dedent(TASKS))
    log = tmp_path / "tasks.log"
    log.touch()
    proc = subprocess.Popen(
        [str(WORKER_BIN), "slowtasks:worker", "--nodes", addr(node), *args],
        cwd=tmp_path, env={"TASK_LOG": str(log), "PATH": "/usr/bin:/bin"},
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


CLIENT_SOURCE = Path(__file__).resolve().parents[1]  # this checkout's disq_client


@pytest.mark.parametrize("module_text, message", [
    (None, "disq-worker: no module named 'jobs' (looked in {cwd} and sys.path; run it "
           "from the directory that holds the module, or set PYTHONPATH)"),
    ("import not_installed_anywhere\n", "disq-worker: cannot import 'jobs': "
     "ModuleNotFoundError: No module named 'not_installed_anywhere' ({cwd}/jobs.py, line 1)"),
    ("\nsettings = {}\nsettings['missing']\n", "disq-worker: cannot import 'jobs': "
     "KeyError: 'missing' ({cwd}/jobs.py, line 3)"),
    ("def broken(:\n", "disq-worker: cannot import 'jobs': SyntaxError: invalid syntax "
     "(jobs.py, line 1)"),
])
def test_a_module_that_does_not_import_is_one_line(tmp_path: Path, module_text: str | None,
                                                   message: str) -> None:
    """`disq-worker jobs:worker` whose module is missing or fails: one line that says
    why and where, no traceback."""
    if module_text is not None:
        (tmp_path / "jobs.py").write_text(module_text)
    done = subprocess.run([str(WORKER_BIN), "jobs:worker"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=60,
                          env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(CLIENT_SOURCE)})
    assert done.returncode == 1
    assert done.stdout == ""
    assert done.stderr == message.format(cwd=tmp_path.resolve()) + "\n"


@pytest.mark.parametrize("option, message", [
    (["--retry-backoff", "5"], "argument --retry-backoff: expected BASE_MS,MAX_MS or 0, "
     "got '5'"),
    (["--retry-backoff", "500,100"], "retry_backoff needs base-ms and max-ms with "
     "1 <= base-ms <= max-ms <= 4294967295"),
    (["--delivery-limit", "70000"], "delivery_limit must be between 1 and 65535"),
])
def test_bad_retry_options_are_one_line(tmp_path: Path, option: list[str],
                                        message: str) -> None:
    (tmp_path / "jobs.py").write_text("from disq_client import Worker\nworker = Worker()\n")
    done = subprocess.run([str(WORKER_BIN), "jobs:worker", *option], cwd=tmp_path,
                          capture_output=True, text=True, timeout=60,
                          env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(CLIENT_SOURCE)})
    assert done.returncode == 2
    assert done.stderr.splitlines()[-1] == f"disq-worker: error: {message}"


def log_lines(tmp_path: Path, word: str) -> list[str]:
    lines = (tmp_path / "tasks.log").read_text().splitlines()
    return [line.split()[1] for line in lines if line.startswith(word + " ")]


def wait_exit(proc: subprocess.Popen[bytes], timeout: float) -> tuple[int, str]:
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, _ = proc.communicate()
        pytest.fail("the worker did not exit:\n" + out.decode(errors="replace"))
    return proc.returncode, out.decode(errors="replace")


def test_sigterm_lets_running_jobs_finish(node: DisqProcess, tmp_path: Path) -> None:
    assert WORKER_BIN.exists()
    with Client(addr(node)) as c, worker_process(tmp_path, node) as proc:
        running = c.add_jobs("slow", [b"1.5", b"1.5"])
        wait_for(lambda: len(log_lines(tmp_path, "start")) == 2, timeout=15,
                 message="both jobs to start")
        proc.send_signal(signal.SIGTERM)
        later = c.add_job("slow", b"0")
        assert proc.poll() is None  # still finishing its jobs, but fetching no more
        code, out = wait_exit(proc, timeout=15)
        assert code == 0, out
        assert sorted(log_lines(tmp_path, "end")) == sorted(running), out
        assert sorted(log_lines(tmp_path, "start")) == sorted(running)  # none started since
        assert "2 acked, 0 nacked, 0 given back" in out
        assert [c.show(j) for j in running] == [None, None]  # acknowledged
        info = c.show(later)
        assert info is not None and info.state == "queued"


def test_sigterm_gives_back_jobs_past_the_grace_period(node: DisqProcess,
                                                       tmp_path: Path) -> None:
    with Client(addr(node)) as c, worker_process(tmp_path, node, "--grace-ms", "500") as proc:
        job_id = c.add_job("slow", b"60")
        wait_for(lambda: log_lines(tmp_path, "start") == [job_id], timeout=15,
                 message="the job to start")
        started = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        code, out = wait_exit(proc, timeout=15)
        assert code == 0, out
        assert time.monotonic() - started < 10, "the worker waited for the handler"
        assert "0 acked, 0 nacked, 1 given back" in out
        info = c.show(job_id)
        assert info is not None and info.state == "queued"  # queued again at once
        assert info.additional_deliveries == 1 and info.nacks == 0


def test_the_command_line_refuses_grace_in_seconds(capsys: pytest.CaptureFixture[str]) -> None:
    from disq_client.workercli import main

    with pytest.raises(SystemExit) as exited:
        main(["tasks:worker", "--grace", "30"])
    assert exited.value.code == 2
    assert "--grace (seconds) is gone: give --grace-ms (milliseconds)" in capsys.readouterr().err
