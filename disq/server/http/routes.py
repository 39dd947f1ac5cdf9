"""What an HTTP route declares: its method, its path, what answers it, and the commands
it runs, whose declarations (table.py's `@command`) give its document (openapi.py): its
summary and description, its ACL categories, the 403 a refusal gets, the schema of a
body made of a command's options. The route adds what no command declares: the JSON
it answers, its query parameters, a body that is not its command's options, and a
summary where the command's does not say what the route does."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class Body:
    """A route's JSON body: `schema` as written, or (None) the options its first
    command declares by their JSON names, `fields` beside them; `closed`: a field
    that is none of them is refused (400); `required`: the body may not be left out."""

    __slots__ = ("schema", "fields", "closed", "required")

    def __init__(self, schema: dict[str, Any] | None = None, *,
                 fields: dict[str, Any] | None = None, closed: bool = True,
                 required: bool = True) -> None:
        self.schema = schema
        self.fields = fields or {}
        self.closed = closed
        self.required = required


class Route:
    """One route of the API. `commands`: what it runs, each as a RESP client's request
    would be run (the user's permissions and queues), a refusal answered 403; a command
    with a subcommand is named with it ("ACL SETUSER"). `optional`: what it runs only
    if the user may, a refusal leaving that part of the answer out. `documented`: False
    for a route that only answers an error (a malformed job ID)."""

    __slots__ = ("method", "path", "handler", "commands", "optional", "tag", "summary",
                 "description", "query", "body", "responses", "errors", "documented")

    def __init__(self, method: str, path: str, handler: Handler,
                 commands: tuple[str, ...] = (), *, optional: tuple[str, ...] = (),
                 tag: str = "", summary: str = "", description: str = "",
                 query: tuple[dict[str, Any], ...] = (), body: Body | None = None,
                 responses: dict[str, Any] | None = None, errors: tuple[int, ...] = (),
                 documented: bool = True) -> None:
        self.method = method
        self.path = path
        self.handler = handler
        self.commands = commands
        self.optional = optional
        self.tag = tag
        self.summary = summary
        self.description = description
        self.query = query
        self.body = body
        self.responses = responses or {"200": answer({"type": "object"})}
        self.errors = errors  # its error statuses besides 400, 401 and 403
        self.documented = documented


def add_routes(app: web.Application, routes: list[Route]) -> None:
    """A GET answers HEAD too, as aiohttp's `add_get` makes it."""
    for route in routes:
        if route.method == "GET":
            app.router.add_get(route.path, route.handler)
        else:
            app.router.add_route(route.method, route.path, route.handler)


# -- what routes declare of their answers ------------------------------------------------------
def ref(name: str) -> dict[str, Any]:
    """A schema of the document's components (openapi.py)."""
    return {"$ref": f"#/components/schemas/{name}"}


def answer(schema: dict[str, Any], description: str = "OK") -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def count_answer(key: str, command: str) -> dict[str, Any]:
    """{key: n}: a command's integer reply."""
    return answer({"type": "object", "properties": {key: {"type": "integer"}}},
                  f"{command}'s answer")


def query_param(name: str, schema: dict[str, Any], description: str = "") -> dict[str, Any]:
    parameter: dict[str, Any] = {"name": name, "in": "query", "schema": schema}
    if description:
        parameter["description"] = description
    return parameter


JOBS_ANSWER = answer({"type": "object", "properties": {"jobs": {"type": "array",
                                                             "items": ref("Job")}}})
