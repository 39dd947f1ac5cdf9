"""The OpenAPI 3 document of the HTTP API (/openapi.json, shown at /docs), made from the
routes' declarations (routes.py) and the declarations of the commands they run
(table.py's `@command`): an operation's summary, description and ACL categories come
from its commands, so do the schemas of a body made of a command's options (the options
table the RESP parser uses, disq_client/spec.py). A route declares what no command does:
the JSON it answers, its query parameters, its other bodies."""

from __future__ import annotations

import re
from typing import Any

from aiohttp import web
from disq_client.spec import (
    BYTES,
    CHOICE,
    FLAG,
    INT,
    INT_PAIR,
    MS,
    NUMBER,
    QUEUE_BODY,
    STR_PAIR,
    CommandOptions,
)

from ...config import DISQ_VERSION
from ..commands import load_commands
from ..table import CommandSpec
from .jsonio import DEFAULT_ADD_TIMEOUT_MS, json_options
from .routes import Route


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
    if kind == QUEUE_BODY:
        return {"type": "array", "items": {"type": "string"}, "minItems": 2, "maxItems": 2,
                "description": doc + " (a queue name, then a job body)"}
    if kind == STR_PAIR:
        return {"oneOf": [
            {"type": "object", "additionalProperties": {"type": "string", "maxLength": high}},
            {"type": "array", "items": {"type": "array", "items": {"type": "string"},
                                        "minItems": 2, "maxItems": 2}}],
            "description": doc + " (keys and values: an object, or a list of [key, value])"}
    if kind in (BYTES, CHOICE):
        return {"type": "string", "description": doc}
    return {"description": doc}


def _options_schema(spec: CommandOptions, extra: dict[str, Any] | None = None,
                    closed: bool = True) -> dict[str, Any]:
    properties: dict[str, Any] = dict(extra or {})
    for name, (option, in_ms) in json_options(spec).items():
        doc = f"{spec.name} {option.token}" + (" (a disq extension)" if option.extension
                                               else "")
        if option.doc:
            doc += f": {option.doc}"
        if option.error:
            doc += f"; else: {option.error}"
        if in_ms:  # the option takes seconds; the HTTP API, as every duration, ms
            properties[name] = {
                "type": "integer", "minimum": 0,
                "description": f"{doc}. Given here in milliseconds, rounded up to whole "
                               "seconds (the option's unit)"}
            continue
        value = _option_schema(option.kind, option.low, option.high, doc)
        if option.repeat and option.kind != STR_PAIR:  # given again for each value: a list
            value = {"type": "array", "items": value, "description": doc}
        properties[name] = value
    schema: dict[str, Any] = {"type": "object", "properties": properties}
    if closed:
        schema["additionalProperties"] = False
    return schema


def _new_job(addjob: CommandOptions) -> dict[str, Any]:
    return _options_schema(addjob, {
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


USER = {"type": "object", "properties": {
    "name": {"type": "string"}, "enabled": {"type": "boolean"},
    "rules": {"type": "string", "description": "the ACL SETUSER rules that rebuild the user "
                                               "(passwords as #<sha256>)"}}}


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


# The path parameters' descriptions, by name
PATH_PARAMETERS = {
    "queue": "a queue's name",
    "id": "a job ID (D-...), as it is or with '/' and '+' percent-encoded",
    "name": "a user's name",
    "bid": "a batch's ID (percent-encoded: '/' as %2F)",
}
INFO = ("The HTTP API of a disq node: the same commands, replies and errors as its RESP "
        "port. Each operation runs the commands `x-disq-commands` names, as a RESP "
        "client's request would be run (their ACL categories: `x-disq-acl`). "
        "Authentication: basic auth user:password (the node's users, ACL SETUSER), or "
        "Bearer <password> for the default user (requirepass). A user's permissions apply "
        "as on RESP: -NOPERM is a 403. Every request: a Host that is not the node's is a "
        "421 (http-allowed-hosts), a browser's request from another site's page a 403 "
        "(http-allowed-origins), a body that changes something must be application/json "
        "(else 415), and arrive within http-read-timeout (else 408).")


def openapi_document(routes: list[Route]) -> dict[str, Any]:
    declared = _declared()
    paths: dict[str, dict[str, Any]] = {}
    for route in routes:
        if route.documented:
            path = _template(route.path)
            paths.setdefault(path, {})[route.method.lower()] = _operation(
                route, path, declared)
    return {
        "openapi": "3.0.3",
        "info": {"title": "disq", "version": DISQ_VERSION, "description": INFO},
        "paths": paths,
        "components": {
            "schemas": {"NewJob": _new_job(_options_of("ADDJOB", declared)), "Job": JOB,
                        "Problem": PROBLEM, "ClusterStats": CLUSTER_STATS, "User": USER,
                        "Policy": _options_schema(_options_of("QPOLICY SET", declared))},
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"},
                                "basic": {"type": "http", "scheme": "basic"}},
        },
        "security": [{"bearer": []}, {"basic": []}, {}],
    }


def _declared() -> dict[str, CommandSpec]:
    """Every command by its own name, which rename-command leaves it."""
    return {spec.name: spec for spec in load_commands().values()}


def command_of(name: str) -> str:
    """The command a route names, without its subcommand: "ACL SETUSER" -> "acl"."""
    return name.split()[0].lower()


def _template(path: str) -> str:
    """The route's path as OpenAPI writes it: /api/v1/jobs/{id:<pattern>} -> {id}."""
    return web.DynamicResource(path).canonical if "{" in path else path


def _operation(route: Route, path: str, declared: dict[str, CommandSpec]
               ) -> dict[str, Any]:
    names = route.commands + route.optional
    specs = {name: declared.get(command_of(name)) for name in names}
    first = specs[names[0]] if names else None
    summary = route.summary or (first.summary if first is not None else "")
    operation: dict[str, Any] = {
        "tags": [route.tag],
        "summary": f"{summary.rstrip('.')} ({', '.join(names)})",
        "description": _description(route, specs),
        "x-disq-commands": list(names),
        "x-disq-acl": {name: list(spec.categories) for name, spec in specs.items()
                       if spec is not None},
    }
    parameters = [_path_parameter(name) for name in re.findall(r"\{(\w+)\}", path)]
    parameters += route.query
    if parameters:
        operation["parameters"] = parameters
    if route.body is not None:
        body = route.body
        schema = body.schema if body.schema is not None else _options_schema(
            _options_of(route.commands[0], declared), body.fields, body.closed)
        operation["requestBody"] = {"required": body.required,
                                    "content": {"application/json": {"schema": schema}}}
    operation["responses"] = {**route.responses, **_errors(route, path, specs)}
    return operation


def _description(route: Route, specs: dict[str, CommandSpec | None]) -> str:
    """The route's own words, then each command it runs: its syntax, its summary and
    its ACL categories (a command's once, however many of its subcommands it runs)."""
    lines = [route.description, ""] if route.description else []
    lines.append("Commands:")
    described: set[str] = set()
    for name, spec in specs.items():
        if spec is None:
            lines.append(f"- {name}: disabled on this node (rename-command)")
            continue
        line = f"- `{_syntax(spec, name)}`"
        if spec.name not in described:
            described.add(spec.name)
            categories = ", ".join(f"@{category}" for category in spec.categories)
            extension = " (a disq extension)" if spec.extension else ""
            line += f"{extension}: {spec.summary} ACL categories: {categories}."
        lines.append(line)
    if route.optional:
        lines += ["", f"What the user may not run of {', '.join(route.optional)} is left "
                      "out of the answer."]
    return "\n".join(lines)


def _syntax(spec: CommandSpec, name: str) -> str:
    """The form of the command's syntax that `name`'s subcommand takes, if it has one."""
    words = name.split()
    if len(words) == 1:
        return spec.syntax
    command = spec.name.upper()
    for form in spec.syntax.split(" | "):
        if words[1] in form.split():
            return form if form.startswith(command) else f"{command} {form}"
    return spec.syntax


def _options_of(name: str, declared: dict[str, CommandSpec]) -> CommandOptions:
    """The options table `name` declares ("QPOLICY SET": QPOLICY's table of that name)."""
    tables = declared[command_of(name)].options
    return next((table for table in tables if table.name == name.upper()), tables[0])


def _path_parameter(name: str) -> dict[str, Any]:
    return {"name": name, "in": "path", "required": True, "schema": {"type": "string"},
            "description": PATH_PARAMETERS.get(name, "")}


def _errors(route: Route, path: str, specs: dict[str, CommandSpec | None]
            ) -> dict[str, Any]:
    """400 and 401 for every route, 403 where a refused command refuses the request,
    and the statuses the route declares."""
    errors = {status: "see `code` and `detail`" for status in (400, 401, *route.errors)}
    if route.commands:
        refused = ", ".join(route.commands)
        names_queue = "{queue}" in path and any(
            spec is not None and spec.queues is not None
            for name, spec in specs.items() if name in route.commands)
        errors[403] = (f"NOPERM: the user may not run {refused}"
                       + (" on this queue" if names_queue else ""))
    problem = {"$ref": "#/components/schemas/Problem"}
    return {str(status): {"description": description,
                          "content": {"application/problem+json": {"schema": problem}}}
            for status, description in sorted(errors.items())}
