"""Later (disq/server/later.py): a service's result known now or once other nodes
answered, read by a RESP handler (`then`) or an HTTP route (`wait`)."""

from __future__ import annotations

import asyncio

import pytest

from disq.server.later import Later


def test_a_value_known_now_is_done_and_given_at_once() -> None:
    later = Later.now(3)
    seen: list[int] = []
    later.then(seen.append)
    assert later.done and later.value == 3 and seen == [3]


def test_a_value_set_later_reaches_every_waiter_once() -> None:
    later: Later[list[str]] = Later()
    seen: list[list[str]] = []
    later.then(seen.append)
    later.then(seen.append)
    assert not later.done and seen == []
    with pytest.raises(RuntimeError):
        later.value  # noqa: B018  (not known yet)
    later.resolve(["node-b"])
    later.resolve([])  # a late second answer (after a timeout) changes nothing
    assert seen == [["node-b"], ["node-b"]] and later.value == ["node-b"]


def test_wait_returns_the_value_now_or_once_resolved() -> None:
    async def scenario() -> tuple[int, int]:
        now = await Later.now(1).wait()
        pending: Later[int] = Later()
        asyncio.get_running_loop().call_soon(pending.resolve, 2)
        return now, await pending.wait()

    assert asyncio.run(scenario()) == (1, 2)


def test_a_cancelled_wait_is_not_answered() -> None:
    async def scenario() -> bool:
        pending: Later[int] = Later()
        waiting = asyncio.ensure_future(pending.wait())
        await asyncio.sleep(0)
        waiting.cancel()
        await asyncio.gather(waiting, return_exceptions=True)
        pending.resolve(5)  # (no error setting a cancelled future's result)
        return waiting.cancelled()

    assert asyncio.run(scenario())


def test_of_gives_the_work_its_callback() -> None:
    started: list[object] = []
    at_once = Later.of(lambda resolve: resolve(7))
    later: Later[int] = Later.of(started.append)
    assert at_once.done and at_once.value == 7
    assert not later.done and len(started) == 1
    started[0](8)  # type: ignore[operator]  (the work finishing)
    assert later.value == 8
