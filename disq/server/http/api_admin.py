"""The HTTP API's routes on the node itself (/api/v1/cluster, /usage, /users): the
admin service (admin_service.py: HELLO, CLUSTER NODES, INFO, every node's stats, the
users) and the schedule service (cron_service.py: CRON LIST) -> JSON, each operation
gated as its command would be over RESP (calls.py)."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from aiohttp import web

from ...acl import AclError, split_rules
from ...node import now_ms
from ...queue import PAUSE_NAMES
from .calls import attempt, confirmed, run
from .jsonio import SERVER_KEY, json_object, need, ok, query_bool
from .problems import Problem, bad_request
from .routes import Body, Route, answer, count_answer, query_param, ref

if TYPE_CHECKING:
    from ...acl import User
    from ...replication.stats import NodeStats, QueueStats

async def cluster(request: web.Request) -> web.Response:
    """GET /cluster: this node and every node it knows, as HELLO and CLUSTER NODES show."""
    admin = request.app[SERVER_KEY].admin_service
    local_ip = _local_ip(request)
    myself = attempt(request, "hello", None, admin.my_id)
    nodes = attempt(request, "cluster", None, lambda: admin.cluster_nodes(local_ip))
    info = attempt(request, "info", None, lambda: admin.info(None))
    stats = {}
    for line in (info or "").splitlines():
        key, sep, value = line.partition(":")
        if sep and not key.startswith("#"):
            stats[key] = int(value) if value.isdigit() else value
    return ok({"myself": myself, "nodes": _node_lines(nodes or ""), "info": stats})


def _local_ip(request: web.Request) -> str:
    """The address the request came to: this node's, in CLUSTER NODES and HELLO, while
    it does not know its own (as a RESP connection's, connection.py)."""
    transport = request.transport
    local = transport.get_extra_info("sockname") if transport is not None else None
    return local[0] if isinstance(local, tuple) else "127.0.0.1"


def _node_lines(text: str) -> list[dict[str, Any]]:
    """CLUSTER NODES as objects; `state`: fail, fail? (PFAIL), handshake or ok."""
    listed = []
    for line in text.splitlines():
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


MAX_CLIENTS_LISTED = 1000


async def list_clients(request: web.Request) -> web.Response:
    """GET /clients: the RESP connections of this node (CLIENT LIST's), with what each
    took and settled: the consumers, and the jobs in their hands."""
    server = request.app[SERVER_KEY]
    need(request, "client")
    now = time.time()
    clients = []
    for client in list(server.clients.connected.values())[:MAX_CLIENTS_LISTED]:
        clients.append({
            "id": client.id, "addr": client.addr, "name": client.name.decode(errors="replace"),
            "user": client.user.name, "age_ms": int((now - client.ctime) * 1000),
            "idle_ms": int((now - client.last_interaction) * 1000),
            "last_command": client.last_command.decode(errors="replace").lower(),
            "blocked_on": [q.name.decode(errors="replace") for q in client.blocked_queues]
            if client.blocked else [],
            "jobs_taken": client.jobs_taken, "jobs_settled": client.jobs_settled,
            "jobs_in_hand": max(0, client.jobs_taken - client.jobs_settled)})
    return ok({"clients": clients, "complete": len(server.clients.connected)
               <= MAX_CLIENTS_LISTED})


USAGE_FIELDS = ("commands", "jobs_added", "jobs_consumed", "jobs_acked", "bytes_in",
                "bytes_out")


async def usage(request: web.Request) -> web.Response:
    """GET /usage: each user's usage summed over every node that answered (INFO users
    is one node's), and the nodes it sums."""
    server = request.app[SERVER_KEY]
    need(request, "info")
    found = await server.admin_service.node_stats().wait()
    users: dict[str, dict[str, int]] = {}
    for stats in found.values():
        for name, *counts in stats.users:
            summed = users.setdefault(name, dict.fromkeys(USAGE_FIELDS, 0))
            for field, count in zip(USAGE_FIELDS, counts, strict=True):
                summed[field] += count
    return ok({"users": dict(sorted(users.items())), "reporting": sorted(found)})


async def cluster_stats(request: web.Request) -> web.Response:
    """GET /cluster/stats[?node_queues=false][&queue=q]: the stats of every node that
    answered (asked over the bus, replication/stats.py), each known node with its
    flags (CLUSTER NODES; an unreachable node's stats are null), and the queues
    summed over the nodes. `node_queues=false` leaves out each node's own list of
    queues, `queue` keeps only that queue in it (the cluster-wide list is whole)."""
    server = request.app[SERVER_KEY]
    admin = server.admin_service
    need(request, "cluster")
    found = await admin.node_stats().wait()
    local_ip = _local_ip(request)
    nodes = _node_lines(run(request, "cluster", None, lambda: admin.cluster_nodes(local_ip)))
    per_node = query_bool(request, "node_queues") if "node_queues" in request.query else True
    only = request.query.get("queue")
    for entry in nodes:
        stats = found.get(entry["id"])
        queues = None if not per_node or stats is None else (
            stats.queues if only is None else
            [q for q in stats.queues if q.name == only.encode()])
        entry["stats"] = None if stats is None else _stats_json(stats, queues)
    nodes.sort(key=lambda n: ("myself" not in n["flags"], n["address"]))
    return ok({"myself": server.node.id, "time_ms": now_ms(),
                "reporting": sorted(found), "nodes": nodes,
                "queues": _cluster_queues(found)})


# -- users: ACL LIST / SETUSER / DELUSER ------------------------------------------------------
def _user_json(user: User) -> dict[str, Any]:
    """A user as {"name", "enabled", "rules"} (the rules that rebuild it, as ACL LIST
    shows them)."""
    return {"name": user.name, "enabled": user.enabled, "rules": user.rules()}


def _users(request: web.Request) -> list[dict[str, Any]]:
    admin = request.app[SERVER_KEY].admin_service
    return [_user_json(user) for user in run(request, "acl", None, admin.users)]


async def list_users(request: web.Request) -> web.Response:
    """GET /users: every user, with the rules that rebuild it (ACL LIST)."""
    return ok({"users": _users(request)})


async def get_user(request: web.Request) -> web.Response:
    return _user_named(request)


def _user_named(request: web.Request) -> web.Response:
    name = request.match_info["name"]
    for user in _users(request):
        if user["name"] == name:
            return ok(user)
    raise Problem(404, f"no user '{name}'", "NOUSER")


async def put_user(request: web.Request) -> web.Response:
    """PUT /users/{name} {"rules": "on >pw ~q:* +@produce"} (or a list of rules):
    ACL SETUSER, all the rules or none; creates the user if it does not exist."""
    data = await json_object(request)
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
    admin = request.app[SERVER_KEY].admin_service
    held = run(request, "acl", None, lambda: admin.set_user(
        _latin1(request.match_info["name"]), [_latin1(word) for word in words]))
    await confirmed(held)
    return _user_named(request)


def _latin1(text: str) -> str:
    """A name or rule as ACL SETUSER gets it over RESP: bytes read as latin-1 (a
    character outside latin-1 becomes '?')."""
    return text.encode("latin-1", "replace").decode("latin-1")



async def delete_user(request: web.Request) -> web.Response:
    name = request.match_info["name"]
    admin = request.app[SERVER_KEY].admin_service
    deleted, held = run(request, "acl", None, lambda: admin.delete_users([_latin1(name)]))
    await confirmed(held)
    if deleted == 0:
        raise Problem(404, f"no user '{name}'", "NOUSER")
    return ok({"deleted": 1})


USER_NAME_ANSWER = {"200": answer(ref("User"))}

ROUTES: list[Route] = [
    Route("GET", "/api/v1/cluster", cluster, optional=("HELLO", "CLUSTER NODES", "INFO"),
          tag="cluster", summary="This node and the nodes it knows",
          description="`myself` (HELLO), `nodes` (CLUSTER NODES) and `info` (INFO's "
                      "fields): what the user may not run is left null or empty."),
    Route("GET", "/api/v1/clients", list_clients, ("CLIENT LIST",), tag="cluster",
          summary="This node's RESP connections: who consumes what",
          description=f"Up to {MAX_CLIENTS_LISTED} connections (complete: false when there "
                      "are more): address, name (CLIENT SETNAME), user, age and idle time "
                      "in seconds, the queues a blocked GETJOB waits on, the jobs the "
                      "connection took (GETJOB) and settled itself (ACKJOB, FASTACK, NACK), "
                      "and the difference, the jobs in its hands (a job settled by another "
                      "connection stays counted here).",
          responses={"200": answer({"type": "object", "properties": {
              "clients": {"type": "array", "items": {"type": "object"}},
              "complete": {"type": "boolean"}}})}),
    Route("GET", "/api/v1/usage", usage, ("INFO",), tag="cluster",
          summary="Each user's usage, summed over every node",
          description="Commands, jobs added, consumed (GETJOB) and acked, bytes in and out "
                      "(RESP traffic and HTTP bodies) per ACL user, summed over the nodes "
                      "that answered within a second (`reporting`: their IDs). Counters "
                      "since each node started.",
          responses={"200": answer({"type": "object", "properties": {
              "users": {"type": "object", "additionalProperties": {
                  "type": "object", "properties": {
                      field: {"type": "integer"} for field in USAGE_FIELDS}}},
              "reporting": {"type": "array", "items": {"type": "string"}}}})}),
    Route("GET", "/api/v1/cluster/stats", cluster_stats, ("CLUSTER NODES",), tag="cluster",
          summary="Every node's stats, asked over the bus",
          description="Each known node (CLUSTER NODES) with its state (ok, fail? (PFAIL), "
                      "fail, handshake) and its stats, null for a node that did not "
                      "answer within a second (unreachable); the queues summed over the "
                      "nodes that answered (`reporting`). A node lists its biggest 2,000 "
                      "queues (of names up to 1,024 bytes). jobs_in and jobs_out are "
                      "cumulative: rates come from two samples.",
          query=(query_param("node_queues", {"type": "boolean", "default": True},
                             "false: without each node's own list of queues"),
                 query_param("queue", {"type": "string"},
                             "each node's list of queues has only this one")),
          responses={"200": answer(ref("ClusterStats"))}),
    Route("GET", "/api/v1/users", list_users, ("ACL LIST",), tag="users",
          summary="Every user and its rules",
          responses={"200": answer({"type": "object", "properties": {
              "users": {"type": "array", "items": ref("User")}}})}),
    Route("GET", "/api/v1/users/{name}", get_user, ("ACL LIST",), tag="users",
          summary="A user and its rules", responses=USER_NAME_ANSWER, errors=(404,)),
    Route("PUT", "/api/v1/users/{name}", put_user, ("ACL SETUSER",), tag="users",
          summary="Create or change a user: every rule applies, or none (400 naming the "
                  "bad one)",
          body=Body({"type": "object", "required": ["rules"], "properties": {"rules": {
              "oneOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}}],
              "example": "on >s3cret ~orders:* +@produce +@consume +@read"}}}),
          responses=USER_NAME_ANSWER, errors=(503,)),
    Route("DELETE", "/api/v1/users/{name}", delete_user, ("ACL DELUSER",), tag="users",
          summary="Delete a user: its connections are closed",
          responses={"200": count_answer("deleted", "ACL DELUSER")}, errors=(404, 503)),
]
