"""Topics across the cluster (TOPIC SUBSCRIBE / UNSUBSCRIBE, a disq extension): every
node holds every subscription (disq/topics.py). A change goes to every reachable node at
once (TOPIC_SET; the command answers once every reachable node holds it) and the whole
table to a random peer now and then (TOPIC_SYNC): a node that was down or cut off
catches up within a few periods (tables.py). A publish is a node's own business: it
adds the jobs through ADDJOB (server/topic_service.py)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from ..cluster import messages as m
from ..cluster.port import BusPort
from ..node import Node
from ..topics import Subscription
from .tables import OnHeld, SyncedTable

SWEEP_EVERY_MS = 60_000


class TopicSync:
    """The subscriptions' spread, a part of `Replication`."""

    def __init__(self, node: Node, bus: BusPort,
                 loop: asyncio.AbstractEventLoop | None = None) -> None:
        self.node = node
        self.table = node.topics
        self.sync = SyncedTable(bus, m.TOPIC_SET, m.TOPIC_SYNC, m.TOPIC_HELD,
                                lambda: self.table.entries.values(), self._merge, loop)
        # The server persists what changed (nodes.conf).
        self.on_change: Callable[[Subscription], None] = lambda subscription: None
        self._next_sweep = 0

    def changed(self, subscription: Subscription, on_held: OnHeld | None = None) -> None:
        """A subscription changed here: tell every node."""
        self.sync.changed(subscription.to_wire(), on_held)
        self.on_change(subscription)

    def cron(self, now: int) -> None:
        self.sync.cron(now)
        if now >= self._next_sweep:
            self._next_sweep = now + SWEEP_EVERY_MS
            self.table.sweep(now)

    def _merge(self, data: object) -> None:
        subscription = Subscription.from_wire(data)
        if subscription is not None and self.table.merge(subscription):
            self.on_change(subscription)

