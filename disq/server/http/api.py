"""The HTTP API, /api/v1: the job routes (what every route shares is jsonio.py's).
The job routes run the job service (server/service.py) on the typed request their JSON
makes, through the options table the RESP parser shares (disq_client/spec.py): POST
/queues/{q}/jobs is `AddJob.from_fields`, `JobService.add`, `Node.add_job`, the same
errors as ADDJOB; an answer that comes later (a `HeldAnswer`: the job waits for its copies)
is awaited with a Future, and a client that goes away first cancels it as a RESP
client's leaving does. GETJOB's long poll parks a `LongPoll` (longpoll.py); the others
(SHOW, DELJOB, ACKJOB..., JSCAN's pages) answer at once. Each runs its operation
through calls.py (`serve`, `run`: gated as its command, its errors as RESP's), as the
queue, cluster, cron and user routes do (api_queues.py's and api_admin.py's). The
document of every route is openapi.py."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from aiohttp import web
from disq_client.spec import (
    ADDJOB,
    JOBSET,
    NACK,
    WORKING,
)

from ...end_requests import Working
from ...errors import DisqError
from ...node import now_ms
from ...outcomes import Added, Changed, HeldAnswer, HeldAnswers
from ...queue_requests import JScan
from ...requests import AddJob, GetJob, JobSet, Nack
from ...where import MAX_CONDITIONS, job_matches, parse_condition
from ..limits import TokenBucket
from ..service import JobService, job_fields
from . import api_results
from .calls import answer_of, durable, problem, run, serve, user_of
from .jsonio import (
    DEFAULT_ADD_TIMEOUT_MS,
    DEFAULT_POLL_MS,
    JOB_ID_PATTERN,
    MAX_SCAN_COUNT,
    SCAN_CALLS,
    SERVER_KEY,
    attrs_json,
    body_fields,
    field_json,
    job_body,
    json_object,
    json_value,
    ok,
    option_fields,
    path_job_id,
    plain,
    query_bool,
    query_int,
)
from .longpoll import LongPoll
from .problems import Problem, bad_request
from .routes import JOBS_ANSWER, Body, Route, answer, count_answer, query_param, ref

if TYPE_CHECKING:
    from ...acl import User
    from ...job import Job

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


# -- jobs -------------------------------------------------------------------------------------
def _add(service: JobService, user: User, queue: bytes, body: bytes, timeout: int,
         values: dict[str, object], answers: HeldAnswers) -> Callable[[], bytes | HeldAnswer]:
    """The job service's ADDJOB of one job of POST /queues/{queue}/jobs."""
    return lambda: service.add(user, AddJob.from_fields(queue, body, timeout, values), answers)


def _added(outcome: Added | Changed) -> dict[str, Any]:
    """One job's outcome in the answer of POST /queues/{queue}/jobs."""
    if isinstance(outcome, DisqError):
        return {"error": {"status": problem(outcome).status, "code": outcome.code,
                          "detail": outcome.message}}
    assert outcome is not None  # (an ADDJOB's: the job's ID)
    return {"id": outcome.decode()}


async def add_jobs(request: web.Request) -> web.Response:
    """POST /queues/{queue}/jobs: one job (an object) or a batch (a list), each an
    ADDJOB of the job service in order, answered once every job has its outcome (a
    job waiting for its copies: once it has them). The client going away first
    cancels the jobs that wait for their copies (deleted everywhere), as a RESP
    client's leaving does; a DEDUP add stands."""
    queue = request.match_info["queue"].encode()
    data = await json_value(request)
    batch = type(data) is list
    jobs = data if batch else [data]
    if not jobs or not all(type(job) is dict for job in jobs):
        raise bad_request("the request body must be a job object or a non-empty list of them")
    requests = []
    for job in jobs:
        timeout = job.get("timeout_ms", DEFAULT_ADD_TIMEOUT_MS)
        if type(timeout) is not int or timeout < 0:
            raise bad_request("'timeout_ms' must be an integer >= 0")
        requests.append((job_body(job), timeout,
                         option_fields(ADDJOB, job, {"body", "body_base64", "timeout_ms"})))
    server = request.app[SERVER_KEY]
    user = user_of(request)
    rate = server.config.client_rate_limit  # a request's jobs, as a client's commands
    bucket = TokenBucket(rate, time.monotonic()) if rate else None
    answers = HeldAnswers(server.node)
    results: list[Added | HeldAnswer] = []
    for body, timeout, values in requests:
        if bucket is not None and not bucket.take(time.monotonic()):
            server.clients.rejected_commands_rate += 1
            results.append(DisqError(
                "BUSY", f"client-rate-limit reached ({rate} commands per second)"))
            continue
        try:
            results.append(serve(request, "addjob", [queue], _add(
                server.jobs, user, queue, body, timeout, values, answers)))
        except DisqError as exc:
            results.append(exc.with_traceback(None))
    outcomes: list[Added | Changed] = []
    try:
        for result in results:
            if isinstance(result, HeldAnswer):
                outcome: Added | Changed = await answer_of(result.then)
                outcomes.append(outcome)
            else:
                outcomes.append(result)
        await durable(server.node)
    except asyncio.CancelledError:  # the client went away
        for result in results:
            if isinstance(result, HeldAnswer):
                result.cancel()
        raise
    if not batch:
        outcome = outcomes[0]
        if isinstance(outcome, DisqError):
            raise problem(outcome)
        return ok(_added(outcome), 201)
    failed = any(isinstance(outcome, DisqError) for outcome in outcomes)
    return ok({"jobs": [_added(outcome) for outcome in outcomes]}, 207 if failed else 201)


async def get_jobs(request: web.Request) -> web.Response:
    """GET /queues/{queue}/jobs?count=&timeout_ms=&nohang=: GETJOB, a long poll (the
    typed service; a `LongPoll` waits on the queue as a parked RESP client would). The
    HTTP client going away takes the waiting consumer off the queue; jobs taken for
    a client gone before the answer left are queued again at once (ENQUEUE)."""
    queue = request.match_info["queue"].encode()
    count = query_int(request, "count", 1, 1)
    timeout = query_int(request, "timeout_ms", DEFAULT_POLL_MS)
    nohang = query_bool(request, "nohang") if "nohang" in request.query else False
    user = user_of(request)
    service = request.app[SERVER_KEY].jobs
    getjob = GetJob([queue], nohang, timeout, count, with_counters=True)
    jobs = run(request, "getjob", getjob.queues, lambda: service.get(user, getjob))
    if not jobs and not nohang:
        try:
            jobs = await _long_poll(request, user, getjob)
        except DisqError as exc:  # (-LEAVING: the node leaves while it waits)
            raise problem(exc) from None
    transport = request.transport
    if jobs and (transport is None or transport.is_closing()):
        service.enqueue(user, [job.id for job in jobs])
        raise web.HTTPBadRequest  # nobody to answer
    return ok({"jobs": [_taken_job(job) for job in jobs]})


async def _long_poll(request: web.Request, user: User, getjob: GetJob) -> list[Job]:
    """Wait for a job (or the timeout: none) as a blocked consumer."""
    server = request.app[SERVER_KEY]
    poll = LongPoll(server.node, user, asyncio.get_running_loop(), getjob.timeout)
    poll.queues = server.jobs.park(poll, getjob)
    try:
        job = await poll.done
    except asyncio.CancelledError:  # its client went away: a job it got goes back
        taken = poll.taken()
        if taken is not None:
            server.jobs.enqueue(user, [taken.id])
        raise
    finally:
        poll.leave()
    return [] if job is None else [job]


def _taken_job(job: Job) -> dict[str, Any]:
    """A job GETJOB WITHCOUNTERS gave, as JSON: queue, ID, body, its counters, and
    the fields of disq's extensions a job using them has (reply.ext_fields)."""
    taken = {"queue": (job.queue or b"").decode(errors="replace"), "id": job.id.decode(),
             **body_fields(job.body), "nacks": job.nacks,
             "additional_deliveries": job.deliveries}
    ext = job.ext
    if ext is not None:
        taken.update(priority=ext.priority, group=plain(ext.group), due_ms=ext.due)
        if ext.orderkey is not None:
            taken.update(orderkey=plain(ext.orderkey), orderkey_strict=ext.order_strict)
        if ext.extra:
            taken.update(max_deliveries=ext.max_deliveries, dead_from=plain(ext.dead_from),
                         dead_reason=plain(ext.dead_reason))
    return taken


MAX_TEXT = 1024  # a body search's text, in bytes


def _search(request: web.Request) -> Callable[[Job], bool] | None:
    """The search of GET /jobs: `where` (each "key op value", GETJOB's WHERE, all to
    match) and `text` (in the body, as bytes, case sensitive); None: no search."""
    conditions = []
    for where in request.query.getall("where", [])[:MAX_CONDITIONS + 1]:
        words = [w.encode() for w in where.split()]
        try:
            condition, end = parse_condition(words, 0)
        except DisqError as exc:
            raise problem(exc) from None
        if end != len(words):
            raise bad_request(f"'where' takes one condition each (key op value): {where!r}")
        conditions.append(condition)
    if len(conditions) > MAX_CONDITIONS:
        raise bad_request(f"at most {MAX_CONDITIONS} 'where' conditions")
    text = request.query.get("text", "").encode()
    if len(text) > MAX_TEXT:
        raise bad_request(f"'text' is at most {MAX_TEXT} bytes")
    if not conditions and not text:
        return None

    def matches(job: Job) -> bool:
        return ((not text or text in (job.body or b""))
                and (not conditions or job_matches(job, conditions)))
    return matches


async def list_jobs(request: web.Request) -> web.Response:
    """GET /jobs?queue=&state=&cursor=&count=: a page of the jobs this node holds
    (JSCAN ... REPLY ALL: SHOW's fields), and the cursor of the next page (0: done).
    Steps of the scan (`JobService.scan`, JSCAN's) are made until the page has `count`
    jobs or the scan ends (at most SCAN_CALLS of them: a sparse queue may give a short
    page with more to come)."""
    count = query_int(request, "count", 50, 1)
    if count > MAX_SCAN_COUNT:
        raise bad_request(f"'count' must be at most {MAX_SCAN_COUNT}")
    cursor = query_int(request, "cursor", 0)
    filters: list[bytes] = []
    if "queue" in request.query:
        filters += [b"QUEUE", request.query["queue"].encode()]
    for state in request.query.getall("state", []):
        filters += [b"STATE", state.encode()]
    server = request.app[SERVER_KEY]
    user = user_of(request)
    also = _search(request)

    def pages() -> tuple[int, list[dict[str, Any]]]:
        jobs: list[dict[str, Any]] = []
        scan = JScan.parse([b"JSCAN", b"%d" % cursor, b"COUNT", b"%d" % count, *filters])
        for _ in range(SCAN_CALLS):
            scan.count = count - len(jobs)
            scan.cursor, page = server.jobs.scan(user, scan, also)
            jobs += [_job_json(job, server.node.id) for job in page]
            if scan.cursor == 0 or len(jobs) >= count:
                break
        return scan.cursor, jobs

    next_cursor, jobs = run(request, "jscan", None, pages)
    return ok({"cursor": next_cursor, "jobs": jobs})


async def show_job(request: web.Request) -> web.Response:
    job_id = path_job_id(request).encode()
    jobs, user = request.app[SERVER_KEY].jobs, user_of(request)
    job = run(request, "show", None, lambda: jobs.show(user, job_id))
    if job is None:
        raise Problem(404, "Unknown job ID", "NOJOB")
    return ok(_job_json(job, request.app[SERVER_KEY].node.id))


def _job_json(job: Job, node_id: str) -> dict[str, Any]:
    """Every field of a job, as SHOW gives them (`job_fields`), as JSON (`field_json`:
    durations in ms; the time left to live to the ms, where SHOW rounds it down)."""
    now = now_ms()
    shown = dict(field_json(name, value) for name, value in job_fields(job, node_id, now))
    shown["ttl_ms"] = max(job.etime - now, 0)
    shown.update(body_fields(job.body))
    shown.update(attrs_json(job))
    return shown


async def set_job(request: web.Request) -> web.Response:
    """PATCH /jobs/{id}: JOBSET (priority, at, delay_ms) on the job service, answered
    once every holder of the job applied the change."""
    job_id = path_job_id(request).encode()
    values = option_fields(JOBSET, await json_object(request), set())
    server, user = request.app[SERVER_KEY], user_of(request)
    node = server.node
    later = run(request, "jobset", None, lambda: server.jobs.set_job(
        user, JobSet.from_fields(job_id, values), HeldAnswers(node)))
    outcome: Added | Changed = None if later is None else await answer_of(later.then)
    await durable(node)
    if isinstance(outcome, DisqError):
        raise problem(outcome)
    return ok({"ok": True})


async def delete_job(request: web.Request) -> web.Response:
    job_id = path_job_id(request).encode()
    jobs, user = request.app[SERVER_KEY].jobs, user_of(request)
    if run(request, "deljob", None, lambda: jobs.delete(user, [job_id])) == 0:
        raise Problem(404, "Unknown job ID", "NOJOB")
    return ok({"deleted": 1})


# POST /jobs/{id}/<action>: the operation on one job, and the reply's key
_ACTIONS: dict[str, tuple[Callable[[JobService, User, bytes], int], str]] = {
    "fastack": (lambda jobs, user, job_id: jobs.fast_ack(user, [job_id]), "deleted"),
    "enqueue": (lambda jobs, user, job_id: jobs.enqueue(user, [job_id]), "queued"),
    "dequeue": (lambda jobs, user, job_id: jobs.dequeue(user, [job_id]), "dequeued"),
}


def _job_action(command: str) -> Handler:
    """POST /jobs/{id}/<action>: FASTACK, ENQUEUE, DEQUEUE (ACKJOB, which may carry a
    result: api_results.py; WORKING, which may carry a progress: `working_job`)."""
    operation, key = _ACTIONS[command]

    async def action(request: web.Request) -> web.Response:
        job_id = path_job_id(request).encode()
        jobs, user = request.app[SERVER_KEY].jobs, user_of(request)
        return ok({key: run(request, command, None, lambda: operation(jobs, user, job_id))})
    return action


async def nack_job(request: web.Request) -> web.Response:
    """POST /jobs/{id}/nack {"delay_ms", "error"}: NACK [DELAY-MS] [ERROR]."""
    job_id = path_job_id(request)
    values = option_fields(NACK, await json_object(request), set())
    jobs, user = request.app[SERVER_KEY].jobs, user_of(request)

    def nack() -> int:
        parsed = Nack.from_fields([job_id.encode()], values)
        return jobs.nack(user, parsed.ids, parsed.delay_ms, parsed.error)
    return ok({"requeued": run(request, "nack", None, nack)})


async def working_job(request: web.Request) -> web.Response:
    """POST /jobs/{id}/working {"progress", "data"}: WORKING [PROGRESS] [DATA]."""
    job_id = path_job_id(request).encode()
    values = option_fields(WORKING, await json_object(request), set()) if (
        request.body_exists) else {}
    jobs, user = request.app[SERVER_KEY].jobs, user_of(request)

    def working() -> int:
        parsed = Working.from_fields(job_id, values)
        return jobs.working(user, job_id, parsed.progress, parsed.data)
    return ok({"retry_ms": 1000 * run(request, "working", None, working)})


async def bad_job_id(request: web.Request) -> web.Response:
    """/api/v1/jobs/<anything that is not a job ID>[/...]: Disque's -BADID."""
    raise Problem(400, "Invalid Job ID format.", "BADID")


JOB_PATH = f"/api/v1/jobs/{{id:{JOB_ID_PATTERN}}}"  # an ID may hold '/' (base64)


def _action_route(action: str, command: str, key: str) -> Route:
    """POST /jobs/{id}/<action>: `command` on the job, {key: its integer reply}."""
    return Route("POST", f"{JOB_PATH}/{action}", _job_action(command.lower()), (command,),
                 tag="jobs", responses={"200": count_answer(key, command)}, errors=(404, 409))


ROUTES: list[Route] = [
    Route("POST", "/api/v1/queues/{queue}/jobs", add_jobs, ("ADDJOB",), tag="jobs",
          summary="Add a job, or a batch",
          body=Body({"oneOf": [ref("NewJob"), {"type": "array", "items": ref("NewJob"),
                                               "minItems": 1}]}),
          responses={
              "201": answer({"type": "object", "properties": {
                  "id": {"type": "string"},
                  "jobs": {"type": "array", "items": {"type": "object"}}}},
                  "added: {id} for one job, {jobs: [{id}...]} for a batch"),
              "207": answer({"type": "object"}, "a batch in which some jobs were refused: "
                                            "{jobs: [{id} or {error}...]}")},
          errors=(409, 413, 503, 507)),
    Route("GET", "/api/v1/queues/{queue}/jobs", get_jobs, ("GETJOB",), tag="jobs",
          summary="Take jobs: a long poll",
          description="Waits up to timeout_ms (default 30000; 0: for ever) for a job. If "
                      "the HTTP client goes away the wait ends; jobs taken for it are "
                      "queued again at once.",
          query=(query_param("count", {"type": "integer", "minimum": 1}),
                 query_param("timeout_ms", {"type": "integer", "minimum": 0}),
                 query_param("nohang", {"type": "boolean"})),
          responses={"200": JOBS_ANSWER}),
    Route("GET", JOB_PATH, show_job, ("SHOW",), tag="jobs",
          responses={"200": answer(ref("Job"))}, errors=(404,)),
    Route("PATCH", JOB_PATH, set_job, ("JOBSET",), tag="jobs", body=Body(),
          errors=(404, 503)),
    Route("DELETE", JOB_PATH, delete_job, ("DELJOB",), tag="jobs",
          responses={"200": count_answer("deleted", "DELJOB")}, errors=(404,)),
    *api_results.routes(JOB_PATH),
    _action_route("fastack", "FASTACK", "deleted"),
    _action_route("enqueue", "ENQUEUE", "queued"),
    _action_route("dequeue", "DEQUEUE", "dequeued"),
    Route("POST", JOB_PATH + "/working", working_job, ("WORKING",), tag="jobs",
          body=Body(required=False), responses={"200": count_answer("retry_ms", "WORKING")},
          errors=(404, 409)),
    Route("POST", JOB_PATH + "/nack", nack_job, ("NACK",), tag="jobs",
          body=Body(required=False), responses={"200": count_answer("requeued", "NACK")}),
    Route("*", "/api/v1/jobs/{rest:.*}", bad_job_id, documented=False),
    Route("GET", "/api/v1/jobs", list_jobs, ("JSCAN",), tag="jobs",
          summary="A page of the jobs this node holds, with every field of each",
          description="Pass the returned cursor to get the next page; 0: the scan is "
                      "over. A page may be shorter than count with more to come (a "
                      "queue whose jobs are sparse among this node's).",
          query=(query_param("queue", {"type": "string"}),
                 {**query_param("state", {"type": "array", "items": {
                     "type": "string", "enum": ["wait-repl", "active", "queued", "acked"]}},
                     "any of these states"), "style": "form", "explode": True},
                 {**query_param("where", {"type": "array", "items": {"type": "string"}},
                                "a job's attribute, `key op value` (GETJOB's WHERE: =, !=, "
                                "PREFIX, <, >, EXISTS), each to match"),
                  "style": "form", "explode": True},
                 query_param("text", {"type": "string", "maxLength": MAX_TEXT},
                             "text the body contains (case sensitive)"),
                 query_param("cursor", {"type": "integer", "minimum": 0, "default": 0}),
                 query_param("count", {"type": "integer", "minimum": 1,
                                 "maximum": MAX_SCAN_COUNT, "default": 50})),
          responses={"200": answer({"type": "object", "properties": {
              "cursor": {"type": "integer"},
              "jobs": {"type": "array", "items": ref("Job")}}})}),
]
