"""The HTTP routes of retained jobs (QPOLICY ... RETAIN, disq extensions): REPLAY a
window of a queue's acked jobs, and RETAINED (one node's retained jobs, a page at a
time). Both parse their arguments with the RESP commands' typed requests, so the
checks and errors are the same."""

from __future__ import annotations

from typing import Any

from aiohttp import web
from disq_client.spec import REPLAY, RETAINED

from ...retention.requests import Replay, Retained, cursor_of
from ...retention.segments import RetainedJob
from .calls import run, user_of
from .jsonio import SERVER_KEY, body_fields, json_object, ok, option_tokens
from .problems import bad_request
from .routes import Body, Route, answer, query_param

WHERE_SCHEMA = {"type": "array", "items": {"type": "array", "items": {"type": "string"},
                                           "minItems": 2, "maxItems": 3},
                "description": "filters on the jobs' attributes, as GETJOB's WHERE: "
                               "[key, op, value] or [key, \"EXISTS\"]"}


def _where_args(where: Any) -> list[bytes]:
    if where is None:
        return []
    if type(where) is not list or not all(
            type(w) is list and all(type(x) is str for x in w) for w in where):
        raise bad_request("'where' must be a list of [key, op, value] lists of strings")
    args: list[bytes] = []
    for condition in where:
        args += [b"WHERE", *(x.encode() for x in condition)]
    return args


def _args(tokens: list[object]) -> list[bytes]:
    return [t if isinstance(t, bytes) else str(t).encode() for t in tokens]


async def replay(request: web.Request) -> web.Response:
    """POST /queues/{queue}/replay {"start": ms, "end": ms, "into": q, "where": [...]}:
    REPLAY, answered once every job was added."""
    queue = request.match_info["queue"].encode()
    data = await json_object(request)
    where = _where_args(data.pop("where", None))
    args = [b"REPLAY", queue, *_args(option_tokens(REPLAY, data, set())), *where]
    server, user = request.app[SERVER_KEY], user_of(request)
    parsed = run(request, "replay", [queue], lambda: Replay.parse(args))
    later = run(request, "replay", [queue, parsed.target],
                lambda: server.replays.replay(user, parsed))
    result = await later.wait()
    return ok({name.decode(): value for name, value in result.fields()})


def retained_json(job: RetainedJob) -> dict[str, Any]:
    attrs = job.attr_dict()
    return {"id": job.id.decode(), "queue": job.queue.decode(errors="replace"),
            **body_fields(job.body), "created_ms": job.ms, "acked_ms": job.acked,
            "nodes": job.nodes,
            "attrs": {k.decode(errors="replace"): v.decode(errors="replace")
                      for k, v in attrs.items()}}


async def retained(request: web.Request) -> web.Response:
    """GET /queues/{queue}/retained?start=&end=&after=&count=&shard=: RETAINED on this
    node."""
    queue = request.match_info["queue"].encode()
    data: dict[str, Any] = {}
    for name in ("start", "end", "count"):
        if name in request.query:
            try:
                data[name] = int(request.query[name])
            except ValueError:
                raise bad_request(f"'{name}' must be an integer") from None
    for name in ("after", "shard"):
        if name in request.query:
            data[name] = request.query[name]
    args = [b"RETAINED", queue, *_args(option_tokens(RETAINED, data, set()))]
    server = request.app[SERVER_KEY]

    def parse() -> Retained:
        parsed = Retained.parse(args)
        server.replays.check(queue)
        return parsed

    parsed = run(request, "retained", [queue], parse)
    jobs, more = await server.replays.retained(parsed)
    cursor = cursor_of(jobs[-1].key()).decode() if more and jobs else ""
    return ok({"cursor": cursor, "jobs": [retained_json(job) for job in jobs]})


RETAINED_JOB = {"type": "object", "properties": {
    "id": {"type": "string"}, "queue": {"type": "string"},
    "body": {"type": "string", "nullable": True},
    "body_base64": {"type": "string", "description": "a body that is not UTF-8"},
    "created_ms": {"type": "integer"}, "acked_ms": {"type": "integer"},
    "nodes": {"type": "array", "items": {"type": "string"}},
    "attrs": {"type": "object", "additionalProperties": {"type": "string"}}}}

ROUTES: list[Route] = [
    Route("POST", "/api/v1/queues/{queue}/replay", replay, ("REPLAY",), tag="queues",
          summary="Add the retained jobs of a window again (QPOLICY ... RETAIN)",
          description="The acked jobs of the queue created from start to end (Unix ms; "
                      "end: now), kept by every reachable node, added to `into` (the "
                      "queue by default) in creation order; a retry adds none twice.",
          body=Body(fields={"where": WHERE_SCHEMA}),
          responses={"200": answer({"type": "object", "properties": {
              name: {"type": "integer"} for name in
              ("added", "skipped", "failed", "nodes", "unreached")}})},
          errors=(400,)),
    Route("GET", "/api/v1/queues/{queue}/retained", retained, ("RETAINED",), tag="queues",
          summary="A page of this node's retained jobs of a queue, in creation order",
          description="Pass the returned cursor as `after` for the next page (\"\": the "
                      "last). `shard` i/n: only the jobs whose ID is in shard i of n.",
          query=(query_param("start", {"type": "integer", "minimum": 0}),
                 query_param("end", {"type": "integer", "minimum": 0}),
                 query_param("after", {"type": "string"}),
                 query_param("count", {"type": "integer", "minimum": 1}),
                 query_param("shard", {"type": "string"})),
          responses={"200": answer({"type": "object", "properties": {
              "cursor": {"type": "string"},
              "jobs": {"type": "array", "items": RETAINED_JOB}}})},
          errors=(400,)),
]
