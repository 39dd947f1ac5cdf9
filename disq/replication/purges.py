"""QDEL and QPURGE across the cluster (disq extensions): every node holds every purge
(disq/purges.py). A new one goes to every reachable node at once (PURGE_SET; the
command answers once every reachable node has deleted the jobs it names) and the whole
table to a random peer now and then (PURGE_SYNC): a node that was down or cut off
deletes them within a few periods of coming back (tables.py). A copy of a purged job
that arrives later is refused where it arrives (incoming.py, federation.py)."""

from __future__ import annotations

import asyncio

from ..cluster import messages as m
from ..cluster.port import BusPort
from ..node import Node
from ..purges import Purge
from .tables import SpreadTable


def purge_sync(node: Node, bus: BusPort, loop: asyncio.AbstractEventLoop | None = None
               ) -> SpreadTable[Purge]:
    """The purges' spread, a part of `Replication`."""
    table = node.policies.purges

    def merge(purge: Purge) -> bool:
        if not table.merge(purge):
            return False
        node.purge(purge)  # before the PURGE_HELD: the command answers after this
        return True

    return SpreadTable(bus, (m.PURGE_SET, m.PURGE_SYNC, m.PURGE_HELD),
                       lambda: table.entries.values(), Purge.from_wire, merge, table.sweep,
                       loop)
