"""Messages about whole queues rather than jobs: PAUSE (QPAUSE ... BCAST) and GLOBALQLEN
(QLEN_REQUEST / QLEN_REPLY). NEEDJOBS and YOURJOBS are federation.py's."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, Final

from ..cluster import messages as m
from ..cluster.membership import ClusterNode
from ..cluster.port import BusPort
from ..node import Node
from ..queue import PAUSED_ALL

GLOBALQLEN_TIMEOUT_MS: Final = 1000  # GLOBALQLEN answers with the nodes heard from by then


class QueueMessages:
    def __init__(self, node: Node, bus: BusPort,
                 loop: asyncio.AbstractEventLoop | None = None) -> None:
        self.node = node
        self.bus = bus
        self._loop = loop
        # GLOBALQLEN requests in flight: id -> [nodes yet to answer, sum, on_done]
        self._qlen_requests: dict[int, list[Any]] = {}
        self._qlen_request_id = 0
        bus.on(m.PAUSE, self._on_pause)
        bus.on(m.QLEN_REQUEST, self._on_qlen_request)
        bus.on(m.QLEN_REPLY, self._on_qlen_reply)

    def pause(self, queue: bytes, flags: int) -> None:
        self.bus.broadcast(m.PAUSE, queue, flags)

    def global_qlen(self, queue: bytes, on_done: Callable[[int], None]) -> None:
        """GLOBALQLEN (a later Disque command): the sum of the queue's length on the
        other reachable nodes, through `on_done(sum)` once all answered or after
        GLOBALQLEN_TIMEOUT_MS (a node that does not answer counts for nothing)."""
        peers = [n.id for n in self.bus.reachable_peers() if self.bus.can_send(n.id)]
        if not peers:
            on_done(0)
            return
        self._qlen_request_id += 1
        request_id = self._qlen_request_id
        self._qlen_requests[request_id] = [set(peers), 0, on_done]
        for node_id in peers:
            self.bus.send(node_id, m.QLEN_REQUEST, request_id, queue)
        loop = self._loop or asyncio.get_running_loop()
        loop.call_later(GLOBALQLEN_TIMEOUT_MS / 1000, self._qlen_done, request_id)

    def _qlen_done(self, request_id: int) -> None:
        request = self._qlen_requests.pop(request_id, None)
        if request is not None:
            request[2](request[1])

    # -- bus messages -------------------------------------------------------------------
    def _on_pause(self, sender: ClusterNode, fields: list[Any]) -> None:
        if len(fields) < 2:
            return
        queue, flags = fields[0], fields[1]
        if type(queue) is bytes and type(flags) is int and 0 <= flags <= PAUSED_ALL:
            self.node.set_pause(queue, flags, broadcast=False)

    def _on_qlen_request(self, sender: ClusterNode, fields: list[Any]) -> None:
        if len(fields) >= 2 and type(fields[0]) is int and type(fields[1]) is bytes:
            self.bus.send(sender.id, m.QLEN_REPLY, fields[0], self.node.qlen(fields[1]))

    def _on_qlen_reply(self, sender: ClusterNode, fields: list[Any]) -> None:
        if len(fields) < 2 or type(fields[0]) is not int or type(fields[1]) is not int:
            return
        request = self._qlen_requests.get(fields[0])
        if request is None or sender.id not in request[0]:
            return  # answered already, timed out, or not asked
        request[0].discard(sender.id)
        request[1] += max(0, fields[1])
        if not request[0]:
            self._qlen_done(fields[0])
