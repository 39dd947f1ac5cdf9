"""Run the same tests against `Client` and `AsyncClient`: `Bridge` drives an
AsyncClient from synchronous test code on a loop of its own."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable
from typing import Any

from disq_client import AsyncClient, Client


class Bridge:
    def __init__(self, client: AsyncClient) -> None:
        self.aio = client
        self.loop = asyncio.new_event_loop()

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.aio, name)
        if not callable(attr):
            return attr

        def call(*args: Any, **kwargs: Any) -> Any:
            result = attr(*args, **kwargs)
            if inspect.isasyncgen(result):
                return self.loop.run_until_complete(_collect(result))
            if inspect.isawaitable(result):
                return self.loop.run_until_complete(result)
            return result
        return call

    def close(self) -> None:
        self.loop.run_until_complete(self.aio.close())
        self.loop.close()


async def _collect(agen: Any) -> list[Any]:
    return [item async for item in agen]


def make_client(kind: str) -> Callable[..., Any]:
    """A factory of Client, or of bridged AsyncClient, taking Client's arguments."""
    if kind == "sync":
        return Client
    def bridged(*args: Any, **kwargs: Any) -> Bridge:
        return Bridge(AsyncClient(*args, **kwargs))
    return bridged
