"""The node's HTTP port (`http-port`): the API (/api/v1, api.py), its OpenAPI document
(/openapi.json) and interactive docs (/docs), the dashboard (/), and /metrics. It runs
on the node's own event loop (aiohttp's server: on the loop already, as fast as
Starlette under uvicorn on this node's measurements, one dependency instead of three,
and its server cancels a handler whose client went away, which the long poll uses).
Nothing of it is imported while `http-port` is 0.

The node's users (disq/acl.py) protect the API and /metrics (auth.py: basic
auth `user:password` or `Authorization: Bearer <password>`; failures counted in INFO
acl_access_denied_auth and, after ten from one IP, 429 for a second: auth_throttle.py).
Each route runs its operations as that user (a service's operation gated as its
command would be: calls.py, `JobService.gate`), so the same permission checks
apply: -NOPERM is a 403. The dashboard's page asks for a user and password and sends
them the same way. With `tls-port` set the port speaks TLS with the node's certificate.

Before any of that, a request must name the node in Host and, for the API and /metrics,
not come from another site's page, with a JSON body if it changes something
(crosssite.py); its connection was admitted within maxclients and has deadlines
(connections.py); its JSON is bounded (jsonbody.py).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING

from aiohttp import web

from ... import tls
from . import api, api_admin, api_batches, api_cron, api_queues, api_retention, api_topics
from .auth import CHALLENGE, Authenticator, AuthRefused
from .connections import HttpPort
from .crosssite import content_type_refusal, host_refusal, origin_refusal
from .jsonio import SERVER_KEY, USER_KEY, need
from .openapi import openapi_document
from .problems import Problem
from .routes import Route, add_routes

if TYPE_CHECKING:
    from ..app import Server

log = logging.getLogger("disq")

AUTH_KEY: web.AppKey[Authenticator] = web.AppKey("authenticator")
PUBLIC_PREFIXES = ("/docs", "/openapi.json", "/static/", "/favicon")
STATIC_DIR = Path(__file__).parent / "static"
# Every route of the API, in the order the router tries them; their declarations make
# the OpenAPI document.
API_ROUTES: list[Route] = [*api.ROUTES, *api_queues.ROUTES, *api_batches.ROUTES,
                           *api_topics.ROUTES, *api_cron.ROUTES, *api_admin.ROUTES,
                           *api_retention.ROUTES]


@web.middleware
async def _problems(request: web.Request, handler: api.Handler) -> web.StreamResponse:
    """Errors as problem+json, authentication first."""
    server = request.app[SERVER_KEY]
    try:
        refusal = host_refusal(request, server.config)
        if refusal is None and request.path != "/" and not request.path.startswith(
                PUBLIC_PREFIXES):
            refusal = (origin_refusal(request, server.config)
                       or content_type_refusal(request))
            if refusal is None:
                request[USER_KEY] = request.app[AUTH_KEY].user(
                    request.headers.get("Authorization", ""), request.remote or "")
        if refusal is not None:
            return refusal.response()
        response = await handler(request)
        user = request.get(USER_KEY)
        if user is not None:  # usage accounting (INFO users, GET /usage): the bodies
            user.bytes_in += request.content_length or 0
            body = getattr(response, "body", None)
            if type(body) is bytes:
                user.bytes_out += len(body)
        return response
    except AuthRefused as refused:
        headers = {"WWW-Authenticate": CHALLENGE} if refused.status == 401 else None
        return Problem(refused.status, refused.message, refused.code).response(headers)
    except Problem as problem:
        headers = {"WWW-Authenticate": CHALLENGE} if problem.status == 401 else None
        return problem.response(headers)
    except web.HTTPRequestEntityTooLarge:
        return Problem(413, "the request body is larger than http-max-body "
                            f"({server.config.http_max_body} bytes)").response()
    except web.HTTPMethodNotAllowed as exc:
        return Problem(405, f"{request.method} is not allowed here; try "
                            f"{', '.join(sorted(exc.allowed_methods))}").response()
    except web.HTTPNotFound:
        return Problem(404, f"no route {request.path}", "NOROUTE").response()
    except web.HTTPException:
        raise
    except ConnectionError:
        return Problem(503, "the node closed this request's connection").response()


async def _openapi(request: web.Request) -> web.Response:
    return web.json_response(openapi_document(API_ROUTES))


async def _docs(request: web.Request) -> web.Response:
    return web.Response(text=DOCS_PAGE, content_type="text/html")


async def _index(request: web.Request) -> web.FileResponse:
    return web.FileResponse(STATIC_DIR / "index.html")


async def _metrics(request: web.Request) -> web.Response:
    from ..metrics import metrics_text
    need(request, "info")
    return web.Response(body=await metrics_text(request.app[SERVER_KEY]),
                        content_type="text/plain", charset="utf-8")


DOCS_PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>disq API</title>
<link rel="stylesheet" href="/docs/assets/swagger-ui.css"></head>
<body><div id="swagger-ui"></div>
<script src="/docs/assets/swagger-ui-bundle.js"></script>
<script>
window.ui = SwaggerUIBundle({url: "/openapi.json", dom_id: "#swagger-ui",
  deepLinking: true, persistAuthorization: true});
</script></body></html>
"""


def _swagger_dir() -> Path:
    """Swagger UI's files, from the swagger-ui-bundle package (pinned in
    pyproject.toml): served by the node, no CDN."""
    import swagger_ui_bundle  # type: ignore[import-untyped]
    return Path(swagger_ui_bundle.swagger_ui_path)


def make_app(server: Server) -> web.Application:
    app = web.Application(middlewares=[_problems],
                          client_max_size=server.config.http_max_body)
    app[SERVER_KEY] = server
    app[AUTH_KEY] = Authenticator(server.acl, server.auth_throttle)
    add_routes(app, API_ROUTES)
    app.router.add_get("/openapi.json", _openapi)
    app.router.add_get("/docs", _docs)
    app.router.add_static("/docs/assets", _swagger_dir())
    app.router.add_get("/metrics", _metrics)
    if STATIC_DIR.is_dir():
        app.router.add_get("/", _index)
        app.router.add_static("/static", STATIC_DIR)
    return app


async def start_http(server: Server) -> HttpPort:
    """Listen on `http-bind` (default: the node's `bind`) : `http-port`; TLS when
    the node has a `tls-port`. A port that cannot be had stops the start."""
    cfg = server.config
    # aiohttp's keep-alive timer is the headers' deadline (connections.py), and the
    # rest of a body a route did not read is awaited no longer than a body is.
    runner = web.AppRunner(make_app(server), access_log=None, handler_cancellation=True,
                           keepalive_timeout=cfg.http_read_timeout,
                           lingering_time=cfg.http_read_timeout)
    await runner.setup()
    port = HttpPort(runner)
    hosts = cfg.http_bind.split() or list(cfg.bind)
    context = tls.client_port_context(cfg) if cfg.tls_port else None
    try:
        for host in hosts:
            await port.listen(server, host, cfg.http_port, context)
    except OSError as exc:
        await port.cleanup()
        raise SystemExit(f"Could not create HTTP listening socket {hosts}:{cfg.http_port}: "
                         f"{exc.strerror or exc}") from None
    scheme = "https" if context is not None else "http"
    log.info("HTTP API and dashboard on %s://%s:%d/", scheme,
             hosts[0] if ":" not in hosts[0] else f"[{hosts[0]}]", cfg.http_port)
    return port
