"""Tables every node holds whole (CRON's schedules, the queue policies): a change made
on a node goes to every reachable node at once (a SET message), and each node sends
its whole table to one random peer every SYNC_PERIOD_MS (a SYNC message), so a node
that was down or cut off catches up within a few periods. Entries are merged by their
own rule (the newest version wins); this part only moves them.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable
from typing import Any, Final

from ..cluster.membership import ClusterNode
from ..cluster.port import BusPort

SYNC_PERIOD_MS: Final = 2000  # the whole table to one random peer this often
MAX_SYNC_ENTRIES: Final = 100_000  # taken from one SYNC message


class SyncedTable:
    def __init__(self, bus: BusPort, set_type: int, sync_type: int,
                 entries: Callable[[], Iterable[Any]], merge: Callable[[object], None]) -> None:
        """`entries`: the table's entries (each with `to_wire()`); `merge`: takes an
        entry's wire form from a peer (checks it, merges it if newer)."""
        self.bus = bus
        self.set_type = set_type
        self.sync_type = sync_type
        self.entries = entries
        self.merge = merge
        self._next_sync = 0
        bus.on(set_type, self._on_set)
        bus.on(sync_type, self._on_sync)

    def changed(self, wire: list[Any]) -> None:
        """An entry defined or deleted here: tell every node."""
        self.bus.broadcast(self.set_type, wire)

    def cron(self, now: int) -> None:
        if now < self._next_sync:
            return
        self._next_sync = now + SYNC_PERIOD_MS
        peers = [n.id for n in self.bus.reachable_peers() if self.bus.can_send(n.id)]
        if not peers:
            return
        wires = [entry.to_wire() for entry in self.entries()]
        if wires:
            self.bus.send(random.choice(peers), self.sync_type, wires)

    def _on_set(self, sender: ClusterNode, fields: list[Any]) -> None:
        if fields:
            self.merge(fields[0])

    def _on_sync(self, sender: ClusterNode, fields: list[Any]) -> None:
        if fields and type(fields[0]) is list:
            for data in fields[0][:MAX_SYNC_ENTRIES]:
                self.merge(data)
