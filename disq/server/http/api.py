"""The HTTP API, /api/v1: the job routes, and what the routes share (JSON in and out).
A route on the job service (SHOW, DELJOB, ACKJOB...: `_direct`) is JSON -> service ->
JSON; the others turn their JSON or query into the arguments of the RESP command that
does the work (through the options table the RESP parser shares, disq_client/spec.py),
run it through an `Exchange` (bridge.py) and shape the reply as JSON. The queue,
cluster, cron and user routes are api_queues.py's and api_admin.py's. The document of
every route is openapi.py."""

from __future__ import annotations

import base64
import binascii
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import unquote

from aiohttp import web
from disq_client.spec import (
    ADDJOB,
    BYTES,
    CHOICE,
    FLAG,
    INT,
    INT_PAIR,
    JOBSET,
    MS,
    NUMBER,
    CommandOptions,
)

from ...errors import DisqError
from ...ids import is_valid_job_id
from ...node import now_ms
from ..service import JobService, job_fields
from .auth import command_refusal
from .bridge import CommandError, Exchange
from .jsonbody import read_json
from .problems import Problem, bad_request
from .routes import JOBS_ANSWER, Body, Route, answer, count_answer, query_param, ref

if TYPE_CHECKING:
    from ...acl import User
    from ..app import Server

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
T = TypeVar("T")
SERVER_KEY: web.AppKey[Server] = web.AppKey("server")
# The user the request acts as (app.py's middleware sets it from its credentials).
USER_KEY: web.RequestKey[User] = web.RequestKey("user")

DEFAULT_POLL_MS = 30_000  # a GET of jobs waits this long by default (GETJOB: for ever)
# POST /jobs waits this long for the copies by default (ADDJOB's 0 waits for ever, as
# long as no target is flagged failing: a copy a node does not take, its queue paused)
DEFAULT_ADD_TIMEOUT_MS = 10_000
MAX_SCAN_COUNT = 1000  # jobs a GET /jobs (JSCAN) page may ask for
SCAN_CALLS = 10  # JSCAN calls a page makes at most to fill itself
# A job ID in a path, as ids.py makes them: the middle part is base64, whose '/' and '+'
# may come as they are or percent-encoded (%2F, %2B)
JOB_ID_PATTERN = r"D-[0-9a-f]{8}-(?:[A-Za-z0-9+/]|%2[FfBb]){24}-[0-9a-f]{4}"
# JSON names that differ from the options table's field names
ALIASES = {"replicate": "repl", "async": "async_"}
JSON_NAMES = {field: name for name, field in ALIASES.items()}


# -- JSON in ----------------------------------------------------------------------------------
def _options(spec: CommandOptions, data: dict[str, Any], ignore: set[str]) -> list[object]:
    """The option tokens and values of a JSON object, each value's type checked as
    its option's kind wants; an unknown field is a 400."""
    values: dict[str, object] = {}
    for name, value in data.items():
        if name in ignore or value is None:
            continue
        field = ALIASES.get(name, name)
        option = spec.by_field.get(field)
        if option is None:
            raise bad_request(f"unknown field '{name}'")
        kind = option.kind
        if kind == FLAG:
            ok = type(value) is bool
        elif kind in (INT, MS):
            ok = type(value) is int
        elif kind == NUMBER:
            ok = type(value) in (int, float)
        elif kind == INT_PAIR:
            ok = (type(value) is list and len(value) == 2
                  and all(type(v) is int for v in value))
            value = tuple(value) if ok else value
        elif kind in (BYTES, CHOICE):
            ok = type(value) is str
        else:
            ok = False
        if not ok:
            raise bad_request(f"'{name}' must be {_KIND_NAMES.get(kind, 'a value')}")
        values[field] = value
    return spec.encode(values)


_KIND_NAMES = {FLAG: "true or false", INT: "an integer", MS: "an integer (ms)",
               NUMBER: "a number", INT_PAIR: "a list of two integers",
               BYTES: "a string", CHOICE: "a string"}


def _body(data: dict[str, Any]) -> bytes:
    body, encoded = data.get("body"), data.get("body_base64")
    if (body is None) == (encoded is None):
        raise bad_request("a job needs one of 'body' (a string) or 'body_base64'")
    if body is not None:
        if type(body) is not str:
            raise bad_request("'body' must be a string (binary: 'body_base64')")
        return body.encode()
    if type(encoded) is not str:
        raise bad_request("'body_base64' must be a string")
    try:
        return base64.b64decode(encoded, validate=True)
    except (binascii.Error, ValueError):
        raise bad_request("'body_base64' is not base64") from None


async def _json(request: web.Request) -> Any:
    return await read_json(request, request.app[SERVER_KEY].config.http_read_timeout)


async def _json_object(request: web.Request) -> dict[str, Any]:
    data = await _json(request)
    if type(data) is not dict:
        raise bad_request("the request body must be a JSON object")
    return data


def _query_int(request: web.Request, name: str, default: int, low: int = 0) -> int:
    text = request.query.get(name)
    if text is None:
        return default
    try:
        value = int(text)
    except ValueError:
        raise bad_request(f"'{name}' must be an integer") from None
    if value < low:
        raise bad_request(f"'{name}' must be at least {low}")
    return value


def _query_bool(request: web.Request, name: str) -> bool:
    return request.query.get(name, "false").lower() in ("1", "true", "yes", "")


def _job_id(request: web.Request) -> str:
    job_id = unquote(request.match_info["id"])
    if not is_valid_job_id(job_id.encode()):
        raise Problem(400, "Invalid Job ID format.", "BADID")
    return job_id


# -- JSON out ---------------------------------------------------------------------------------
def _body_fields(body: bytes | None) -> dict[str, Any]:
    if body is None:
        return {"body": None}
    try:
        return {"body": body.decode()}
    except UnicodeDecodeError:
        return {"body": None, "body_base64": base64.b64encode(body).decode()}


def _pairs(items: list[Any]) -> dict[str, Any]:
    """A field/value reply (SHOW, QSTAT, QPOLICY GET...) as a JSON object: names with
    '-' become '_', bytes become text."""
    return {items[i].decode().replace("-", "_"): _plain(items[i + 1])
            for i in range(0, len(items) - 1, 2)}


def _plain(value: Any) -> Any:
    if isinstance(value, bytes):
        return value.decode(errors="replace")
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def _job_entry(entry: list[Any]) -> dict[str, Any]:
    """A GETJOB WITHCOUNTERS / QPEEK entry: [queue, id, body, name, value, ...]."""
    job = {"queue": entry[0].decode(errors="replace"), "id": entry[1].decode(),
           **_body_fields(entry[2])}
    job.update(_pairs(entry[3:]))
    return job


def _show(items: list[Any]) -> dict[str, Any]:
    job = _pairs(items)
    job.update(_body_fields(items[items.index(b"body") + 1]))
    return job


# -- running commands -------------------------------------------------------------------------
def _exchange(request: web.Request) -> Exchange:
    server = request.app[SERVER_KEY]
    transport = request.transport
    peer = transport.get_extra_info("peername") if transport is not None else None
    local = transport.get_extra_info("sockname") if transport is not None else None
    exchange = Exchange(server, peer, local)
    exchange.user = request.get(USER_KEY, server.acl.default)
    return exchange


def need(request: web.Request, command: str) -> None:
    """A route that reads the node without a command (GET /metrics, /cluster/stats):
    403 unless its user may run `command`, as if it did."""
    acl = request.app[SERVER_KEY].acl
    refusal = command_refusal(acl, request.get(USER_KEY, acl.default), command)
    if refusal is not None:
        raise Problem(403, refusal, "NOPERM")


async def _run(request: web.Request, *args: object) -> Any:
    exchange = _exchange(request)
    try:
        return await exchange.call(*args)
    except CommandError as exc:
        raise Problem.from_resp(exc.code, exc.message) from None
    finally:
        exchange.finish()


def _ok(data: Any, status: int = 200) -> web.Response:
    return web.json_response(data, status=status)


# -- jobs -------------------------------------------------------------------------------------
async def add_jobs(request: web.Request) -> web.Response:
    """POST /queues/{queue}/jobs: one job (an object) or a batch (a list)."""
    queue = request.match_info["queue"]
    data = await _json(request)
    batch = type(data) is list
    jobs = data if batch else [data]
    if not jobs or not all(type(job) is dict for job in jobs):
        raise bad_request("the request body must be a job object or a non-empty list of them")
    commands = []
    for job in jobs:
        timeout = job.get("timeout_ms", DEFAULT_ADD_TIMEOUT_MS)
        if type(timeout) is not int or timeout < 0:
            raise bad_request("'timeout_ms' must be an integer >= 0")
        commands.append(("ADDJOB", queue, _body(job), timeout,
                         *_options(ADDJOB, job, {"body", "body_base64", "timeout_ms"})))
    exchange = _exchange(request)
    try:
        replies = await exchange.call_many(commands)
    finally:
        exchange.finish()
    if not batch:
        reply = replies[0]
        if isinstance(reply, CommandError):
            raise Problem.from_resp(reply.code, reply.message)
        return _ok({"id": reply.decode()}, 201)
    results = [_problem_fields(r) if isinstance(r, CommandError) else {"id": r.decode()}
               for r in replies]
    failed = any(isinstance(r, CommandError) for r in replies)
    return _ok({"jobs": results}, 207 if failed else 201)


def _problem_fields(error: CommandError) -> dict[str, Any]:
    problem = Problem.from_resp(error.code, error.message)
    return {"error": {"status": problem.status, "code": error.code, "detail": error.message}}


async def get_jobs(request: web.Request) -> web.Response:
    """GET /queues/{queue}/jobs?count=&timeout_ms=&nohang=: GETJOB, a long poll. The
    HTTP client going away takes the waiting consumer off the queue; jobs taken for
    a client gone before the answer left are queued again at once (ENQUEUE)."""
    queue = request.match_info["queue"]
    count = _query_int(request, "count", 1, 1)
    timeout = _query_int(request, "timeout_ms", DEFAULT_POLL_MS)
    nohang = _query_bool(request, "nohang") if "nohang" in request.query else False
    args: list[object] = ["GETJOB", "TIMEOUT", timeout, "COUNT", count, "WITHCOUNTERS"]
    if nohang:
        args.insert(1, "NOHANG")
    exchange = _exchange(request)
    try:
        reply = await exchange.call(*args, "FROM", queue)
        jobs = [_job_entry(entry) for entry in reply or []]
        transport = request.transport
        if jobs and (transport is None or transport.is_closing()):
            await exchange.call("ENQUEUE", *[job["id"] for job in jobs])
            raise web.HTTPBadRequest  # nobody to answer
        return _ok({"jobs": jobs})
    except CommandError as exc:
        raise Problem.from_resp(exc.code, exc.message) from None
    finally:
        exchange.finish()


async def list_jobs(request: web.Request) -> web.Response:
    """GET /jobs?queue=&state=&cursor=&count=: a page of the jobs this node holds
    (JSCAN ... REPLY ALL: SHOW's fields), and the cursor of the next page (0: done).
    JSCAN calls are made until the page has `count` jobs or the scan ends (at most
    SCAN_CALLS of them: a sparse queue may give a short page with more to come)."""
    count = _query_int(request, "count", 50, 1)
    if count > MAX_SCAN_COUNT:
        raise bad_request(f"'count' must be at most {MAX_SCAN_COUNT}")
    cursor = _query_int(request, "cursor", 0)
    filters: list[object] = []
    if "queue" in request.query:
        filters += ["QUEUE", request.query["queue"]]
    for state in request.query.getall("state", []):
        filters += ["STATE", state]
    jobs: list[dict[str, Any]] = []
    exchange = _exchange(request)
    try:
        for _ in range(SCAN_CALLS):
            next_cursor, page = await exchange.call(
                "JSCAN", cursor, "COUNT", count - len(jobs), *filters, "REPLY", "ALL")
            jobs += [_show(item) for item in page]
            cursor = int(next_cursor)
            if cursor == 0 or len(jobs) >= count:
                break
    except CommandError as exc:
        raise Problem.from_resp(exc.code, exc.message) from None
    finally:
        exchange.finish()
    return _ok({"cursor": cursor, "jobs": jobs})


def _direct(request: web.Request, command: str, operation: Callable[[JobService, User], T]
            ) -> T:
    """Run a job operation that answers at once on the typed service, as `command`
    would be run for the request's user (`JobService.gate`): no RESP in between."""
    server = request.app[SERVER_KEY]
    user = request.get(USER_KEY, server.acl.default)
    try:
        server.jobs.gate(user, command)
        return operation(server.jobs, user)
    except DisqError as exc:
        raise Problem.from_resp(exc.code, exc.message) from None


async def show_job(request: web.Request) -> web.Response:
    job_id = _job_id(request).encode()
    job = _direct(request, "show", lambda jobs, user: jobs.show(user, job_id))
    if job is None:
        raise Problem(404, "Unknown job ID", "NOJOB")
    node_id = request.app[SERVER_KEY].node.id
    shown = {name.decode().replace("-", "_"): _plain(value)
             for name, value in job_fields(job, node_id, now_ms())}
    shown.update(_body_fields(job.body))
    return _ok(shown)


async def set_job(request: web.Request) -> web.Response:
    """PATCH /jobs/{id}: JOBSET (priority, at, delay_ms)."""
    job_id = _job_id(request)
    options = _options(JOBSET, await _json_object(request), set())
    await _run(request, "JOBSET", job_id, *options)
    return _ok({"ok": True})


async def delete_job(request: web.Request) -> web.Response:
    job_id = _job_id(request).encode()
    if _direct(request, "deljob", lambda jobs, user: jobs.delete(user, [job_id])) == 0:
        raise Problem(404, "Unknown job ID", "NOJOB")
    return _ok({"deleted": 1})


# POST /jobs/{id}/<action>: the operation on one job, and the reply's key
_ACTIONS: dict[str, tuple[Callable[[JobService, User, bytes], int], str]] = {
    "ackjob": (lambda jobs, user, job_id: jobs.ack(user, [job_id]), "acked"),
    "fastack": (lambda jobs, user, job_id: jobs.fast_ack(user, [job_id]), "deleted"),
    "enqueue": (lambda jobs, user, job_id: jobs.enqueue(user, [job_id]), "queued"),
    "dequeue": (lambda jobs, user, job_id: jobs.dequeue(user, [job_id]), "dequeued"),
    "working": (lambda jobs, user, job_id: jobs.working(user, job_id), "retry_s"),
}


def _job_action(command: str) -> Handler:
    """POST /jobs/{id}/<action>: ACKJOB, FASTACK, ENQUEUE, DEQUEUE, WORKING."""
    operation, key = _ACTIONS[command]

    async def action(request: web.Request) -> web.Response:
        job_id = _job_id(request).encode()
        return _ok({key: _direct(request, command,
                                 lambda jobs, user: operation(jobs, user, job_id))})
    return action


async def nack_job(request: web.Request) -> web.Response:
    job_id = _job_id(request)
    data = await _json_object(request)
    delay = data.pop("delay_ms", None)
    if data:
        raise bad_request(f"unknown field '{next(iter(data))}'")
    if delay is not None and (type(delay) is not int or delay < 0):
        raise bad_request("'delay_ms' must be an integer >= 0")
    ids = [job_id.encode()]
    return _ok({"requeued": _direct(request, "nack",
                                    lambda jobs, user: jobs.nack(user, ids, delay))})


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
    _action_route("ack", "ACKJOB", "acked"),
    _action_route("fastack", "FASTACK", "deleted"),
    _action_route("enqueue", "ENQUEUE", "queued"),
    _action_route("dequeue", "DEQUEUE", "dequeued"),
    _action_route("working", "WORKING", "retry_s"),
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
                 query_param("cursor", {"type": "integer", "minimum": 0, "default": 0}),
                 query_param("count", {"type": "integer", "minimum": 1,
                                 "maximum": MAX_SCAN_COUNT, "default": 50})),
          responses={"200": answer({"type": "object", "properties": {
              "cursor": {"type": "integer"},
              "jobs": {"type": "array", "items": ref("Job")}}})}),
]
