"""The HTTP API's batch routes (/api/v1/batches, a disq extension): JSON -> the batch
service (batch_service.py: BATCH NEW, CLOSE, STATUS, LIST) -> JSON, each gated as BATCH
would be over RESP (calls.py), with the same queue rules: a user reads or closes only
the batches whose callback queues it may use. A batch's members are added by the job
route (POST /queues/{queue}/jobs with "batch", ADDJOB's option)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from aiohttp import web
from disq_client.spec import BATCH_NEW, BATCH_STATES, MAX_BATCHES_LISTED

from ...end_requests import BatchList, BatchNew, check_bid
from ...errors import DisqError
from .calls import confirmed, fields_json, problem, run, user_of
from .jsonio import SERVER_KEY, json_object, ok, option_fields
from .problems import bad_request
from .routes import Body, Route, answer, count_answer, query_param

if TYPE_CHECKING:
    from ..batch_service import StatusField


def _path_bid(request: web.Request) -> bytes:
    """The batch ID the path names (percent-decoded by the router; UTF-8)."""
    return request.match_info["bid"].encode()


def _batch_json(fields: list[tuple[bytes, StatusField]]) -> dict[str, Any]:
    """BATCH STATUS's fields as JSON; `expires_ms` says its unit."""
    shown = fields_json(fields)
    shown["expires_ms"] = shown.pop("expires")
    return shown


async def new_batch(request: web.Request) -> web.Response:
    """POST /batches {"id", "ondone": [queue, body], "onsuccess", "ttl_ms"}: BATCH NEW,
    answered once every reachable node holds the batch (-NOREPL's 503 otherwise)."""
    data = await json_object(request)
    bid = data.get("id")
    if type(bid) is not str:
        raise bad_request("'id' must be a string, the batch's ID")
    values = option_fields(BATCH_NEW, data, {"id"})
    service, user = request.app[SERVER_KEY].batch_service, user_of(request)
    held = run(request, "batch", None,
               lambda: service.new(user, BatchNew.from_fields(bid.encode(), values)))
    await confirmed(held)
    return ok(_batch_json(run(request, "batch", None,
                              lambda: service.status(user, bid.encode()))), 201)


async def close_batch(request: web.Request) -> web.Response:
    """POST /batches/{bid}/close: BATCH CLOSE, {"members": the members counted}."""
    bid = _path_bid(request)
    service, user = request.app[SERVER_KEY].batch_service, user_of(request)
    closing = run(request, "batch", None, lambda: service.close(user, check_bid(bid)))
    outcome = await closing.wait()
    if isinstance(outcome, DisqError):
        raise problem(outcome)
    return ok({"members": outcome})


async def get_batch(request: web.Request) -> web.Response:
    """GET /batches/{bid}: BATCH STATUS."""
    bid = _path_bid(request)
    service, user = request.app[SERVER_KEY].batch_service, user_of(request)
    return ok(_batch_json(run(request, "batch", None,
                              lambda: service.status(user, check_bid(bid)))))


async def list_batches(request: web.Request) -> web.Response:
    """GET /batches?state=: BATCH LIST, and whether every batch the user may see is
    in it (`complete`)."""
    state = request.query.get("state")
    service, user = request.app[SERVER_KEY].batch_service, user_of(request)

    def listing() -> tuple[list[dict[str, Any]], bool]:
        batches, complete = service.listed(user, BatchList.from_fields({"state": state}))
        return [_batch_json(service.fields(batch)) for batch in batches], complete

    batches, complete = run(request, "batch", None, listing)
    return ok({"batches": batches, "complete": complete})


BATCH_SCHEMA = {"type": "object", "properties": {
    "id": {"type": "string"},
    "state": {"type": "string", "enum": list(BATCH_STATES)},
    "members": {"type": "integer", "description": "counted at CLOSE (open: the members "
                                                  "this node knows of), as jobs"},
    "pending": {"type": "integer", "description": "members not ended yet, as jobs"},
    "acked": {"type": "integer", "description": "members acknowledged, as jobs"},
    "dead": {"type": "integer", "description": "members dead-lettered or expired, as jobs"},
    "callbacks": {"type": "array", "items": {"type": "string"},
                  "description": "the IDs of the callback jobs added (once done)"},
    "expires_ms": {"type": "integer", "description": "when the batch is forgotten "
                                                     "(Unix ms)"}}}
BATCH_ANSWER = {"200": answer(BATCH_SCHEMA)}
# NOBATCH 404, BATCHCLOSED / BATCHEXISTS 409, BATCHFULL 507, NOMAJORITY / NOREPL 503
# (problems.py)

ROUTES: list[Route] = [
    Route("POST", "/api/v1/batches", new_batch, ("BATCH NEW",), tag="batches",
          summary="Make a batch: its members are jobs added with \"batch\": its ID",
          description="Answered once every reachable node holds the batch. ondone / "
                      "onsuccess: [queue, body], the callback job added once every member "
                      "ended (onsuccess: none went dead); ttl_ms: how long the batch is kept "
                      "(default a week).",
          body=Body(fields={"id": {"type": "string", "minLength": 1, "maxLength": 256,
                                   "description": "the batch's ID"}}),
          responses={"201": answer(BATCH_SCHEMA, "made: the batch, as GET shows it")},
          errors=(409, 503, 507)),
    Route("GET", "/api/v1/batches", list_batches, ("BATCH LIST",), tag="batches",
          summary="The batches this node knows whose callback queues the user may use",
          description=f"The newest {MAX_BATCHES_LISTED} by creation (complete: false when "
                      "there are more); every node holds every batch. A batch without a "
                      "callback names no queue: only a user allowed every queue sees it "
                      "listed.",
          query=(query_param("state", {"type": "string", "enum": list(BATCH_STATES)},
                             "only the batches in this state"),),
          responses={"200": answer({"type": "object", "properties": {
              "batches": {"type": "array", "items": BATCH_SCHEMA},
              "complete": {"type": "boolean"}}})}),
    Route("GET", "/api/v1/batches/{bid}", get_batch, ("BATCH STATUS",), tag="batches",
          responses=BATCH_ANSWER, errors=(404,)),
    Route("POST", "/api/v1/batches/{bid}/close", close_batch, ("BATCH CLOSE",),
          tag="batches", summary="Close a batch: no more members",
          description="Answered once a majority of the nodes stopped taking members: the "
                      "members counted. 409 BATCHCLOSED: closed already; 503 NOMAJORITY: "
                      "a majority did not answer: not closed (the nodes that answered take "
                      "no new member), close it again.",
          responses={"200": count_answer("members", "BATCH CLOSE")}, errors=(404, 409, 503)),
]
