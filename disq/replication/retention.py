"""Reading other nodes' retained jobs (REPLAY: server/replay_service.py):
RETAINED_ASK asks a peer for a page of its retained jobs of a queue's window (after a
cursor, in the replay order: creation time, then ID), RETAINED_PAGE answers with them
and whether it may have more. A page holds at most the COUNT asked and PAGE_BYTES of
bodies (at least one job). A peer that does not answer within ASK_TIMEOUT_MS counts as
unreachable: `ask` gives None.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable
from typing import Any, Final, Protocol

from .. import errors
from ..cluster import messages as m
from ..cluster.membership import ClusterNode
from ..cluster.port import BusPort
from ..policies import MAX_QUEUE_NAME_LEN
from ..retention.segments import RetainedJob
from ..where import Condition, parse_condition

log = logging.getLogger("disq")

ASK_TIMEOUT_MS: Final = 10_000  # a page's reading may wait for the disk
PAGE_BYTES: Final = 16 * 1024 * 1024
MAX_PAGE: Final = 100_000
MAX_MS: Final = 2**47
Key = tuple[int, bytes]
Page = tuple[list[RetainedJob], bool]


class WindowReader(Protocol):
    """The node's retained jobs (retention/store.py's RetentionStore.window)."""

    def window(self, queue: bytes, start_ms: int, end_ms: int, after: Key | None,
               count: int, where: list[Condition] | None = None,
               shard: tuple[int, int] | None = None) -> Awaitable[Page]: ...


def parse_where(args: list[bytes]) -> list[Condition]:
    """WHERE conditions from their arguments (key, op[, value], ...), as GETJOB's."""
    where: list[Condition] = []
    j = 0
    while j < len(args):
        condition, j = parse_condition(args, j)
        where.append(condition)
    return where


def trim_page(jobs: list[RetainedJob], more: bool) -> Page:
    """At most PAGE_BYTES of bodies (at least one job)."""
    size = 0
    for i, job in enumerate(jobs):
        size += len(job.body) + 256
        if size > PAGE_BYTES and i:
            return jobs[:i], True
    return jobs, more


class RetainedReads:
    """RETAINED_ASK / RETAINED_PAGE, this node's side of both."""

    def __init__(self, bus: BusPort, loop: asyncio.AbstractEventLoop,
                 store: WindowReader) -> None:
        self.bus = bus
        self.loop = loop
        self.store = store
        self._request_id = 0
        self._asked: dict[int, tuple[str, asyncio.Future[Page | None]]] = {}
        bus.on(m.RETAINED_ASK, self._on_ask)
        bus.on(m.RETAINED_PAGE, self._on_page)

    async def ask(self, peer: str, queue: bytes, start_ms: int, end_ms: int,
                  after: Key | None, count: int, where_args: list[bytes]) -> Page | None:
        """A page of `peer`'s retained jobs; None if it did not answer in time (or
        could not be sent to)."""
        self._request_id += 1
        request_id = self._request_id
        after_ctime, after_id = after if after is not None else (-1, b"")
        future: asyncio.Future[Page | None] = self.loop.create_future()
        if not self.bus.send(peer, m.RETAINED_ASK, request_id, queue, start_ms, end_ms,
                             after_ctime, after_id, count, where_args):
            return None
        self._asked[request_id] = (peer, future)
        try:
            return await asyncio.wait_for(future, ASK_TIMEOUT_MS / 1000)
        except TimeoutError:
            return None
        finally:
            self._asked.pop(request_id, None)

    def _on_ask(self, sender: ClusterNode, fields: list[Any]) -> None:
        if len(fields) != 8:
            return
        request_id, queue, start_ms, end_ms, after_ctime, after_id, count, where = fields
        if type(request_id) is not int:
            return
        problem = ""
        if not (type(queue) is bytes and 0 < len(queue) <= MAX_QUEUE_NAME_LEN
                and type(start_ms) is int and type(end_ms) is int
                and 0 <= start_ms <= end_ms < MAX_MS
                and type(after_ctime) is int and type(after_id) is bytes
                and type(count) is int and 0 < count <= MAX_PAGE
                and type(where) is list and all(type(w) is bytes for w in where)):
            problem = "bad request"
        conditions: list[Condition] = []
        if not problem:
            try:
                conditions = parse_where(where)
            except errors.DisqError as exc:
                problem = str(exc)
        if problem:
            self.bus.send(sender.id, m.RETAINED_PAGE, request_id, problem, False, [])
            return
        after = None if after_ctime < 0 else (after_ctime, after_id)
        self.loop.create_task(self._answer(sender.id, request_id, queue, start_ms, end_ms,
                                           after, count, conditions))

    async def _answer(self, peer: str, request_id: int, queue: bytes, start_ms: int,
                      end_ms: int, after: Key | None, count: int,
                      where: list[Condition]) -> None:
        try:
            jobs, more = trim_page(*await self.store.window(queue, start_ms, end_ms, after,
                                                            count, where or None))
        except Exception as exc:  # (an unreadable disk: said at once, not a timeout)
            log.warning("RETAINED_ASK of %r: %s", queue, exc)
            self.bus.send(peer, m.RETAINED_PAGE, request_id, f"read failed: {exc}", False,
                          [])
            return
        self.bus.send(peer, m.RETAINED_PAGE, request_id, "", more,
                      [job.to_wire() for job in jobs])

    def _on_page(self, sender: ClusterNode, fields: list[Any]) -> None:
        if len(fields) != 4 or type(fields[0]) is not int:
            return
        asked = self._asked.get(fields[0])
        if asked is None or asked[0] != sender.id or asked[1].done():
            return
        _, problem, more, items = fields
        future = asked[1]
        if problem or type(more) is not bool or type(items) is not list:
            future.set_result(None)
            return
        jobs = [job for job in map(RetainedJob.from_wire, items) if job is not None]
        future.set_result((jobs, more))
