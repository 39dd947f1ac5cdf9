"""What a consumer reports of its jobs (disq extensions), from the client and the Worker:
NACK ... ERROR, WORKING ... PROGRESS / DATA, a handler's exception as its job's error,
its return value as its job's result, and report_progress."""

from __future__ import annotations

import asyncio
import threading

import pytest
from disq_client import Client, Job, JobError, Worker, report_progress
from disq_client.work_reports import ERROR_MAX_BYTES, error_text, result_body
from nodes_at import addr
from support import DisqProcess, wait_for
from test_pyclient_worker import run_until


def test_error_text_and_result_body() -> None:
    assert error_text(ValueError("bad input")) == b"ValueError: bad input"
    long = error_text(RuntimeError("é" * 2000))  # cut on a character boundary
    assert len(long) <= ERROR_MAX_BYTES and long.decode().startswith("RuntimeError: é")
    assert result_body(None) is None
    assert result_body(b"\xff") == b"\xff" and result_body("text") == b"text"
    assert result_body({"n": [1, 2]}) == b'{"n":[1,2]}'
    with pytest.raises(TypeError):
        result_body(object())


def test_report_progress_outside_a_handler() -> None:
    with pytest.raises(RuntimeError):
        report_progress(5)
    with pytest.raises(RuntimeError):
        Job("D-00000000-AAAAAAAAAAAAAAAAAAAAAAAA-05a1", "q", b"").progress(5)


def test_the_client_reports_errors_and_progress(node: DisqProcess) -> None:
    with Client(addr(node)) as c:
        job_id = c.add_job("q", b"x", retry_ms=60_000)
        [job] = c.get_jobs("q")
        assert c.working(job.id, progress=25, data=b"quarter") == 60_000
        info = c.show(job_id)
        assert info is not None
        assert (info.progress, info.progress_data, info.errors) == (25, b"quarter", None)
        [end] = c.wait(job_id, timeout_ms=10)
        assert (end.state, end.progress_data) == ("active", b"quarter")
        assert c.nack(job_id, error="it broke") == 1
        info = c.show(job_id)
        assert info is not None and info.errors is not None
        [error] = info.errors
        assert isinstance(error, JobError) and (error.delivery, error.reason) == (1, "it broke")
        assert [i.errors for i in c.jscan_info(queue="q")] == [info.errors]
        with pytest.raises(Exception, match="ERROR must be"):
            c.nack(job_id, error="x" * 1025)


async def test_a_handler_s_exception_is_its_job_s_error(node: DisqProcess) -> None:
    with Client(addr(node)) as c:
        job_id = c.add_job("q", b"x", max_deliveries=2, retry_ms=60_000)
    worker = Worker(addr(node), poll_ms=100, retry_backoff=None)

    @worker.task("q")
    def handle(job: Job) -> None:
        raise ValueError(f"bad body at delivery {(job.nacks or 0) + 1}")

    await run_until(worker, lambda: worker.nacked == 2, timeout=15)
    with Client(addr(node)) as c:
        [end] = c.wait(job_id, timeout_ms=5000)
        assert (end.state, end.error) == ("dead", "ValueError: bad body at delivery 2")
        info = c.show(job_id)
        assert info is not None and info.errors is not None
        assert [e.reason for e in info.errors] == ["ValueError: bad body at delivery 1",
                                                   "ValueError: bad body at delivery 2"]


async def test_a_handler_s_return_value_is_its_job_s_result(node: DisqProcess) -> None:
    with Client(addr(node)) as c:
        ids = {c.add_job("q", body): body for body in (b"dict", b"text", b"none", b"bad")}
    worker = Worker(addr(node), poll_ms=100)

    @worker.task("q")
    async def handle(job: Job) -> object:
        return {"dict": {"ok": True}, "text": "fine", "none": None, "bad": object()}[
            job.body.decode()]

    await run_until(worker, lambda: worker.acked == 4, timeout=15)
    with Client(addr(node)) as c:
        ends = {ids[end.id]: end for end in c.wait(*ids, timeout_ms=5000)}
    assert ends[b"dict"].json() == {"ok": True} and ends[b"text"].text() == "fine"
    # None, or a value that is not JSON: a plain ACK, which leaves no record once its
    # job is gone
    assert {body: (end.state, end.result) for body, end in ends.items()} == {
        b"dict": ("acked", b'{"ok":true}'), b"text": ("acked", b"fine"),
        b"none": ("unknown", None), b"bad": ("unknown", None)}


@pytest.mark.parametrize("is_async", [False, True])
async def test_handlers_report_progress(node: DisqProcess, is_async: bool) -> None:
    with Client(addr(node)) as c:
        job_id = c.add_job("q", b"x", retry_ms=60_000)
    seen = threading.Event()
    worker = Worker(addr(node), poll_ms=100)

    def progress_shown() -> bool:
        with Client(addr(node)) as c:
            info = c.show(job_id)
        return info is not None and (info.progress, info.progress_data) == (60, b"60%")

    if is_async:
        @worker.task("q")
        async def handle(job: Job) -> str:
            job.progress(60, "60%")  # (the same as report_progress, for this job)
            while not seen.is_set():
                await asyncio.sleep(0.01)
            return "done"
    else:
        @worker.task("q")
        def handle_in_thread(job: Job) -> str:
            report_progress(60, b"60%")
            assert seen.wait(10)
            return "done"

    task = asyncio.create_task(run_until(worker, lambda: worker.acked == 1, timeout=15))
    await asyncio.to_thread(wait_for, progress_shown, 10)
    seen.set()
    await task
    with Client(addr(node)) as c:
        [end] = c.wait(job_id, timeout_ms=5000)
    assert (end.state, end.result) == ("acked", b"done")
