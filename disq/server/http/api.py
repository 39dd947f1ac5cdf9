"""The HTTP API, /api/v1: each route turns its JSON or query into the arguments of the
RESP command that does the work (through the options table the RESP parser shares,
disq_client/spec.py), runs it through an `Exchange` (bridge.py) and shapes the reply
as JSON. So ADDJOB over HTTP is `AddJob.parse`, `Node.add_job`, the same errors.
The document of every route is openapi.py."""

from __future__ import annotations

import asyncio
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
    QPOLICY_SET,
    CommandOptions,
)

from ...acl import AclError, split_rules
from ...errors import DisqError
from ...ids import is_valid_job_id
from ...node import now_ms
from ...queue import PAUSE_NAMES
from ..service import JobService, job_fields
from .auth import command_refusal
from .bridge import CommandError, Exchange
from .jsonbody import read_json
from .problems import Problem, bad_request

if TYPE_CHECKING:
    from ...acl import User
    from ...replication.stats import NodeStats, QueueStats
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
MAX_QUEUES_LISTED = 1000
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


# -- queues -----------------------------------------------------------------------------------
async def list_queues(request: web.Request) -> web.Response:
    """GET /queues: every queue this node knows (up to MAX_QUEUES_LISTED), with its
    QSTAT, its length in the whole cluster and its policy."""
    exchange = _exchange(request)
    try:
        names: list[bytes] = []
        cursor = b"0"
        while True:
            cursor, page = await exchange.call("QSCAN", cursor, "COUNT", 1000)
            names.extend(page)
            if cursor == b"0" or len(names) >= MAX_QUEUES_LISTED:
                break
        names = sorted(set(names))[:MAX_QUEUES_LISTED]
        queues = await asyncio.gather(*(_queue_info(request, name) for name in names))
    finally:
        exchange.finish()
    return _ok({"queues": [q for q in queues if q is not None]})


async def _queue_info(request: web.Request, name: bytes) -> dict[str, Any] | None:
    exchange = _exchange(request)
    try:
        stat, total, policy = await exchange.call_many([
            ("QSTAT", name), ("GLOBALQLEN", name), ("QPOLICY", name, "GET")])
    finally:
        exchange.finish()
    if isinstance(stat, CommandError) or stat is None:
        return None
    info = _pairs(stat)
    info["length_cluster"] = total if isinstance(total, int) else None
    info["policy"] = None if policy is None or isinstance(policy, CommandError) else (
        _pairs(policy))
    return info


async def get_queue(request: web.Request) -> web.Response:
    info = await _queue_info(request, request.match_info["queue"].encode())
    if info is None:
        raise Problem(404, "The queue does not exist on this node", "NOQUEUE")
    return _ok(info)


async def update_queue(request: web.Request) -> web.Response:
    """PUT /queues/{queue}: {"pause": "in"|"out"|"all"|"none", "bcast": bool,
    "policy": {...} or null (QPOLICY DEL)}."""
    queue = request.match_info["queue"]
    data = await _json_object(request)
    unknown = set(data) - {"pause", "bcast", "policy"}
    if unknown:
        raise bad_request(f"unknown field '{sorted(unknown)[0]}'")
    commands: list[tuple[object, ...]] = []
    if "pause" in data:
        pause = data["pause"]
        if pause not in ("in", "out", "all", "none"):
            raise bad_request("'pause' must be one of in, out, all, none")
        bcast = data.get("bcast", True)
        if type(bcast) is not bool:
            raise bad_request("'bcast' must be true or false")
        commands.append(("PAUSE", queue, pause, *(("bcast",) if bcast else ())))
    if "policy" in data:
        policy = data["policy"]
        if policy is None:
            commands.append(("QPOLICY", queue, "DEL"))
        elif type(policy) is dict and policy:
            commands.append(("QPOLICY", queue, "SET", *_options(QPOLICY_SET, policy, set())))
        else:
            raise bad_request("'policy' must be an object of policy fields, or null")
    if not commands:
        raise bad_request("nothing to change: give 'pause' and/or 'policy'")
    exchange = _exchange(request)
    try:
        for reply in await exchange.call_many(commands):
            if isinstance(reply, CommandError):
                raise Problem.from_resp(reply.code, reply.message)
    finally:
        exchange.finish()
    return await get_queue(request)


async def peek_queue(request: web.Request) -> web.Response:
    count = _query_int(request, "count", 10, -(2**31))
    reply = await _run(request, "QPEEK", request.match_info["queue"], count)
    return _ok({"jobs": [_job_entry(entry) for entry in reply]})


async def requeue_dead(request: web.Request) -> web.Response:
    """POST /queues/{queue}/requeue-dead {"count": n}: DEADLETTER REQUEUE."""
    data = await _json_object(request)
    count = data.get("count")
    if count is not None and (type(count) is not int or count < 1):
        raise bad_request("'count' must be an integer > 0")
    args = ("COUNT", count) if count else ()
    return _ok({"requeued": await _run(request, "DEADLETTER", "REQUEUE",
                                       request.match_info["queue"], *args)})


# -- the cluster ------------------------------------------------------------------------------
async def cluster(request: web.Request) -> web.Response:
    """GET /cluster: this node and every node it knows, as HELLO and CLUSTER NODES show."""
    exchange = _exchange(request)
    try:
        hello, nodes, info = await exchange.call_many([
            ("HELLO",), ("CLUSTER", "NODES"), ("INFO",)])
    finally:
        exchange.finish()
    listed = _node_lines(nodes)
    stats = {}
    for line in (info.decode().splitlines() if isinstance(info, bytes) else []):
        key, sep, value = line.partition(":")
        if sep and not key.startswith("#"):
            stats[key] = int(value) if value.isdigit() else value
    return _ok({"myself": hello[1].decode() if isinstance(hello, list) else None,
                "nodes": listed, "info": stats})


def _node_lines(text: Any) -> list[dict[str, Any]]:
    """CLUSTER NODES as objects; `state`: fail, fail? (PFAIL), handshake or ok."""
    listed = []
    for line in (text.decode().splitlines() if isinstance(text, bytes) else []):
        words = line.split()
        if len(words) < 6:
            continue
        flags = words[2].split(",")
        state = next((f for f in ("fail", "fail?", "handshake") if f in flags), "ok")
        listed.append({"id": words[0], "address": words[1], "flags": flags, "state": state,
                       "link": words[5]})
    return listed


_PAUSE_TEXT = {flags: name.decode() for flags, name in PAUSE_NAMES.items()}


def _queue_json(queue: QueueStats) -> dict[str, Any]:
    return {"name": queue.name.decode(errors="replace"), "len": queue.length,
            "jobs_in": queue.jobs_in, "jobs_out": queue.jobs_out, "blocked": queue.blocked,
            "pause": _PAUSE_TEXT[queue.pause], "dead_letter_queue": queue.dead_letters}


def _stats_json(stats: NodeStats, queues: list[QueueStats] | None) -> dict[str, Any]:
    shown: dict[str, Any] = {
        "used_memory": stats.used_memory, "used_memory_rss": stats.rss,
        "registered_jobs": stats.jobs, "registered_queues": stats.queue_count,
        "connected_clients": stats.clients, "blocked_clients": stats.blocked_clients,
        "instantaneous_ops_per_sec": stats.ops_per_sec,
        "uptime_in_seconds": stats.uptime, "time_ms": stats.time}
    if queues is not None:
        shown["queues"] = [_queue_json(q) for q in queues]
    return shown


MIXED = -1  # the nodes do not agree on a queue's pause state


def _cluster_queues(found: dict[str, NodeStats]) -> list[dict[str, Any]]:
    """The queues of every node that answered, summed: length, jobs in and out,
    blocked consumers; `pause` is the nodes' state if they agree, else "mixed"."""
    merged: dict[bytes, list[Any]] = {}
    for stats in found.values():
        for q in stats.queues:
            entry = merged.get(q.name)
            if entry is None:
                merged[q.name] = [q.length, q.jobs_in, q.jobs_out, q.blocked, q.pause,
                                  q.dead_letters, 1]
                continue
            entry[0] += q.length
            entry[1] += q.jobs_in
            entry[2] += q.jobs_out
            entry[3] += q.blocked
            if entry[4] != q.pause:
                entry[4] = MIXED
            entry[5] = entry[5] or q.dead_letters
            entry[6] += 1
    ordered = sorted(merged.items(), key=lambda item: (-item[1][0], item[0]))
    return [{"name": name.decode(errors="replace"), "len": length, "jobs_in": jobs_in,
             "jobs_out": jobs_out, "blocked": blocked,
             "pause": "mixed" if pause == MIXED else _PAUSE_TEXT[pause],
             "dead_letter_queue": dead, "nodes": nodes}
            for name, (length, jobs_in, jobs_out, blocked, pause, dead, nodes) in ordered]


async def cluster_stats(request: web.Request) -> web.Response:
    """GET /cluster/stats[?node_queues=false][&queue=q]: the stats of every node that
    answered (asked over the bus, replication/stats.py), each known node with its
    flags (CLUSTER NODES; an unreachable node's stats are null), and the queues
    summed over the nodes. `node_queues=false` leaves out each node's own list of
    queues, `queue` keeps only that queue in it (the cluster-wide list is whole)."""
    server = request.app[SERVER_KEY]
    need(request, "cluster")
    replication = server.replication
    if replication is None:  # (no cluster layer)
        found = {server.node.id: server.stats.node_stats()}
    else:
        done: asyncio.Future[dict[str, NodeStats]] = asyncio.get_running_loop().create_future()

        def answer(result: dict[str, NodeStats]) -> None:
            if not done.done():  # (not if this request's client left)
                done.set_result(result)

        replication.stats.gather(answer)
        found = await done
    nodes = _node_lines(await _run(request, "CLUSTER", "NODES"))
    per_node = _query_bool(request, "node_queues") if "node_queues" in request.query else True
    only = request.query.get("queue")
    for entry in nodes:
        stats = found.get(entry["id"])
        queues = None if not per_node or stats is None else (
            stats.queues if only is None else
            [q for q in stats.queues if q.name == only.encode()])
        entry["stats"] = None if stats is None else _stats_json(stats, queues)
    nodes.sort(key=lambda n: ("myself" not in n["flags"], n["address"]))
    return _ok({"myself": server.node.id, "time_ms": now_ms(),
                "reporting": sorted(found), "nodes": nodes,
                "queues": _cluster_queues(found)})


async def cron_list(request: web.Request) -> web.Response:
    return _ok({"schedules": [_pairs(entry) for entry in await _run(request, "CRON", "LIST")]})


async def bad_job_id(request: web.Request) -> web.Response:
    """/api/v1/jobs/<anything that is not a job ID>[/...]: Disque's -BADID."""
    raise Problem(400, "Invalid Job ID format.", "BADID")


# -- users: ACL LIST / SETUSER / DELUSER ------------------------------------------------------
def _user_json(line: bytes) -> dict[str, Any]:
    """An ACL LIST line (`user <name> <rules>`) as {"name", "enabled", "rules"}."""
    _, name, rules = line.decode("latin-1").split(" ", 2)
    return {"name": name, "enabled": rules.split(" ", 1)[0] == "on", "rules": rules}


async def _users(request: web.Request) -> list[dict[str, Any]]:
    return [_user_json(line) for line in await _run(request, "ACL", "LIST")]


async def list_users(request: web.Request) -> web.Response:
    """GET /users: every user, with the rules that rebuild it (ACL LIST)."""
    return _ok({"users": await _users(request)})


async def get_user(request: web.Request) -> web.Response:
    name = request.match_info["name"]
    for user in await _users(request):
        if user["name"] == name:
            return _ok(user)
    raise Problem(404, f"no user '{name}'", "NOUSER")


async def put_user(request: web.Request) -> web.Response:
    """PUT /users/{name} {"rules": "on >pw ~q:* +@produce"} (or a list of rules):
    ACL SETUSER, all the rules or none; creates the user if it does not exist."""
    data = await _json_object(request)
    rules = data.get("rules")
    if set(data) - {"rules"}:
        raise bad_request(f"unknown field '{sorted(set(data) - {'rules'})[0]}'")
    if type(rules) is str:
        try:
            words = split_rules(rules)
        except AclError as exc:
            raise bad_request(f"'rules': {exc}") from None
    elif type(rules) is list and all(type(rule) is str for rule in rules):
        words = rules
    else:
        raise bad_request("'rules' must be a string of ACL SETUSER rules, or a list of them")
    await _run(request, "ACL", "SETUSER", request.match_info["name"].encode("latin-1",
                                                                            "replace"),
               *[word.encode("latin-1", "replace") for word in words])
    return await get_user(request)


async def delete_user(request: web.Request) -> web.Response:
    name = request.match_info["name"]
    if await _run(request, "ACL", "DELUSER", name.encode("latin-1", "replace")) == 0:
        raise Problem(404, f"no user '{request.match_info['name']}'", "NOUSER")
    return _ok({"deleted": 1})


def add_routes(app: web.Application) -> None:
    r = app.router
    r.add_post("/api/v1/queues/{queue}/jobs", add_jobs)
    r.add_get("/api/v1/queues/{queue}/jobs", get_jobs)
    r.add_get("/api/v1/queues", list_queues)
    r.add_get("/api/v1/queues/{queue}", get_queue)
    r.add_put("/api/v1/queues/{queue}", update_queue)
    r.add_get("/api/v1/queues/{queue}/peek", peek_queue)
    r.add_post("/api/v1/queues/{queue}/requeue-dead", requeue_dead)
    job = f"/api/v1/jobs/{{id:{JOB_ID_PATTERN}}}"  # an ID may hold '/' (base64)
    r.add_get(job, show_job)
    r.add_patch(job, set_job)
    r.add_delete(job, delete_job)
    r.add_post(job + "/ack", _job_action("ackjob"))
    r.add_post(job + "/fastack", _job_action("fastack"))
    r.add_post(job + "/enqueue", _job_action("enqueue"))
    r.add_post(job + "/dequeue", _job_action("dequeue"))
    r.add_post(job + "/working", _job_action("working"))
    r.add_post(job + "/nack", nack_job)
    r.add_route("*", "/api/v1/jobs/{rest:.*}", bad_job_id)
    r.add_get("/api/v1/jobs", list_jobs)
    r.add_get("/api/v1/cluster", cluster)
    r.add_get("/api/v1/cluster/stats", cluster_stats)
    r.add_get("/api/v1/cron", cron_list)
    r.add_get("/api/v1/users", list_users)
    r.add_get("/api/v1/users/{name}", get_user)
    r.add_put("/api/v1/users/{name}", put_user)
    r.add_delete("/api/v1/users/{name}", delete_user)
