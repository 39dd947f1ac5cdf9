"""The HTTP API's topic routes (/api/v1/topics, a disq extension): JSON -> the topic
service (topic_service.py: TOPIC SUBSCRIBE, UNSUBSCRIBE, LIST, PUBLISH) -> JSON, each
gated as TOPIC would be over RESP (calls.py): subscribing needs the topic and the
queue, publishing the topic."""

from __future__ import annotations

import asyncio
from typing import Any

from aiohttp import web
from disq_client.spec import TOPIC_PUBLISH

from ...errors import DisqError
from ...outcomes import Added, Changed, HeldAnswer, HeldAnswers
from ...topic_requests import TopicPublish, check_topic
from .calls import answer_of, confirmed, durable, problem, run, user_of
from .jsonio import SERVER_KEY, job_body, json_object, ok, option_fields
from .problems import bad_request
from .routes import Body, Route, answer

_JOB_OR_ERROR = {"type": "object", "properties": {
    "id": {"type": "string"},
    "error": {"type": "object", "properties": {"status": {"type": "integer"},
                                               "code": {"type": "string"},
                                               "detail": {"type": "string"}}}}}
_CHANGED = answer({"type": "object", "properties": {"changed": {"type": "boolean"}}})


def _topic(request: web.Request) -> bytes:
    return check_topic(request.match_info["topic"].encode())


async def list_topics(request: web.Request) -> web.Response:
    """GET /topics: each topic and its subscribed queues the user may see."""
    service, user = request.app[SERVER_KEY].topic_service, user_of(request)
    listed = run(request, "topic", None, lambda: service.listed(user, None))
    return ok({"topics": {name.decode(errors="replace"):
                          [q.decode(errors="replace") for q in queues]
                          for name, queues, _ in listed},
               "filters": {name.decode(errors="replace"): {
                   q.decode(errors="replace"): f.decode(errors="replace")
                   for q, f in zip(queues, filters, strict=True) if f}
                   for name, queues, filters in listed}})


async def subscribe(request: web.Request) -> web.Response:
    """POST /topics/{topic}/subscriptions {"queue"}: TOPIC SUBSCRIBE."""
    topic = _topic(request)
    data = await json_object(request)
    queue = data.get("queue")
    if type(queue) is not str or not queue:
        raise bad_request("'queue' must be a queue's name")
    return await _change(request, topic, queue.encode(), unsubscribe=False)


async def unsubscribe(request: web.Request) -> web.Response:
    """DELETE /topics/{topic}/subscriptions/{queue}: TOPIC UNSUBSCRIBE."""
    return await _change(request, _topic(request), request.match_info["queue"].encode(),
                         unsubscribe=True)


async def _change(request: web.Request, topic: bytes, queue: bytes,
                  unsubscribe: bool) -> web.Response:
    service, user = request.app[SERVER_KEY].topic_service, user_of(request)
    held = run(request, "topic", [topic, queue],
               lambda: service.change(user, topic, queue, unsubscribe))
    if held is not None:
        await confirmed(held)
    return ok({"changed": held is not None}, 201 if held is not None and not unsubscribe
              else 200)


async def publish(request: web.Request) -> web.Response:
    """POST /topics/{topic}/publish {"body" | "body_base64", "msgid", ADDJOB's options}:
    TOPIC PUBLISH, answered once every subscribed queue's job has its outcome."""
    topic = _topic(request)
    data = await json_object(request)
    body = job_body(data)
    tokens = TOPIC_PUBLISH.encode(option_fields(TOPIC_PUBLISH, data, {"body", "body_base64"}))
    args = [b"TOPIC", b"PUBLISH", topic, body,
            *(t if type(t) is bytes else str(t).encode() for t in tokens)]
    server, user = request.app[SERVER_KEY], user_of(request)
    answers = HeldAnswers(server.node)
    results = run(request, "topic", [topic],
                  lambda: server.topic_service.publish(user, TopicPublish.parse(args),
                                                       answers))
    jobs: dict[str, Any] = {}
    try:
        for queue, result in results:
            outcome: Added | Changed = (await answer_of(result.then)
                                        if isinstance(result, HeldAnswer) else result)
            jobs[queue.decode(errors="replace")] = _outcome(outcome)
        await durable(server.node)
    except asyncio.CancelledError:
        for _, result in results:
            if isinstance(result, HeldAnswer):
                result.cancel()
        raise
    return ok({"jobs": jobs})


def _outcome(outcome: Added | Changed) -> dict[str, Any]:
    if isinstance(outcome, DisqError):
        return {"error": {"status": problem(outcome).status, "code": outcome.code,
                          "detail": outcome.message}}
    assert outcome is not None
    return {"id": outcome.decode()}


ROUTES: list[Route] = [
    Route("GET", "/api/v1/topics", list_topics, ("TOPIC LIST",), tag="topics",
          summary="Every topic and its subscribed queues the user may see",
          responses={"200": answer({"type": "object", "properties": {
              "topics": {"type": "object", "additionalProperties": {
                  "type": "array", "items": {"type": "string"}}},
              "filters": {"type": "object", "description": "topic -> queue -> its WHERE "
                          "filter (subscriptions with one)", "additionalProperties": {
                              "type": "object", "additionalProperties": {
                                  "type": "string"}}}}})}),
    Route("POST", "/api/v1/topics/{topic}/subscriptions", subscribe,
          ("TOPIC SUBSCRIBE",), tag="topics",
          summary="Subscribe a queue: it gets a job for each publish to the topic",
          body=Body({"type": "object", "required": ["queue"], "properties": {
              "queue": {"type": "string", "minLength": 1}}, "additionalProperties": False}),
          responses={"201": _CHANGED, "200": _CHANGED}, errors=(503,)),
    Route("DELETE", "/api/v1/topics/{topic}/subscriptions/{queue}", unsubscribe,
          ("TOPIC UNSUBSCRIBE",), tag="topics", summary="Unsubscribe a queue",
          responses={"200": _CHANGED}, errors=(503,)),
    Route("POST", "/api/v1/topics/{topic}/publish", publish, ("TOPIC PUBLISH",),
          tag="topics", summary="Publish: one job in each subscribed queue",
          description="msgid: a retried publish with it adds nothing twice to any queue. "
                      "The other fields are ADDJOB's options but dedup and unique. 404 "
                      "NOTOPIC if no queue subscribes to the topic.",
          body=Body(fields={
              "body": {"type": "string", "description": "the jobs' body, as text"},
              "body_base64": {"type": "string", "format": "byte",
                              "description": "the jobs' body, binary (instead of body)"}}),
          responses={"200": answer({"type": "object", "properties": {"jobs": {
              "type": "object", "additionalProperties": _JOB_OR_ERROR}}},
              "each subscribed queue's job ID or error")}, errors=(404,)),
]
