"""The HTTP routes of how jobs end (disq extensions): an ACK with the job's result, a
job's end read or waited for (WAITJOB on one job), and the results this node keeps,
newest first (the dashboard's finished jobs)."""

from __future__ import annotations

import asyncio
from typing import Any

from aiohttp import web

from ...end_requests import WaitJob
from ...node import now_ms
from ...results import JobEnd
from ..job_waits import JobStatus
from .calls import durable, run, user_of
from .jsonio import (
    SERVER_KEY,
    base64_field,
    bytes_fields,
    json_object,
    ok,
    path_job_id,
    plain,
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


MAX_RESULTS_LISTED = 1000  # results a GET /results may ask for
# Results a listing walks at most: a queue with few results among many others' gets a
# short answer (complete: false) rather than hold the loop while it walks them all.
RESULTS_WALKED = 100_000
PREVIEW_BYTES = 1024  # of each result listed (its whole: GET /jobs/{id}/result)


async def list_results(request: web.Request) -> web.Response:
    """GET /results?queue=&limit=: the results this node keeps, the last kept first: those of `queue`, else of every queue the user may
    use (a restricted user: not those whose queue this node does not know)."""
    limit = query_int(request, "limit", 50, 1)
    if limit > MAX_RESULTS_LISTED:
        raise bad_request(f"'limit' must be at most {MAX_RESULTS_LISTED}")
    queue = request.query["queue"].encode() if "queue" in request.query else None
    server, user = request.app[SERVER_KEY], user_of(request)

    def visible(end: JobEnd) -> bool:
        if queue is not None and end.queue != queue:
            return False
        return user.all_queues or (end.queue is not None and user.may_use(end.queue))

    def listing() -> tuple[list[dict[str, Any]], bool]:
        ends, complete = server.node.ends.newest(now_ms(), visible, limit, RESULTS_WALKED)
        return [_listed(end) for end in ends], complete

    results, complete = run(request, "waitjob", None if queue is None else [queue], listing)
    return ok({"results": results, "complete": complete})


def _listed(end: JobEnd) -> dict[str, Any]:
    """One kept result as GET /results lists it: its end as GET /jobs/{id}/result
    gives it, the data cut to PREVIEW_BYTES (`truncated`), its size and times."""
    data = end.data
    fields = end_fields((end.job_id, end.how, _preview(data)))
    fields.update(queue=plain(end.queue), ended_ms=end.kept_at, expires_ms=end.expires,
                  bytes=None if data is None else len(data),
                  truncated=data is not None and len(data) > PREVIEW_BYTES,
                  repeats=end.repeats)
    return fields


def _preview(data: bytes | None) -> bytes | None:
    """The first PREVIEW_BYTES of `data`, a UTF-8 character not cut in two (a text
    result's preview stays text)."""
    if data is None or len(data) <= PREVIEW_BYTES:
        return data
    cut = PREVIEW_BYTES
    while cut > PREVIEW_BYTES - 3 and data[cut] & 0xC0 == 0x80:  # inside a character
        cut -= 1
    return data[:cut]


END_FIELDS: dict[str, Any] = {
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
                             "description": "progress data that is not UTF-8"}}
END_SCHEMA = {"type": "object", "properties": END_FIELDS}


LISTED_SCHEMA = {"type": "object", "properties": {
    **END_FIELDS,
    "state": {"type": "string", "enum": ["acked", "dead"]},
    "queue": {"type": "string", "nullable": True,
              "description": "null: a job this node did not hold (a peer's result)"},
    "ended_ms": {"type": "integer", "description": "when it ended (Unix ms)"},
    "expires_ms": {"type": "integer", "description": "when its result goes (Unix ms)"},
    "bytes": {"type": "integer", "nullable": True,
              "description": "the result's (or error's) size; null: a plain ACK"},
    "truncated": {"type": "boolean",
                  "description": f"only the first {PREVIEW_BYTES} bytes are given"},
    "repeats": {"type": "integer", "description": "results given again (ignored)"}}}


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
        Route("GET", "/api/v1/results", list_results, ("WAITJOB",), tag="jobs",
              summary="The results this node keeps, the last kept first",
              description="Jobs ended with ACKJOB ... RESULT (or a plain ACK a WAITJOB "
                          "waited for), as this node keeps them for their queue's "
                          "RESULT-TTL: a result is kept on the nodes that held its job "
                          "(dead letters are jobs of their dead-letter queue). Only the "
                          "queues the user may use; naming one it may not is refused. "
                          "Each result's first "
                          f"{PREVIEW_BYTES} bytes (GET /jobs/{{id}}/result: all). "
                          f"complete: false when the listing stopped after walking "
                          f"{RESULTS_WALKED} results, short of limit.",
              query=(query_param("queue", {"type": "string"}),
                     query_param("limit", {"type": "integer", "minimum": 1,
                                           "maximum": MAX_RESULTS_LISTED, "default": 50})),
              responses={"200": answer({"type": "object", "properties": {
                  "results": {"type": "array", "items": LISTED_SCHEMA},
                  "complete": {"type": "boolean"}}})}),
    ]
