"""The HTTP API's queue routes (/api/v1/queues...): JSON -> the queue service
(queue_service.py) -> JSON, each operation gated as its command would be over RESP
(calls.py: the user's commands and the queue the URL names). The jobs of a queue
(POST, GET /queues/{queue}/jobs) are api.py's."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from aiohttp import web
from disq_client.spec import DEADLETTER_REQUEUE, QPOLICY_SET

from ... import errors
from ...node import now_ms
from ...options import parse_int
from ...queue import PAUSE_NAMES
from ...queue_requests import DeadletterRequeue, Pause, QPolicySet, QScan
from ..queue_service import policy_fields, queue_fields
from ..service import job_fields
from .calls import attempt, confirmed, fields_json, gate, run, user_of
from .jsonio import (
    SERVER_KEY,
    attrs_json,
    body_fields,
    json_object,
    ok,
    option_tokens,
    query_int,
)
from .problems import Problem, bad_request
from .routes import JOBS_ANSWER, Body, Route, answer, count_answer, query_param, ref

if TYPE_CHECKING:
    from ...job import Job
    from ...node import Node
    from ..later import Later

MAX_QUEUES_LISTED = 1000
SCAN_PAGE = 1000  # buckets a QSCAN step of GET /queues walks
PAUSE_FLAGS = {name.decode(): flags for flags, name in PAUSE_NAMES.items()}


async def list_queues(request: web.Request) -> web.Response:
    """GET /queues: every queue this node knows (up to MAX_QUEUES_LISTED), with its
    QSTAT, its length in the whole cluster and its policy."""
    queues = request.app[SERVER_KEY].queues_service
    names: list[bytes] = []
    cursor = 0
    while True:
        user = gate(request, "qscan")
        cursor, page = queues.scan(user, QScan(cursor, SCAN_PAGE))
        names.extend(queue.name for queue in page)
        if cursor == 0 or len(names) >= MAX_QUEUES_LISTED:
            break
    names = sorted(set(names))[:MAX_QUEUES_LISTED]
    listed = await asyncio.gather(*(_queue_info(request, name) for name in names))
    return ok({"queues": [q for q in listed if q is not None]})


async def _queue_info(request: web.Request, name: bytes) -> dict[str, Any] | None:
    """QSTAT's fields, "length_cluster" (GLOBALQLEN) and "policy" (QPOLICY GET's
    fields); None if QSTAT finds no queue or is refused. A refused GLOBALQLEN or
    QPOLICY GET leaves its field null."""
    service = request.app[SERVER_KEY].queues_service
    queues = [name]
    queue = attempt(request, "qstat", queues, lambda: service.get(name))
    total = attempt(request, "globalqlen", queues, lambda: service.global_length(name))
    policy = attempt(request, "qpolicy", queues, lambda: service.policy(name))
    length_cluster = None if total is None else await total.wait()
    if queue is None:
        return None
    info = fields_json(queue_fields(queue, now_ms()))
    info["length_cluster"] = length_cluster
    info["policy"] = None if policy is None else fields_json(policy_fields(policy))
    retained = None if policy is None else request.app[SERVER_KEY].retention.queue_info(name)
    info["retention"] = None if retained is None else dict(
        zip(("bytes", "jobs", "oldest_ms"), retained, strict=True))
    return info


async def get_queue(request: web.Request) -> web.Response:
    info = await _queue_info(request, request.match_info["queue"].encode())
    if info is None:
        raise Problem(404, "The queue does not exist on this node", "NOQUEUE")
    return ok(info)


async def update_queue(request: web.Request) -> web.Response:
    """PUT /queues/{queue}: {"pause": "in"|"out"|"all"|"none", "bcast": bool,
    "policy": {...} or null (QPOLICY DEL)}. Both changes are tried, as a RESP client's
    pipeline would: the first error is the answer."""
    queue = request.match_info["queue"].encode()
    data = await json_object(request)
    unknown = set(data) - {"pause", "bcast", "policy"}
    if unknown:
        raise bad_request(f"unknown field '{sorted(unknown)[0]}'")
    pause: Pause | None = None
    if "pause" in data:
        if data["pause"] not in ("in", "out", "all", "none"):
            raise bad_request("'pause' must be one of in, out, all, none")
        bcast = data.get("bcast", True)
        if type(bcast) is not bool:
            raise bad_request("'bcast' must be true or false")
        pause = Pause(queue, PAUSE_FLAGS[data["pause"]], bcast)
    policy_tokens: list[object] | None = None  # (None: QPOLICY DEL)
    named = [queue]  # the queues QPOLICY names: its own, and its dead letters' if given
    if "policy" in data:
        policy = data["policy"]
        if policy is not None and not (type(policy) is dict and policy):
            raise bad_request("'policy' must be an object of policy fields, or null")
        if policy is not None:
            policy_tokens = option_tokens(QPOLICY_SET, policy, set())
            if type(policy.get("deadletter")) is str:
                named.append(policy["deadletter"].encode())
    if pause is None and "policy" not in data:
        raise bad_request("nothing to change: give 'pause' and/or 'policy'")
    service = request.app[SERVER_KEY].queues_service
    failures: list[Problem] = []
    if pause is not None:
        try:
            run(request, "pause", [queue], lambda: service.pause(pause))
        except Problem as refused:
            failures.append(refused)
    if "policy" in data:
        try:
            if policy_tokens is None:
                held = run(request, "qpolicy", named, lambda: service.delete_policy(queue))
            else:
                held = run(request, "qpolicy", named, lambda: service.set_policy(
                    QPolicySet.parse([b"QPOLICY", queue, b"SET", *_args(policy_tokens)])))
            if held is not None:
                await confirmed(held)
        except Problem as refused:
            failures.append(refused)
    if failures:
        raise failures[0]
    return await get_queue(request)


def _args(tokens: list[object]) -> list[bytes]:
    """Option tokens and values (`option_tokens`) as a command's arguments, for the typed
    request's parser (the one place options are checked, with RESP's errors)."""
    return [t if isinstance(t, bytes) else str(t).encode() for t in tokens]


async def peek_queue(request: web.Request) -> web.Response:
    count = query_int(request, "count", 10, -(2**31))
    queue = request.match_info["queue"].encode()
    service = request.app[SERVER_KEY].queues_service

    def peek() -> list[Job]:
        if parse_int(str(count).encode()) is None:  # (QPEEK's own limit)
            raise errors.NOT_INTEGER
        return service.peek(queue, count)

    node = request.app[SERVER_KEY].node
    return ok({"jobs": [_peeked(job, node) for job in run(request, "qpeek", [queue], peek)]})


def _peeked(job: Job, node: Node) -> dict[str, Any]:
    """A job as QPEEK gives it: queue, ID, body, then disq's extension fields (SHOW's
    fields after the body) for a job that uses them."""
    fields = job_fields(job, node.id, now_ms())
    extensions = fields[[name for name, _ in fields].index(b"body") + 1:]
    return {"queue": (job.queue or b"").decode(errors="replace"), "id": job.id.decode(),
            **body_fields(job.body), **fields_json(extensions), **attrs_json(job)}


async def requeue_dead(request: web.Request) -> web.Response:
    """POST /queues/{queue}/requeue-dead {"count": n}: DEADLETTER REQUEUE."""
    data = await json_object(request)
    count = data.get("count")
    if count is not None and (type(count) is not int or count < 1):
        raise bad_request("'count' must be an integer > 0")
    queue = request.match_info["queue"].encode()
    service = request.app[SERVER_KEY].queues_service
    options = option_tokens(DEADLETTER_REQUEUE, {"count": count or None}, set())
    done: Later[int] = run(request, "deadletter", [queue], lambda: service.requeue_dead(
        DeadletterRequeue.parse([b"DEADLETTER", b"REQUEUE", queue, *_args(options)])))
    return ok({"requeued": await done.wait()})


MAX_IDS = 10_000  # job IDs in one request


async def requeue_dead_jobs(request: web.Request) -> web.Response:
    """POST /dead-letters/requeue {"ids": [...]}: DEADLETTER REQUEUE-JOB."""
    data = await json_object(request)
    ids = data.get("ids")
    if (type(ids) is not list or not 0 < len(ids) <= MAX_IDS
            or not all(type(i) is str for i in ids)):
        raise bad_request(f"'ids' must be a list of 1 to {MAX_IDS} job IDs")
    service = request.app[SERVER_KEY].queues_service
    user = user_of(request)
    count = run(request, "deadletter", None,
                lambda: service.requeue_dead_jobs(user, [i.encode() for i in ids]))
    return ok({"requeued": count})


async def delete_queue(request: web.Request) -> web.Response:
    """DELETE /queues/{queue}: QDEL."""
    return await _purged(request, "qdel", whole=True)


async def purge_queue(request: web.Request) -> web.Response:
    """POST /queues/{queue}/purge: QPURGE."""
    return await _purged(request, "qpurge", whole=False)


async def _purged(request: web.Request, command: str, whole: bool) -> web.Response:
    queue = request.match_info["queue"].encode()
    service = request.app[SERVER_KEY].queues_service
    user = user_of(request)
    count, held = run(request, command, [queue], lambda: service.purge(user, queue, whole))
    await confirmed(held)
    return ok({"deleted": count})


# What GET /queues/{queue} runs, and PUT's answer: a refusal leaves its part out.
QUEUE_READS = ("QSTAT", "GLOBALQLEN", "QPOLICY GET")
QUEUE_FIELDS = ("`length_cluster` is GLOBALQLEN's answer, `policy` QPOLICY GET's fields; "
                "either is null where the user may not run its command. `retention`: the "
                "acked jobs this node keeps of a RETAIN queue (bytes, jobs, oldest_ms).")

ROUTES: list[Route] = [
    Route("GET", "/api/v1/queues", list_queues, ("QSCAN",), optional=QUEUE_READS,
          tag="queues", summary="Every queue this node knows, with its counters, its "
                                "cluster-wide length and its policy",
          description=f"Up to {MAX_QUEUES_LISTED} queues, by name; a queue whose QSTAT "
                      f"the user may not run is left out. {QUEUE_FIELDS}",
          responses={"200": answer({"type": "object", "properties": {
              "queues": {"type": "array", "items": {"type": "object"}}}})}),
    Route("GET", "/api/v1/queues/{queue}", get_queue, optional=QUEUE_READS, tag="queues",
          summary="One queue: its counters, its cluster-wide length, its policy",
          description="404 if the queue does not exist on this node, or the user may not "
                      f"run QSTAT on it. {QUEUE_FIELDS}",
          errors=(404,)),
    Route("PUT", "/api/v1/queues/{queue}", update_queue,
          ("PAUSE", "QPOLICY SET", "QPOLICY DEL"), optional=QUEUE_READS, tag="queues",
          summary="Pause or resume a queue, set or delete its policy",
          description="Both changes are tried: the first refusal or error is the answer; "
                      "else the queue as GET shows it.",
          body=Body({"type": "object", "properties": {
              "pause": {"type": "string", "enum": ["in", "out", "all", "none"]},
              "bcast": {"type": "boolean", "default": True},
              "policy": {"oneOf": [ref("Policy")], "nullable": True}},
              "additionalProperties": False}),
          errors=(404,)),
    Route("GET", "/api/v1/queues/{queue}/peek", peek_queue, ("QPEEK",), tag="queues",
          query=(query_param("count", {"type": "integer", "default": 10}),),
          responses={"200": JOBS_ANSWER}),
    Route("DELETE", "/api/v1/queues/{queue}", delete_queue, ("QDEL",), tag="queues",
          summary="Delete a queue on every node: its jobs added before, its policy, its "
                  "topics' subscriptions",
          description="Answered once every reachable node deleted its jobs (503 NOREPL "
                      "naming those that did not confirm: the change reaches them by the "
                      "periodic sync). `deleted`: the jobs deleted on this node.",
          responses={"200": count_answer("deleted", "QDEL")}),
    Route("POST", "/api/v1/queues/{queue}/purge", purge_queue, ("QPURGE",), tag="queues",
          summary="Delete every job of a queue added before, on every node; the queue "
                  "keeps its policy",
          description="As DELETE /api/v1/queues/{queue}, the queue itself kept.",
          responses={"200": count_answer("deleted", "QPURGE")}),
    Route("POST", "/api/v1/dead-letters/requeue", requeue_dead_jobs,
          ("DEADLETTER REQUEUE-JOB",), tag="queues",
          summary="These dead letters back to the queues they came from",
          description="Those of the jobs this node holds that are dead letters, their "
                      "counters reset, their other holders told; a job not held here or "
                      "not a dead letter counts for nothing.",
          body=Body({"type": "object", "required": ["ids"], "properties": {
              "ids": {"type": "array", "items": {"type": "string"}, "minItems": 1,
                      "maxItems": MAX_IDS}}, "additionalProperties": False}),
          responses={"200": count_answer("requeued", "DEADLETTER REQUEUE-JOB")}),
    Route("POST", "/api/v1/queues/{queue}/requeue-dead", requeue_dead,
          ("DEADLETTER REQUEUE",), tag="queues", body=Body(closed=False, required=False),
          responses={"200": count_answer("requeued", "DEADLETTER REQUEUE")}),
]
