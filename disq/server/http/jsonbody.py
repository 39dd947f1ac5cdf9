"""A request's body as JSON, read within `http-read-timeout` (408 after it)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from aiohttp import web

from .problems import Problem, bad_request


def parse(body: bytes) -> Any:
    """The JSON value of a request body; 400 for one that is not JSON."""
    try:
        return json.loads(body)
    except ValueError:
        raise bad_request("the request body is not JSON") from None


async def read_json(request: web.Request, read_timeout: float) -> Any:
    """The request's body as JSON ({} without one), read within `read_timeout` s."""
    if not request.can_read_body:
        return {}
    try:
        async with asyncio.timeout(read_timeout):
            body = await request.read()
    except TimeoutError:
        raise Problem(408, f"the request body did not arrive within http-read-timeout "
                           f"({read_timeout:g} s)", "TIMEOUT") from None
    return parse(body)
