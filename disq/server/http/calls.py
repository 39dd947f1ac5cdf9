"""How every route calls a typed service (the job, queue, cron and admin services):
the request's user, the gate its command passes first (`JobService.gate`: the user's
commands and queues, -OOM, -MISCONF, -LOADING, the call counted, as the RESP dispatch
does), the operation run (`serve`: a `DisqError` as a RESP client would get it, a bug
logged and answered as RESP's internal error; `run`: those as problems, 500 for a
bug; `attempt`: a refusal as None), a change confirmed, and a service's name/value
fields as a JSON object."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, TypeVar

from aiohttp import web

from ...errors import DisqError, err
from ...outcomes import when_durable
from ...replication.tables import not_held
from .jsonio import SERVER_KEY, USER_KEY, field_json
from .problems import Problem

if TYPE_CHECKING:
    from ...acl import User
    from ...node import Node
    from ..later import Later

T = TypeVar("T")


def user_of(request: web.Request) -> User:
    """The user the request acts as (the default user without credentials)."""
    user: User = request.get(USER_KEY, request.app[SERVER_KEY].acl.default)
    return user


def problem(exc: DisqError) -> Problem:
    return Problem.from_resp(exc.code, exc.message)


def gate(request: web.Request, command: str, queues: list[bytes] | None = None) -> User:
    """Before a route runs what `command` does (on `queues`) itself: the refusal the
    RESP dispatch would answer, as a problem (`run` with nothing to run); the
    request's user."""
    run(request, command, queues, _nothing)
    return user_of(request)


def _nothing() -> None:
    return None


def serve(request: web.Request, command: str, queues: list[bytes] | None,
          operation: Callable[[], T]) -> T:
    """`operation` run as `command` on `queues` would be: gated, its refusal or error
    raised as a `DisqError`; a bug's logged, as the RESP dispatch does, and raised as
    its internal error (answered 500)."""
    server = request.app[SERVER_KEY]
    try:
        server.jobs.gate(user_of(request), command, queues)
        return operation()
    except (DisqError, Problem):  # (a route's own refusal, as it made it)
        raise
    except Exception as exc:
        server.log_exception(f"Error while executing {command}", exc)
        raise err(f"internal error while executing '{command}'") from None


def run(request: web.Request, command: str, queues: list[bytes] | None,
        operation: Callable[[], T]) -> T:
    """As `serve`, its error a problem."""
    try:
        return serve(request, command, queues, operation)
    except DisqError as exc:
        raise problem(exc) from None


def attempt(request: web.Request, command: str, queues: list[bytes] | None,
            operation: Callable[[], T]) -> T | None:
    """As `run`, None in place of a refusal or an error (a read whose failure the
    route answers with what it has); a bug stays a 500."""
    try:
        return run(request, command, queues, operation)
    except Problem as refused:
        if refused.status == 500:
            raise
        return None


def answer_of(start: Callable[[Callable[[T], None]], object]) -> asyncio.Future[T]:
    """A Future set by the callback `start` is given (a `HeldAnswer`'s `then`): the value
    once it comes, unless the Future was cancelled (its client went away)."""
    future: asyncio.Future[T] = asyncio.get_running_loop().create_future()

    def deliver(value: T) -> None:
        if not future.done():
            future.set_result(value)
    start(deliver)
    return future


async def durable(node: Node) -> None:
    """Once what the node logged is as safe as the AOF policy promises, as a RESP
    reply waits (`when_durable`)."""
    def start(deliver: Callable[[None], None]) -> None:
        when_durable(node, deliver, None)
    await answer_of(start)


async def confirmed(held: Later[list[str]]) -> None:
    """A change every reachable node is to confirm: -NOREPL's problem if one did not."""
    missing = await held.wait()
    if missing:
        raise problem(not_held(missing))


def fields_json(fields: Iterable[tuple[bytes, Any]]) -> dict[str, Any]:
    """Name/value fields (QSTAT's, QPOLICY GET's, CRON LIST's...) as a JSON object
    (`field_json`: durations in ms)."""
    return dict(field_json(name, value) for name, value in fields)
