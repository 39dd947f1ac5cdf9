"""What the HTTP API's routes share: the request's JSON and query read and checked
(job options through the options table the RESP parser shares, disq_client/spec.py,
so their kinds and names are ADDJOB's), a job's body and ID, and JSON out."""

from __future__ import annotations

import base64
import binascii
from functools import cache
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

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
    Option,
    wire_seconds,
)

from ...ids import is_valid_job_id
from .auth import command_refusal
from .jsonbody import read_json
from .problems import Problem, bad_request

if TYPE_CHECKING:
    from ...acl import User
    from ...job import Job
    from ..app import Server

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
# What RESP gives in whole seconds (Disque's unit: SHOW's ttl, delay, retry, QSTAT's age
# and idle, QPOLICY GET's): the HTTP API gives every duration in ms, as `<name>_ms`.
SECONDS_FIELDS = {b"ttl": "ttl_ms", b"delay": "delay_ms", b"retry": "retry_ms",
                  b"result-ttl": "result_ttl_ms", b"retain": "retain_ms",
                  b"age": "age_ms", b"idle": "idle_ms"}


@cache
def json_options(spec: CommandOptions) -> dict[str, tuple[Option, bool]]:
    """A command's options by JSON name, and whether the value is in ms where the
    option takes seconds (`Option.seconds`: `retry_ms` for RETRY). A seconds option
    beside an option in ms of that name (ADDJOB's DELAY and DELAY-MS) has no name: the
    one in ms is enough."""
    names: dict[str, tuple[Option, bool]] = {}
    for option in spec.options:
        name = JSON_NAMES.get(option.field, option.field)
        if not option.seconds:
            names[name] = (option, False)
        elif f"{option.field}_ms" not in spec.by_field:
            names[f"{name}_ms"] = (option, True)
    return names


def _unknown(spec: CommandOptions, name: str) -> Problem:
    """A 400 for a field the command has not; one that took seconds names its new form."""
    option = spec.by_field.get(ALIASES.get(name, name))
    if option is not None and option.seconds:
        return bad_request(f"'{name}' (seconds) is gone: give '{name}_ms' (milliseconds)")
    return bad_request(f"unknown field '{name}'")


# -- JSON in ----------------------------------------------------------------------------------
def option_tokens(spec: CommandOptions, data: dict[str, Any], ignore: set[str]) -> list[object]:
    """The option tokens and values of a JSON object (`option_fields`)."""
    return spec.encode(option_fields(spec, data, ignore))


def option_fields(spec: CommandOptions, data: dict[str, Any], ignore: set[str]) -> dict[str, object]:
    """The options of a JSON object by field name, each value's type checked as its
    option's kind wants; an unknown field is a 400."""
    values: dict[str, object] = {}
    options = json_options(spec)
    for name, value in data.items():
        if name in ignore or value is None:
            continue
        known = options.get(name)
        if known is None:
            raise _unknown(spec, name)
        option, in_ms = known
        field = option.field
        if in_ms:  # whole seconds on the wire, rounded up: never early
            if type(value) is not int or value < 0:
                raise bad_request(f"'{name}' must be an integer >= 0 (milliseconds)")
            values[field] = wire_seconds(value)
            continue
        kind = option.kind
        if kind == STR_PAIR:  # ATTR: an object of strings, or a list of [key, value]
            values[field] = _str_pairs(name, value)
            continue
        if option.repeat:  # a list of the values (AFTER's parents)
            if not (type(value) is list and all(type(v) is str for v in value)):
                raise bad_request(f"'{name}' must be a list of strings")
            values[field] = [v.encode() for v in value]
            continue
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
        elif kind == QUEUE_BODY:
            ok = (type(value) is list and len(value) == 2
                  and all(type(v) is str for v in value))
            value = tuple(v.encode() for v in value) if ok else value
        elif kind in (BYTES, CHOICE):
            ok = type(value) is str
        else:
            ok = False
        if not ok:
            raise bad_request(f"'{name}' must be {_KIND_NAMES.get(kind, 'a value')}")
        values[field] = value
    return values


def _str_pairs(name: str, value: object) -> list[tuple[bytes, bytes]]:
    items = (list(value.items()) if type(value) is dict
             else value if type(value) is list else None)
    if items is None or not all(
            type(item) in (list, tuple) and len(item) == 2
            and all(type(v) is str for v in item) for item in items):
        raise bad_request(f"'{name}' must be an object of strings or a list of "
                          "[key, value] strings")
    return [(key.encode(), text.encode()) for key, text in items]


_KIND_NAMES = {FLAG: "true or false", INT: "an integer", MS: "an integer (ms)",
               NUMBER: "a number", INT_PAIR: "a list of two integers",
               QUEUE_BODY: "a list of two strings (a queue and a body)",
               BYTES: "a string", CHOICE: "a string"}


def job_body(data: dict[str, Any]) -> bytes:
    body, encoded = data.get("body"), data.get("body_base64")
    if (body is None) == (encoded is None):
        raise bad_request("a job needs one of 'body' (a string) or 'body_base64'")
    if body is not None:
        if type(body) is not str:
            raise bad_request("'body' must be a string (binary: 'body_base64')")
        return body.encode()
    return base64_field(encoded, "body_base64")


def base64_field(encoded: object, name: str) -> bytes:
    """A JSON field of binary data, base64 in a string."""
    if type(encoded) is not str:
        raise bad_request(f"'{name}' must be a string")
    try:
        return base64.b64decode(encoded, validate=True)
    except (binascii.Error, ValueError):
        raise bad_request(f"'{name}' is not base64") from None


async def json_value(request: web.Request) -> Any:
    return await read_json(request, request.app[SERVER_KEY].config.http_read_timeout)


async def json_object(request: web.Request) -> dict[str, Any]:
    data = await json_value(request)
    if type(data) is not dict:
        raise bad_request("the request body must be a JSON object")
    return data


def query_int(request: web.Request, name: str, default: int, low: int = 0) -> int:
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


def query_bool(request: web.Request, name: str) -> bool:
    return request.query.get(name, "false").lower() in ("1", "true", "yes", "")


def path_job_id(request: web.Request) -> str:
    job_id = unquote(request.match_info["id"])
    if not is_valid_job_id(job_id.encode()):
        raise Problem(400, "Invalid Job ID format.", "BADID")
    return job_id


# -- JSON out ---------------------------------------------------------------------------------
def body_fields(body: bytes | None) -> dict[str, Any]:
    return bytes_fields("body", body)


def bytes_fields(name: str, data: bytes | None) -> dict[str, Any]:
    """Binary data as JSON: {name: text}, or {name: None, name_base64: ...} when it is
    not UTF-8."""
    if data is None:
        return {name: None}
    try:
        return {name: data.decode()}
    except UnicodeDecodeError:
        return {name: None, name + "_base64": base64.b64encode(data).decode()}


def attrs_json(job: Job) -> dict[str, Any]:
    """{"attrs": {key: value}} for a job with attributes (ADDJOB ... ATTR), else {}:
    SHOW's flat list as an object."""
    ext = job.ext
    if ext is None or ext.attrs is None:
        return {}
    return {"attrs": {key.decode(errors="replace"): value.decode(errors="replace")
                      for key, value in ext.attrs}}


def field_json(name: bytes, value: Any) -> tuple[str, Any]:
    """A RESP reply's field as JSON: '-' in its name becomes '_', bytes become text, a
    duration in seconds becomes `<name>_ms` (SECONDS_FIELDS)."""
    in_ms = SECONDS_FIELDS.get(name)
    if in_ms is not None:
        return in_ms, None if value is None else value * 1000
    return name.decode().replace("-", "_"), plain(value)


def plain(value: Any) -> Any:
    if isinstance(value, bytes):
        return value.decode(errors="replace")
    if isinstance(value, list):
        return [plain(v) for v in value]
    return value


# -- running commands -------------------------------------------------------------------------
def need(request: web.Request, command: str) -> None:
    """A route that reads the node without a command (GET /metrics, /cluster/stats):
    403 unless its user may run `command`, as if it did."""
    acl = request.app[SERVER_KEY].acl
    refusal = command_refusal(acl, request.get(USER_KEY, acl.default), command)
    if refusal is not None:
        raise Problem(403, refusal, "NOPERM")


def ok(data: Any, status: int = 200) -> web.Response:
    return web.json_response(data, status=status)
