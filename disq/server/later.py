"""A service's result that may have to wait for other nodes: GLOBALQLEN's sum, a
QPOLICY, CRON or ACL change confirmed by every reachable node, DEADLETTER REQUEUE's
count. The service returns a `Later` and never learns which front end asked: a RESP
handler replies at once if it is `done` (no `Pending` on a node alone) or answers its
`Pending` in `then`; an HTTP route awaits `wait()`.

`Later` is sans-IO but for `wait`, which makes an asyncio future of it;
`reply_later` and `reply_held` are the RESP handlers' side.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING, Generic, TypeVar

from ..replication.tables import held_reply

if TYPE_CHECKING:
    from .connection import Client
    from .pending import Pending

T = TypeVar("T")


class Later(Generic[T]):
    """A value known now (`Later.now`) or set once by whoever finishes the work
    (`resolve`; a second resolve is ignored: a peer's late answer after a timeout)."""

    __slots__ = ("done", "_value", "_waiters")

    def __init__(self) -> None:
        self.done = False
        self._value: T | None = None
        self._waiters: list[Callable[[T], None]] = []

    @classmethod
    def now(cls, value: T) -> Later[T]:
        later: Later[T] = cls()
        later.resolve(value)
        return later

    @classmethod
    def of(cls, start: Callable[[Callable[[T], None]], None]) -> Later[T]:
        """The value `start(resolve)` gives, now or later: `start` is the work, given
        the callback that sets the value."""
        later: Later[T] = cls()
        start(later.resolve)
        return later

    def resolve(self, value: T) -> None:
        if self.done:
            return
        self.done = True
        self._value = value
        waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            waiter(value)

    @property
    def value(self) -> T:
        """The value; only once `done`."""
        if not self.done:
            raise RuntimeError("the value is not known yet")
        return self._value  # type: ignore[return-value]

    def then(self, waiter: Callable[[T], None]) -> None:
        """`waiter(value)`: at once if done, else when resolved."""
        if self.done:
            waiter(self._value)  # type: ignore[arg-type]
        else:
            self._waiters.append(waiter)

    async def wait(self) -> T:
        if self.done:
            return self._value  # type: ignore[return-value]
        future: asyncio.Future[T] = asyncio.get_running_loop().create_future()

        def settle(value: T) -> None:
            if not future.done():  # (not if the waiting request was cancelled)
                future.set_result(value)

        self._waiters.append(settle)
        return await future


def reply_later(client: Client, later: Later[T], encode: Callable[[T], bytes]
                ) -> bytes | Pending:
    """A RESP handler's reply of `later`: its bytes now if done, else a `Pending`."""
    if later.done:
        return encode(later.value)
    pending = client.pending()
    later.then(lambda value: pending.answer(encode(value)))
    return pending


def reply_held(client: Client, held: Later[list[str]], done: bytes) -> bytes | Pending:
    """The reply of a change every reachable node is to confirm: `done`, or -NOREPL
    naming the nodes that did not (replication/tables.py)."""
    return reply_later(client, held, lambda missing: held_reply(missing, done))


def all_held(helds: list[Later[list[str]]]) -> Later[list[str]]:
    """Changes that each every reachable node is to confirm, as one: done when all
    are, with every node that did not confirm one of them."""
    def start(resolve: Callable[[list[str]], None]) -> None:
        left = [len(helds)]
        missing: set[str] = set()

        def one_held(names: list[str]) -> None:
            missing.update(names)
            left[0] -= 1
            if not left[0]:
                resolve(sorted(missing))

        if not helds:
            resolve([])
        for held in helds:
            held.then(one_held)
    return Later.of(start)
