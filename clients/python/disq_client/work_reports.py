"""What a Worker's handler reports besides succeeding or failing (disq extensions):
its progress while it runs (`report_progress`: WORKING ... PROGRESS / DATA), its
return value as the job's result (ACKJOB ... RESULT) and its exception as the job's
error (NACK ... ERROR)."""

from __future__ import annotations

import asyncio
import contextvars
import json
import logging

from .aio import AsyncClient
from .bodies import Body
from .errors import DisqError
from .spec import MAX_ERROR_LEN, MAX_PROGRESS_DATA
from .types import Job

log = logging.getLogger("disq_client.worker")

ERROR_MAX_BYTES = MAX_ERROR_LEN  # a NACK's ERROR: the exception's type and message, cut


class Running:
    """The job a handler runs, for `report_progress` (a context variable's value: the
    handler's task, or its thread through a copied context)."""

    __slots__ = ("client", "job", "loop", "sends")

    def __init__(self, client: AsyncClient, job: Job,
                 loop: asyncio.AbstractEventLoop) -> None:
        self.client = client
        self.job = job
        self.loop = loop
        self.sends: set[asyncio.Task[None]] = set()  # kept until done (not collected)

    def send(self, progress: int | None, data: Body | None) -> None:
        task = self.loop.create_task(self._working(progress, data))
        self.sends.add(task)
        task.add_done_callback(self.sends.discard)

    async def _working(self, progress: int | None, data: Body | None) -> None:
        try:
            await self.client.working(self.job.id, progress=progress, data=data)
        except DisqError as exc:  # (a progress is news, not a promise)
            log.warning("WORKING %s PROGRESS failed: %s", self.job.id, exc)


RUNNING: contextvars.ContextVar[Running] = contextvars.ContextVar("disq_worker_job")


def report_progress_of(job_id: str, progress: int | None, data: Body | None) -> None:
    """`Job.progress`: `report_progress`, for the job the handler runs only."""
    running = RUNNING.get(None)
    if running is None or running.job.id != job_id:
        raise RuntimeError("Job.progress is for the job a Worker's handler runs")
    report_progress(progress, data)


def report_progress(progress: int | None = None, data: Body | None = None) -> None:
    """From a handler the Worker runs (a function or a coroutine): tell the cluster how
    far its job is, `progress` a percentage (0..100) and/or `data` (at most 4096
    bytes), kept with the job on its holders (SHOW's progress and progress-data; WAITJOB
    and `Client.wait` give an active job's data). Sent in the background (WORKING
    PROGRESS / DATA, which also postpones the job's requeue): the call does not wait,
    and the last report wins. ValueError out of range; RuntimeError outside a handler."""
    try:
        running = RUNNING.get()
    except LookupError:
        raise RuntimeError("report_progress is for a handler the Worker runs") from None
    if progress is not None and not 0 <= progress <= 100:
        raise ValueError("progress must be between 0 and 100")
    if data is not None and len(data if isinstance(data, bytes) else str(data).encode()
                                ) > MAX_PROGRESS_DATA:
        raise ValueError(f"progress data must be at most {MAX_PROGRESS_DATA} bytes")
    if progress is None and data is None:
        return
    loop = running.loop
    try:
        on_loop = asyncio.get_running_loop() is loop
    except RuntimeError:  # a plain handler's thread
        on_loop = False
    if on_loop:
        running.send(progress, data)
    else:
        loop.call_soon_threadsafe(running.send, progress, data)


def error_text(failure: BaseException) -> bytes:
    """A NACK's ERROR for a handler's exception: "Type: message", cut to
    ERROR_MAX_BYTES (on a character boundary)."""
    text = f"{type(failure).__name__}: {failure}".encode(errors="replace")
    if len(text) <= ERROR_MAX_BYTES:
        return text
    return text[:ERROR_MAX_BYTES].decode(errors="ignore").encode()


def result_body(value: object) -> bytes | None:
    """An ACK's RESULT for a handler's return value: bytes and str as they are, None
    for none, anything else as JSON (TypeError if it is not JSON)."""
    if value is None or isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode()
    return json.dumps(value, separators=(",", ":")).encode()
