"""The HTTP routes of how jobs end (disq extensions): an ACK with the job's result, and a
job's end read or waited for (WAITJOB on one job)."""

from __future__ import annotations

import asyncio
from typing import Any

from aiohttp import web

from ...end_requests import WaitJob
from ..job_waits import JobStatus
from .calls import durable, run, user_of
from .jsonio import (
    SERVER_KEY,
    base64_field,
    bytes_fields,
    json_object,
    ok,
    path_job_id,
    query_int,
)
from .problems import bad_request
from .routes import Body, Route, answer, count_answer, query_param


def _result_of(data: dict[str, Any]) -> bytes | None:
    """ACK's body: {"result": text} or {"result_base64": ...}, or neither."""
    text, encoded = data.pop("result", None), data.pop("result_base64", None)
    if data:
        raise bad_request(f"unknown field '{next(iter(data))}'")
    if text is not None and encoded is not None:
        raise bad_request("give one of 'result' and 'result_base64'")
    if text is not None:
        if type(text) is not str:
            raise bad_request("'result' must be a string (binary: 'result_base64')")
        return text.encode()
    return None if encoded is None else base64_field(encoded, "result_base64")


async def ack_job(request: web.Request) -> web.Response:
    """POST /jobs/{id}/ack: ACKJOB; with a result, answered once the AOF has it as
    safe as its policy promises (as ACKJOB ... RESULT's RESP reply)."""
    job_id = path_job_id(request).encode()
    result = _result_of(await json_object(request)) if request.body_exists else None
    server, user = request.app[SERVER_KEY], user_of(request)
    jobs = server.jobs
    acked = run(request, "ackjob", None, lambda: jobs.ack(user, [job_id], result))
    if result is not None:
        await durable(server.node)
    return ok({"acked": acked})


def end_fields(status: JobStatus, progress: int | None = None) -> dict[str, Any]:
    """A job's end as JSON: state, and the result (acked) or error (dead), or for an
    active job its progress and progress data (WORKING ... PROGRESS / DATA); a
    result or data that is not UTF-8 as result_base64 / progress_data_base64."""
    job_id, state, data = status
    fields: dict[str, Any] = {"id": job_id.decode(), "state": state.decode()}
    if state == b"dead":
        fields["error"] = None if data is None else data.decode(errors="replace")
        return fields
    name = "result"
    if state == b"active":
        fields["progress"] = progress
        name = "progress_data"
    fields.update(bytes_fields(name, data))
    return fields


async def job_result(request: web.Request) -> web.Response:
    """GET /jobs/{id}/result[?wait_ms=]: how the job ended; with wait_ms, waited for up
    to that long (WAITJOB TIMEOUT); without, what the nodes know now."""
    job_id = path_job_id(request).encode()
    wait_ms = query_int(request, "wait_ms", 0)
    jobs, user = request.app[SERVER_KEY].jobs, user_of(request)
    wait = run(request, "waitjob", None,
               lambda: jobs.wait(user, WaitJob([job_id], wait_ms), peek=not wait_ms))
    try:
        [status] = await wait.later.wait()
    except asyncio.CancelledError:  # its client went away: stop watching
        wait.cancel()
        raise
    return ok(end_fields(status, wait.progress_of(job_id) if status[1] == b"active" else None))


END_SCHEMA = {"type": "object", "properties": {
    "id": {"type": "string"},
    "state": {"type": "string", "enum": ["acked", "dead", "queued", "active", "unknown"]},
    "result": {"type": "string", "nullable": True},
    "result_base64": {"type": "string", "description": "a result that is not UTF-8"},
    "error": {"type": "string", "nullable": True,
              "description": "a dead letter's last error (NACK ... ERROR), else why"},
    "progress": {"type": "integer", "nullable": True, "minimum": 0, "maximum": 100,
                 "description": "an active job's last WORKING ... PROGRESS"},
    "progress_data": {"type": "string", "nullable": True,
                      "description": "an active job's last WORKING ... DATA"},
    "progress_data_base64": {"type": "string",
                             "description": "progress data that is not UTF-8"}}}


def routes(job_path: str) -> list[Route]:
    return [
        Route("POST", job_path + "/ack", ack_job, ("ACKJOB",), tag="jobs",
              body=Body(fields={"result_base64": {"type": "string",
                                                  "description": "a binary result"}},
                        required=False),
              responses={"200": count_answer("acked", "ACKJOB")}, errors=(404, 409)),
        Route("GET", job_path + "/result", job_result, ("WAITJOB",), tag="jobs",
              summary="How a job ended: its result, or its last error",
              description="With wait_ms, waits up to that long (0: no wait) for the job to "
                          "end, wherever it is held; state is then the job's state at the "
                          "time. unknown: no reachable node knows the job or its end.",
              query=(query_param("wait_ms", {"type": "integer", "minimum": 0}),),
              responses={"200": answer(END_SCHEMA)}),
    ]
