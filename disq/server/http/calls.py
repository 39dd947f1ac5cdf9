"""What the routes that call a typed service directly share: the request's user, the
gate its command passes first (`JobService.gate`: the user's commands and queues, the
node's -LOADING/-MISCONF/-OOM refusals, the call counted, as the RESP dispatch does),
a `DisqError` as the problem a RESP client would get as an error reply, a change
confirmed, and a service's name/value fields as a JSON object."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, TypeVar

from aiohttp import web

from ...errors import DisqError
from ...replication.tables import not_held
from .jsonio import SERVER_KEY, USER_KEY, plain
from .problems import Problem

if TYPE_CHECKING:
    from ...acl import User
    from ..later import Later

T = TypeVar("T")


def user_of(request: web.Request) -> User:
    """The user the request acts as (the default user without credentials)."""
    user: User = request.get(USER_KEY, request.app[SERVER_KEY].acl.default)
    return user


def problem(exc: DisqError) -> Problem:
    return Problem.from_resp(exc.code, exc.message)


def gate(request: web.Request, command: str, queues: list[bytes] | None = None) -> User:
    """Before a route runs what `command` does (on `queues`): the refusal the RESP
    dispatch would answer, as a problem; the request's user."""
    user = user_of(request)
    try:
        request.app[SERVER_KEY].jobs.gate(user, command, queues)
    except DisqError as exc:
        raise problem(exc) from None
    return user


def run(request: web.Request, command: str, queues: list[bytes] | None,
        operation: Callable[[], T]) -> T:
    """`operation` run as `command` on `queues` would be: gated, its error a problem."""
    gate(request, command, queues)
    try:
        return operation()
    except DisqError as exc:
        raise problem(exc) from None


def attempt(request: web.Request, command: str, queues: list[bytes] | None,
            operation: Callable[[], T]) -> T | None:
    """As `run`, None in place of a refusal or an error (a read whose failure the
    route answers with what it has)."""
    try:
        return run(request, command, queues, operation)
    except Problem:
        return None


async def confirmed(held: Later[list[str]]) -> None:
    """A change every reachable node is to confirm: -NOREPL's problem if one did not."""
    missing = await held.wait()
    if missing:
        raise problem(not_held(missing))


def fields_json(fields: Iterable[tuple[bytes, Any]]) -> dict[str, Any]:
    """Name/value fields (QSTAT's, QPOLICY GET's, CRON LIST's...) as a JSON object:
    names with '-' become '_', bytes become text."""
    return {name.decode().replace("-", "_"): plain(value) for name, value in fields}
