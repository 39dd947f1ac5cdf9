"""The HTTP API's recurring jobs (/api/v1/cron, a disq extension): JSON -> the schedule
service (cron_service.py: CRON LIST, ADD, DEL) -> JSON, each gated as CRON would be over
RESP (calls.py): a user lists, adds and deletes the schedules of the queues it may use."""

from __future__ import annotations

from typing import Any

from aiohttp import web
from disq_client.spec import CRON_ADD

from ...node import now_ms
from ...queue_requests import CronAdd
from ..cron_service import schedule_fields
from .calls import confirmed, fields_json, gate, run, user_of
from .jsonio import SERVER_KEY, json_object, ok, option_tokens
from .problems import Problem, bad_request
from .routes import Body, Route, answer


def _schedules(request: web.Request, name: bytes | None = None) -> list[dict[str, Any]]:
    user = gate(request, "cron")
    now = now_ms()
    return [fields_json(schedule_fields(schedule, tick_replicate, now))
            for schedule, tick_replicate in request.app[SERVER_KEY].schedules_service.listed(user)
            if name is None or schedule.name == name]


async def cron_list(request: web.Request) -> web.Response:
    """GET /cron: the schedules of the queues the user may see (CRON LIST)."""
    return ok({"schedules": _schedules(request)})


def _text(data: dict[str, Any], field: str) -> bytes:
    value = data.get(field)
    if type(value) is not str:
        raise bad_request(f"'{field}' must be a string")
    return value.encode()


async def cron_add(request: web.Request) -> web.Response:
    """POST /cron {"name", "queue", "spec", "body", CRON ADD's options}: the schedule
    defined or replaced, answered once every reachable node holds it."""
    data = await json_object(request)
    name, queue, spec, body = (_text(data, f) for f in ("name", "queue", "spec", "body"))
    tokens = option_tokens(CRON_ADD, data, {"name", "queue", "spec", "body"})
    args = [b"CRON", b"ADD", name, queue, spec, body,
            *(t if isinstance(t, bytes) else str(t).encode() for t in tokens)]
    service, user = request.app[SERVER_KEY].schedules_service, user_of(request)
    held = run(request, "cron", [queue], lambda: service.add(user, CronAdd.parse(args)))
    await confirmed(held)
    return ok({"schedule": _schedules(request, name)[0]}, 201)


async def cron_delete(request: web.Request) -> web.Response:
    """DELETE /cron/{name}: CRON DEL; 404 if there is no such schedule."""
    name = request.match_info["name"].encode()
    service, user = request.app[SERVER_KEY].schedules_service, user_of(request)
    held = run(request, "cron", None, lambda: service.delete(user, name))
    if held is None:
        raise Problem(404, "no such schedule", "NOSCHEDULE")
    await confirmed(held)
    return ok({"deleted": True})


SCHEDULE = {"type": "object", "description": "CRON LIST's fields: name, queue, spec, tz, "
            "next_fire_in (ms), last_fire (Unix ms), last_job, replicate, tick_replicate"}

ROUTES: list[Route] = [
    Route("GET", "/api/v1/cron", cron_list, ("CRON LIST",), tag="cron",
          summary="The recurring jobs of the queues the user may see",
          responses={"200": answer({"type": "object", "properties": {
              "schedules": {"type": "array", "items": SCHEDULE}}})}),
    Route("POST", "/api/v1/cron", cron_add, ("CRON ADD",), tag="cron",
          summary="Define or replace a recurring job",
          description="Answered once every reachable node holds it (503 NOREPL naming "
                      "those that did not confirm). spec: cron syntax, seconds first when "
                      "six fields; tz: a time zone name (UTC by default).",
          body=Body(fields={
              "name": {"type": "string", "description": "the schedule's name"},
              "queue": {"type": "string", "description": "where its jobs go"},
              "spec": {"type": "string", "description": "cron syntax"},
              "body": {"type": "string", "description": "each job's body"}}),
          responses={"201": answer({"type": "object", "properties": {
              "schedule": SCHEDULE}}, "defined")}),
    Route("DELETE", "/api/v1/cron/{name}", cron_delete, ("CRON DEL",), tag="cron",
          summary="Delete a recurring job", errors=(404,),
          responses={"200": answer({"type": "object", "properties": {
              "deleted": {"type": "boolean"}}})}),
]
