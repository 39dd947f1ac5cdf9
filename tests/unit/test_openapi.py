"""The OpenAPI document is made from the routes' declarations (http/routes.py) and the
commands' (table.py): every route the HTTP port registers under /api/v1 is declared and
documented with the commands it runs, each of them a command of the table, its ACL
categories and summary as the command declares them; the document is valid OpenAPI."""

from __future__ import annotations

from typing import Any

import pytest
from aiohttp import web
from openapi_spec_validator import validate

from disq.config import Config
from disq.server.app import Server
from disq.server.commands import load_commands
from disq.server.http.app import API_ROUTES, make_app
from disq.server.http.openapi import command_of, openapi_document
from disq.server.http.problems import Problem

METHODS = ("get", "put", "post", "delete", "patch")


@pytest.fixture(scope="module")
def document() -> dict[str, Any]:
    return openapi_document(API_ROUTES)


def _registered() -> set[tuple[str, str]]:
    """(method, path) of every route the node's HTTP port has under /api/v1 (a GET's
    HEAD aside), as make_app registers them: paths as OpenAPI writes them."""
    app: web.Application = make_app(Server(Config()))
    return {(route.method, route.resource.canonical) for route in app.router.routes()
            if route.resource is not None and route.method != "HEAD"
            and route.resource.canonical.startswith("/api/v1")}


def _declared(documented: bool) -> set[tuple[str, str]]:
    return {(route.method, _template(route.path)) for route in API_ROUTES
            if route.documented == documented}


def _template(path: str) -> str:
    return web.DynamicResource(path).canonical if "{" in path else path


def test_every_registered_route_is_declared_and_documented(
        document: dict[str, Any]) -> None:
    registered = _registered()
    undeclared = registered - _declared(True) - _declared(False)
    assert not undeclared, ("routes registered without a declaration (routes.Route): "
                            f"{sorted(undeclared)}")
    assert _declared(True) | _declared(False) == registered  # declared, so registered
    assert _declared(False) == {("*", "/api/v1/jobs/{rest}")}  # only the -BADID answer
    documented = {(method.upper(), path) for path, operations in document["paths"].items()
                  for method in operations if method in METHODS}
    assert documented == _declared(True)


def test_every_operation_names_its_commands_from_the_table(document: dict[str, Any]) -> None:
    commands = load_commands()
    for path, operations in document["paths"].items():
        for method, operation in operations.items():
            names = operation["x-disq-commands"]
            assert names, (method, path)
            for name in names:
                spec = commands.get(command_of(name).encode())
                assert spec is not None, f"{method} {path}: {name} is no command"
                assert operation["x-disq-acl"][name] == list(spec.categories)
                assert name in operation["summary"]
            first = commands[command_of(names[0]).encode()]
            assert first.summary in operation["description"], (method, path)
            assert all(f"@{category}" in operation["description"]
                       for category in first.categories)


def test_a_refusal_is_documented_where_a_command_refuses_the_request(
        document: dict[str, Any]) -> None:
    """403 where the route runs a command whose refusal is the answer; not where a
    refusal only leaves part of the answer out (GET /cluster, GET /queues/{queue})."""
    declared = {(route.method.lower(), _template(route.path)): route for route in API_ROUTES}
    for path, operations in document["paths"].items():
        for method, operation in operations.items():
            route = declared[method, path]
            assert ("403" in operation["responses"]) == bool(route.commands), (method, path)
    assert "403" not in document["paths"]["/api/v1/cluster"]["get"]["responses"]
    assert "403" in document["paths"]["/api/v1/users"]["get"]["responses"]


def test_bodies_of_options_come_from_the_commands_declarations(
        document: dict[str, Any]) -> None:
    paths = document["paths"]

    def body(path: str, method: str) -> dict[str, Any]:
        schema: dict[str, Any] = (
            paths[path][method]["requestBody"]["content"]["application/json"]["schema"])
        return schema

    jobset = body("/api/v1/jobs/{id}", "patch")
    assert set(jobset["properties"]) == {"priority", "at", "delay_ms"}
    assert jobset["additionalProperties"] is False
    assert set(body("/api/v1/jobs/{id}/nack", "post")["properties"]) == {"delay_ms", "error"}
    assert set(body("/api/v1/jobs/{id}/working", "post")["properties"]) == {"progress", "data"}
    # the route ignores other fields: the document does not refuse them
    requeue = body("/api/v1/queues/{queue}/requeue-dead", "post")
    assert set(requeue["properties"]) == {"count"} and "additionalProperties" not in requeue
    schemas = document["components"]["schemas"]
    new_job = schemas["NewJob"]["properties"]
    assert {"max_deliveries", "priority", "replicate", "async", "body", "timeout_ms",
            "delay_ms", "retry_ms", "ttl_ms"} <= set(new_job)
    assert not {"delay", "retry", "ttl"} & set(new_job)  # every duration in ms
    assert new_job["retry_ms"]["type"] == "integer" and new_job["retry_ms"]["minimum"] == 0
    assert "rounded up to whole seconds" in new_job["retry_ms"]["description"]
    assert {"max_deliveries", "deadletter", "backoff", "rate", "result_ttl_ms",
            "concurrency", "retry_ms", "ttl_ms", "replicate", "maxlen", "group_concurrency",
            "group_rate", "retain_ms", "retain_bytes"} == set(
        schemas["Policy"]["properties"])


def test_path_parameters_come_from_the_route_path(document: dict[str, Any]) -> None:
    operation = document["paths"]["/api/v1/jobs/{id}/ack"]["post"]
    assert [p["name"] for p in operation["parameters"] if p["in"] == "path"] == ["id"]
    peek = document["paths"]["/api/v1/queues/{queue}/peek"]["get"]
    assert [p["name"] for p in peek["parameters"]] == ["queue", "count"]
    assert "parameters" not in document["paths"]["/api/v1/cron"]["get"]


def test_a_subcommand_is_described_by_its_own_form(document: dict[str, Any]) -> None:
    put_user = document["paths"]["/api/v1/users/{name}"]["put"]["description"]
    assert "`ACL SETUSER name rule...`" in put_user and "DELUSER" not in put_user
    assert "`CLUSTER NODES`" in document["paths"]["/api/v1/cluster/stats"]["get"][
        "description"]
    assert "`QPOLICY queue DEL`" in document["paths"]["/api/v1/queues/{queue}"]["put"][
        "description"]


def test_the_document_is_valid_openapi(document: dict[str, Any]) -> None:
    validate(document)


def test_the_batch_routes_take_batch_new_s_options_and_name_their_errors(
        document: dict[str, Any]) -> None:
    paths = document["paths"]
    new = paths["/api/v1/batches"]["post"]
    body = new["requestBody"]["content"]["application/json"]["schema"]
    assert set(body["properties"]) == {"id", "ondone", "onsuccess", "ttl_ms"}
    assert body["properties"]["ondone"]["minItems"] == 2 and body["additionalProperties"] is False
    assert "`BATCH NEW bid [ONDONE queue body] [ONSUCCESS queue body] [TTL s]`" in new[
        "description"]
    listed = paths["/api/v1/batches"]["get"]
    assert "`BATCH LIST [STATE open|closed|done]`" in listed["description"]
    assert [p["name"] for p in listed["parameters"]] == ["state"]
    close = paths["/api/v1/batches/{bid}/close"]["post"]
    assert {"404", "409", "503"} <= set(close["responses"])
    assert [p["name"] for p in close["parameters"]] == ["bid"]
    assert "404" in paths["/api/v1/batches/{bid}"]["get"]["responses"]


@pytest.mark.parametrize(("code", "status"), [
    ("NOBATCH", 404), ("BATCHCLOSED", 409), ("BATCHEXISTS", 409), ("NOMAJORITY", 503),
    ("BATCHFULL", 507)])
def test_batch_errors_have_their_http_statuses(code: str, status: int) -> None:
    assert Problem.from_resp(code, "why").status == status
