"""Topics across the cluster (TOPIC SUBSCRIBE / UNSUBSCRIBE, a disq extension): every
node holds every subscription (disq/topics.py). A change goes to every reachable node at
once (TOPIC_SET; the command answers once every reachable node holds it) and the whole
table to a random peer now and then (TOPIC_SYNC): a node that was down or cut off
catches up within a few periods (tables.py). A publish is a node's own business: it
adds the jobs through ADDJOB (server/topic_service.py)."""

from __future__ import annotations

import asyncio

from ..cluster import messages as m
from ..cluster.port import BusPort
from ..node import Node
from ..topics import Subscription
from .tables import SpreadTable


def topic_sync(node: Node, bus: BusPort, loop: asyncio.AbstractEventLoop | None = None
               ) -> SpreadTable[Subscription]:
    """The subscriptions' spread, a part of `Replication`."""
    table = node.topics
    return SpreadTable(bus, (m.TOPIC_SET, m.TOPIC_SYNC, m.TOPIC_HELD),
                       lambda: table.entries.values(), Subscription.from_wire, table.merge,
                       table.sweep, loop)
