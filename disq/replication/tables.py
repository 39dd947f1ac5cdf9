"""Tables every node holds whole (CRON's schedules, the queue policies, the users): a
change made on a node goes to every reachable node at once (a SET message), and each
node sends its whole table to one random peer every SYNC_PERIOD_MS (a SYNC message), so
a node that was down or cut off catches up within a few periods. Entries are merged by
their own rule (the newest version wins); this part only moves them.

Read your writes: the command that made a change answers once every reachable node
holds it. Its SET carries a request ID, which each receiver confirms once merged (a
HELD message); the messages to a peer keep their order, so the HELD of a command's
last SET confirms its earlier ones too. The SETs go again every RESEND_MS to the peers
yet to confirm whose link is up (one reachable but without a link when the change was
made: a cluster just formed, a link dialled again). A peer stopped or killed and not
flagged PFAIL yet is waited for as any (a dead node and a stuck one look alike from
here for a while). A reachable node that did not confirm within
HOLD_TIMEOUT_MS (stopped, its link down, an older disq that does not confirm) is named
to the command, which answers -NOREPL: the change is made on this node and reaches
that one by the periodic sync.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable, Iterable
from typing import Any, Final, Generic, Protocol, TypeVar

from ..cluster.membership import ClusterNode
from ..cluster.port import BusPort
from ..errors import DisqError

SYNC_PERIOD_MS: Final = 2000  # the whole table to one random peer this often
MAX_SYNC_ENTRIES: Final = 100_000  # taken from one SYNC message
HOLD_TIMEOUT_MS: Final = 2000  # every reachable node confirms a change within this
RESEND_MS: Final = 200  # a change goes again this often to the peers yet to confirm

# on_held(missing): every reachable peer confirmed (missing empty), or the IDs of those
# that did not within HOLD_TIMEOUT_MS
OnHeld = Callable[[list[str]], None]


class SyncedTable:
    def __init__(self, bus: BusPort, set_type: int, sync_type: int, held_type: int,
                 entries: Callable[[], Iterable[Any]], merge: Callable[[object], None],
                 loop: asyncio.AbstractEventLoop | None = None) -> None:
        """`entries`: the table's entries (each with `to_wire()`); `merge`: takes an
        entry's wire form from a peer (checks it, merges it if newer)."""
        self.bus = bus
        self.set_type = set_type
        self.sync_type = sync_type
        self.held_type = held_type
        self.entries = entries
        self.merge = merge
        self._loop = loop
        self._next_sync = 0
        self._request_id = 0
        # request ID -> (the peers yet to confirm, who waits, the wire forms)
        self._waiting: dict[int, tuple[set[str], OnHeld, list[list[Any]]]] = {}
        bus.on(set_type, self._on_set)
        bus.on(sync_type, self._on_sync)
        bus.on(held_type, self._on_held)

    def changed(self, wire: list[Any], on_held: OnHeld | None = None) -> None:
        """An entry defined or deleted here: tell every node."""
        self.changed_all([wire], on_held)

    def changed_all(self, wires: list[list[Any]], on_held: OnHeld | None = None) -> None:
        """Entries defined or deleted here: tell every node; `on_held` (exactly once)
        when every reachable peer holds them, or after HOLD_TIMEOUT_MS."""
        bus = self.bus
        for wire in wires[:-1]:
            bus.broadcast(self.set_type, wire)
        if on_held is None:
            if wires:
                bus.broadcast(self.set_type, wires[-1])
            return
        peers = {n.id for n in bus.reachable_peers()}
        if not wires or not peers:
            if wires:
                bus.broadcast(self.set_type, wires[-1])
            on_held([])
            return
        self._request_id += 1
        request_id = self._request_id
        bus.broadcast(self.set_type, wires[-1], request_id)
        self._waiting[request_id] = (peers, on_held, wires)
        loop = self._loop or asyncio.get_running_loop()
        loop.call_later(HOLD_TIMEOUT_MS / 1000, self._timed_out, request_id)
        loop.call_later(RESEND_MS / 1000, self._resend, request_id, loop)

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

    def _resend(self, request_id: int, loop: asyncio.AbstractEventLoop) -> None:
        waiting = self._waiting.get(request_id)
        if waiting is None:
            return
        bus = self.bus
        peers, wires = waiting[0], waiting[2]
        for node_id in peers:
            if bus.can_send(node_id):
                for wire in wires[:-1]:
                    bus.send(node_id, self.set_type, wire)
                bus.send(node_id, self.set_type, wires[-1], request_id)
        loop.call_later(RESEND_MS / 1000, self._resend, request_id, loop)

    def _timed_out(self, request_id: int) -> None:
        waiting = self._waiting.pop(request_id, None)
        if waiting is not None:
            waiting[1](sorted(waiting[0]))

    def _on_set(self, sender: ClusterNode, fields: list[Any]) -> None:
        if fields:
            self.merge(fields[0])
            if len(fields) > 1 and type(fields[1]) is int:
                self.bus.send(sender.id, self.held_type, fields[1])

    def _on_held(self, sender: ClusterNode, fields: list[Any]) -> None:
        if not fields or type(fields[0]) is not int:
            return
        waiting = self._waiting.get(fields[0])
        if waiting is None:
            return
        waiting[0].discard(sender.id)
        if not waiting[0]:
            del self._waiting[fields[0]]
            waiting[1]([])

    def _on_sync(self, sender: ClusterNode, fields: list[Any]) -> None:
        if fields and type(fields[0]) is list:
            for data in fields[0][:MAX_SYNC_ENTRIES]:
                self.merge(data)


class Entry(Protocol):
    def to_wire(self) -> list[Any]: ...


E = TypeVar("E", bound=Entry)


class SpreadTable(Generic[E]):
    """A table of a node's own (TOPIC's subscriptions, QDEL's purges) spread as a
    `SyncedTable`: `decode` checks a peer's entry, `merge` takes it if newer (True: it
    changed), `sweep` forgets the old tombstones every SWEEP_EVERY_MS; `on_change`
    hears of every change, made here or merged (the server persists them)."""

    SWEEP_EVERY_MS: Final = 60_000

    def __init__(self, bus: BusPort, message_types: tuple[int, int, int],
                 entries: Callable[[], Iterable[E]], decode: Callable[[object], E | None],
                 merge: Callable[[E], bool], sweep: Callable[[int], object],
                 loop: asyncio.AbstractEventLoop | None = None) -> None:
        self.decode = decode
        self.merge = merge
        self.sweep = sweep
        self.sync = SyncedTable(bus, *message_types, entries, self._merge, loop)
        self.on_change: Callable[[E], None] = lambda entry: None
        self._next_sweep = 0

    def changed(self, entry: E, on_held: OnHeld | None = None) -> None:
        """An entry changed here: tell every node."""
        self.sync.changed(entry.to_wire(), on_held)
        self.on_change(entry)

    def cron(self, now: int) -> None:
        self.sync.cron(now)
        if now >= self._next_sweep:
            self._next_sweep = now + self.SWEEP_EVERY_MS
            self.sweep(now)

    def _merge(self, data: object) -> None:
        entry = self.decode(data)
        if entry is not None and self.merge(entry):
            self.on_change(entry)


def held_reply(missing: list[str], done: bytes) -> bytes:
    """A change's reply: `done` if every reachable peer confirmed it, else -NOREPL
    naming the `missing` ones."""
    if not missing:
        return done
    return not_held(missing).reply()


def not_held(missing: list[str]) -> DisqError:
    """The -NOREPL of a change the `missing` reachable peers did not confirm."""
    return DisqError("NOREPL", (
        f"{len(missing)} reachable node(s) did not confirm the change within "
        f"{HOLD_TIMEOUT_MS} ms ({', '.join(missing)}): it is made on this node and "
        f"reaches them by the periodic sync"))
