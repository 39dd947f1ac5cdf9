"""The OpenAPI 3 document of the HTTP API (/openapi.json, shown at /docs). The job
options' schemas come from the options table the RESP parser uses (disq_client/spec.py),
so an option added there is documented here."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

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
    QPOLICY_SET,
    CommandOptions,
)

from ...config import DISQ_VERSION
from .api import DEFAULT_ADD_TIMEOUT_MS, JSON_NAMES

if TYPE_CHECKING:
    from ..app import Server


def _option_schema(kind: str, low: int, high: int, doc: str) -> dict[str, Any]:
    if kind == FLAG:
        return {"type": "boolean", "description": doc}
    if kind in (INT, MS):
        return {"type": "integer", "minimum": low, "maximum": high, "description": doc}
    if kind == NUMBER:
        # above `low`: OpenAPI 3.0 (the version declared) says it with a boolean beside
        # minimum (3.1's numeric exclusiveMinimum is invalid there)
        return {"type": "number", "minimum": low, "exclusiveMinimum": True, "maximum": high,
                "description": doc}
    if kind == INT_PAIR:
        return {"type": "array", "items": {"type": "integer", "minimum": low, "maximum": high},
                "minItems": 2, "maxItems": 2, "description": doc}
    if kind in (BYTES, CHOICE):
        return {"type": "string", "description": doc}
    return {"description": doc}


def _options_schema(spec: CommandOptions, extra: dict[str, Any] | None = None,
                    required: list[str] | None = None) -> dict[str, Any]:
    properties: dict[str, Any] = dict(extra or {})
    for option in spec.options:
        name = JSON_NAMES.get(option.field, option.field)
        doc = f"{spec.name} {option.token}" + (" (a disq extension)" if option.extension
                                               else "")
        if option.error:
            doc += f"; else: {option.error}"
        properties[name] = _option_schema(option.kind, option.low, option.high, doc)
    schema: dict[str, Any] = {"type": "object", "properties": properties,
                              "additionalProperties": False}
    if required:
        schema["required"] = required
    return schema


NEW_JOB = _options_schema(ADDJOB, {
    "body": {"type": "string", "description": "the job's body, as text"},
    "body_base64": {"type": "string", "format": "byte",
                    "description": "the job's body, binary (instead of body)"},
    "timeout_ms": {"type": "integer", "minimum": 0, "default": DEFAULT_ADD_TIMEOUT_MS,
                   "description": "ADDJOB's ms-timeout: how long to wait for the copies "
                                  "(0: for ever, as long as no target is flagged failing)"},
})
JOB = {
    "type": "object",
    "description": "A job: GETJOB WITHCOUNTERS' or QPEEK's fields, SHOW's for GET "
                   "/jobs/{id}; 'body' is null and 'body_base64' given for a body that "
                   "is not UTF-8. Jobs using disq's extensions also have priority, group, "
                   "due_ms (and max_deliveries, dead_from, dead_reason).",
    "properties": {
        "id": {"type": "string"}, "queue": {"type": "string"},
        "body": {"type": "string", "nullable": True},
        "body_base64": {"type": "string", "format": "byte"},
        "nacks": {"type": "integer"}, "additional_deliveries": {"type": "integer"},
    },
    "additionalProperties": True,
}
PROBLEM = {
    "type": "object",
    "description": "RFC 9457 problem details; `code` is the RESP error code (NOJOB, "
                   "NOREPL, ERR, ...), `detail` its message.",
    "properties": {"type": {"type": "string"}, "title": {"type": "string"},
                   "status": {"type": "integer"}, "detail": {"type": "string"},
                   "code": {"type": "string"}},
}


def _ok(schema: dict[str, Any], description: str = "OK") -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def _errors(*statuses: int) -> dict[str, Any]:
    ref = {"$ref": "#/components/schemas/Problem"}
    return {str(status): {"description": "see `code` and `detail`",
                          "content": {"application/problem+json": {"schema": ref}}}
            for status in (400, 401, *statuses)}


def _body(schema: dict[str, Any], required: bool = True) -> dict[str, Any]:
    return {"required": required, "content": {"application/json": {"schema": schema}}}


def _count(key: str, command: str) -> dict[str, Any]:
    return _ok({"type": "object", "properties": {key: {"type": "integer"}}},
               f"{command}'s answer")


JOB_ID = {"name": "id", "in": "path", "required": True, "schema": {"type": "string"},
          "description": "a job ID (D-...)"}
QUEUE = {"name": "queue", "in": "path", "required": True, "schema": {"type": "string"}}
JOB_REF = {"$ref": "#/components/schemas/Job"}
USER_NAME = {"name": "name", "in": "path", "required": True, "schema": {"type": "string"}}
USER = {"type": "object", "properties": {
    "name": {"type": "string"}, "enabled": {"type": "boolean"},
    "rules": {"type": "string", "description": "the ACL SETUSER rules that rebuild the user "
                                               "(passwords as #<sha256>)"}}}


def _job_action(command: str, key: str, summary: str) -> dict[str, Any]:
    return {"post": {"tags": ["jobs"], "summary": summary, "parameters": [JOB_ID],
                     "responses": {"200": _count(key, command), **_errors(404, 409)}}}


QUEUE_STATS = {
    "type": "object",
    "properties": {
        "name": {"type": "string"}, "len": {"type": "integer"},
        "jobs_in": {"type": "integer", "description": "jobs queued, cumulative"},
        "jobs_out": {"type": "integer", "description": "jobs delivered, cumulative"},
        "blocked": {"type": "integer", "description": "consumers waiting in GETJOB"},
        "pause": {"type": "string", "enum": ["none", "in", "out", "all", "mixed"]},
        "dead_letter_queue": {"type": "boolean"},
        "nodes": {"type": "integer", "description": "(cluster-wide) nodes that have it"},
    },
}
NODE_STATS = {
    "type": "object", "nullable": True,
    "description": "INFO's figures of the node, and its biggest queues, biggest first",
    "properties": {
        **{name: {"type": "integer"} for name in (
            "used_memory", "used_memory_rss", "registered_jobs", "registered_queues",
            "connected_clients", "blocked_clients", "instantaneous_ops_per_sec",
            "uptime_in_seconds")},
        "time_ms": {"type": "integer", "description": "when the node took them, Unix ms "
                    "of its clock (a node takes them at most every 500 ms): the time "
                    "between two samples, for rates"},
        "queues": {"type": "array", "items": QUEUE_STATS},
    },
}
CLUSTER_STATS = {
    "type": "object",
    "properties": {
        "myself": {"type": "string"},
        "time_ms": {"type": "integer", "description": "this node's clock, Unix ms"},
        "reporting": {"type": "array", "items": {"type": "string"},
                      "description": "the IDs of the nodes whose stats are here"},
        "nodes": {"type": "array", "items": {"type": "object", "properties": {
            "id": {"type": "string"}, "address": {"type": "string"},
            "flags": {"type": "array", "items": {"type": "string"}},
            "state": {"type": "string", "enum": ["ok", "fail?", "fail", "handshake"]},
            "link": {"type": "string"}, "stats": NODE_STATS}}},
        "queues": {"type": "array", "items": QUEUE_STATS,
                   "description": "summed over the reporting nodes, biggest first"},
    },
}


def openapi_document(server: Server | None = None) -> dict[str, Any]:
    paths: dict[str, Any] = {
        "/api/v1/queues/{queue}/jobs": {
            "post": {
                "tags": ["jobs"], "summary": "Add a job, or a batch (ADDJOB)",
                "parameters": [QUEUE],
                "requestBody": _body({"oneOf": [
                    {"$ref": "#/components/schemas/NewJob"},
                    {"type": "array", "items": {"$ref": "#/components/schemas/NewJob"},
                     "minItems": 1}]}),
                "responses": {
                    "201": _ok({"type": "object", "properties": {
                        "id": {"type": "string"},
                        "jobs": {"type": "array", "items": {"type": "object"}}}},
                        "added: {id} for one job, {jobs: [{id}...]} for a batch"),
                    "207": _ok({"type": "object"}, "a batch in which some jobs were "
                               "refused: {jobs: [{id} or {error}...]}"),
                    **_errors(409, 413, 503, 507)},
            },
            "get": {
                "tags": ["jobs"],
                "summary": "Take jobs (GETJOB WITHCOUNTERS): a long poll",
                "description": "Waits up to timeout_ms (default 30000; 0: for ever) for "
                               "a job. If the HTTP client goes away the wait ends; jobs "
                               "taken for it are queued again at once.",
                "parameters": [
                    QUEUE,
                    {"name": "count", "in": "query", "schema": {"type": "integer",
                                                                "minimum": 1}},
                    {"name": "timeout_ms", "in": "query", "schema": {"type": "integer",
                                                                     "minimum": 0}},
                    {"name": "nohang", "in": "query", "schema": {"type": "boolean"}}],
                "responses": {"200": _ok({"type": "object", "properties": {
                    "jobs": {"type": "array", "items": JOB_REF}}}), **_errors()},
            },
        },
        "/api/v1/queues": {"get": {
            "tags": ["queues"],
            "summary": "Every queue this node knows: QSTAT, cluster-wide length, policy",
            "responses": {"200": _ok({"type": "object", "properties": {
                "queues": {"type": "array", "items": {"type": "object"}}}}), **_errors()}}},
        "/api/v1/queues/{queue}": {
            "get": {"tags": ["queues"], "summary": "One queue: QSTAT, GLOBALQLEN, QPOLICY",
                    "parameters": [QUEUE],
                    "responses": {"200": _ok({"type": "object"}), **_errors(404)}},
            "put": {"tags": ["queues"], "summary": "Pause or resume a queue (PAUSE), set "
                    "or delete its policy (QPOLICY)", "parameters": [QUEUE],
                    "requestBody": _body({"type": "object", "properties": {
                        "pause": {"type": "string", "enum": ["in", "out", "all", "none"]},
                        "bcast": {"type": "boolean", "default": True},
                        "policy": {"oneOf": [{"$ref": "#/components/schemas/Policy"}],
                                   "nullable": True}},
                        "additionalProperties": False}),
                    "responses": {"200": _ok({"type": "object"}), **_errors(404)}},
        },
        "/api/v1/queues/{queue}/peek": {"get": {
            "tags": ["queues"], "summary": "The next jobs to be delivered (QPEEK)",
            "parameters": [QUEUE, {"name": "count", "in": "query",
                                   "schema": {"type": "integer"}}],
            "responses": {"200": _ok({"type": "object", "properties": {
                "jobs": {"type": "array", "items": JOB_REF}}}), **_errors()}}},
        "/api/v1/queues/{queue}/requeue-dead": {"post": {
            "tags": ["queues"], "summary": "Dead letters back to their queues "
                                           "(DEADLETTER REQUEUE)", "parameters": [QUEUE],
            "requestBody": _body({"type": "object", "properties": {
                "count": {"type": "integer", "minimum": 1}}}, required=False),
            "responses": {"200": _count("requeued", "DEADLETTER REQUEUE"), **_errors()}}},
        "/api/v1/jobs/{id}": {
            "get": {"tags": ["jobs"], "summary": "A job (SHOW)", "parameters": [JOB_ID],
                    "responses": {"200": _ok(JOB_REF), **_errors(404)}},
            "patch": {"tags": ["jobs"], "summary": "Change a job's priority or due time "
                      "(JOBSET)", "parameters": [JOB_ID],
                      "requestBody": _body(_options_schema(JOBSET)),
                      "responses": {"200": _ok({"type": "object"}), **_errors(404, 503)}},
            "delete": {"tags": ["jobs"], "summary": "Delete a job here (DELJOB)",
                       "parameters": [JOB_ID],
                       "responses": {"200": _count("deleted", "DELJOB"), **_errors(404)}},
        },
        "/api/v1/jobs/{id}/ack": _job_action("ACKJOB", "acked", "Acknowledge (ACKJOB)"),
        "/api/v1/jobs/{id}/fastack": _job_action("FASTACK", "deleted", "FASTACK"),
        "/api/v1/jobs/{id}/enqueue": _job_action("ENQUEUE", "queued", "Queue now (ENQUEUE)"),
        "/api/v1/jobs/{id}/dequeue": _job_action("DEQUEUE", "dequeued", "DEQUEUE"),
        "/api/v1/jobs/{id}/working": _job_action("WORKING", "retry_s",
                                                 "Still working on it (WORKING)"),
        "/api/v1/jobs/{id}/nack": {"post": {
            "tags": ["jobs"], "summary": "Put back (NACK), after delay_ms if given",
            "parameters": [JOB_ID],
            "requestBody": _body({"type": "object", "properties": {
                "delay_ms": {"type": "integer", "minimum": 0}},
                "additionalProperties": False}, required=False),
            "responses": {"200": _count("requeued", "NACK"), **_errors()}}},
        "/api/v1/jobs": {"get": {
            "tags": ["jobs"], "summary": "A page of the jobs this node holds (JSCAN ... "
                                         "REPLY ALL)",
            "description": "Pass the returned cursor to get the next page; 0: the scan is "
                           "over. A page may be shorter than count with more to come (a "
                           "queue whose jobs are sparse among this node's).",
            "parameters": [
                {"name": "queue", "in": "query", "schema": {"type": "string"}},
                {"name": "state", "in": "query", "schema": {"type": "array", "items": {
                    "type": "string", "enum": ["wait-repl", "active", "queued", "acked"]}},
                 "style": "form", "explode": True, "description": "any of these states"},
                {"name": "cursor", "in": "query", "schema": {"type": "integer",
                                                             "minimum": 0, "default": 0}},
                {"name": "count", "in": "query", "schema": {
                    "type": "integer", "minimum": 1, "maximum": 1000, "default": 50}}],
            "responses": {"200": _ok({"type": "object", "properties": {
                "cursor": {"type": "integer"},
                "jobs": {"type": "array", "items": JOB_REF}}}), **_errors()}}},
        "/api/v1/cluster": {"get": {
            "tags": ["cluster"], "summary": "This node (INFO) and the nodes it knows",
            "responses": {"200": _ok({"type": "object"}), **_errors()}}},
        "/api/v1/cluster/stats": {"get": {
            "tags": ["cluster"], "summary": "Every node's stats, asked over the bus",
            "description": "Each known node (CLUSTER NODES) with its state (ok, fail? "
                           "(PFAIL), fail, handshake) and its stats, null for a node "
                           "that did not answer within a second (unreachable); the "
                           "queues summed over the nodes that answered (`reporting`). "
                           "A node lists its biggest 2,000 queues (of names up to 1,024 "
                           "bytes). jobs_in and jobs_out "
                           "are cumulative: rates come from two samples.",
            "parameters": [
                {"name": "node_queues", "in": "query",
                 "schema": {"type": "boolean", "default": True},
                 "description": "false: without each node's own list of queues"},
                {"name": "queue", "in": "query", "schema": {"type": "string"},
                 "description": "each node's list of queues has only this one"}],
            "responses": {"200": _ok({"$ref": "#/components/schemas/ClusterStats"}),
                          **_errors()}}},
        "/api/v1/cron": {"get": {
            "tags": ["cluster"], "summary": "Recurring jobs (CRON LIST)",
            "responses": {"200": _ok({"type": "object"}), **_errors()}}},
        "/api/v1/users": {"get": {
            "tags": ["users"], "summary": "Every user and its rules (ACL LIST)",
            "responses": {"200": _ok({"type": "object", "properties": {
                "users": {"type": "array", "items": USER}}}), **_errors(403)}}},
        "/api/v1/users/{name}": {
            "get": {"tags": ["users"], "summary": "A user and its rules",
                    "parameters": [USER_NAME],
                    "responses": {"200": _ok(USER), **_errors(403, 404)}},
            "put": {"tags": ["users"],
                    "summary": "Create or change a user (ACL SETUSER): every rule applies, "
                               "or none (400 naming the bad one)",
                    "parameters": [USER_NAME],
                    "requestBody": _body({"type": "object", "required": ["rules"],
                                          "properties": {"rules": {
                                              "oneOf": [{"type": "string"},
                                                        {"type": "array",
                                                         "items": {"type": "string"}}],
                                              "example": "on >s3cret ~orders:* +@produce "
                                                         "+@consume +@read"}}}),
                    "responses": {"200": _ok(USER), **_errors(403)}},
            "delete": {"tags": ["users"],
                       "summary": "Delete a user (ACL DELUSER): its connections are closed",
                       "parameters": [USER_NAME],
                       "responses": {"200": _count("deleted", "ACL DELUSER"),
                                     **_errors(403, 404)}}},
    }
    return {
        "openapi": "3.0.3",
        "info": {"title": "disq", "version": DISQ_VERSION,
                 "description": "The HTTP API of a disq node: the same commands, replies "
                                "and errors as its RESP port (each route runs its RESP "
                                "command). Authentication: basic auth user:password (the "
                                "node's users, ACL SETUSER), or Bearer <password> for the "
                                "default user (requirepass). A user's permissions apply "
                                "as on RESP: -NOPERM is a 403. Every request: a Host that "
                                "is not the node's is a 421 (http-allowed-hosts), a "
                                "browser's request from another site's page a 403 "
                                "(http-allowed-origins), a body that changes something "
                                "must be application/json (else 415), and arrive within "
                                "http-read-timeout (else 408)."},
        "paths": paths,
        "components": {
            "schemas": {"NewJob": NEW_JOB, "Job": JOB, "Problem": PROBLEM,
                        "ClusterStats": CLUSTER_STATS,
                        "Policy": _options_schema(QPOLICY_SET)},
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"},
                                "basic": {"type": "http", "scheme": "basic"}},
        },
        "security": [{"bearer": []}, {"basic": []}, {}],
    }
