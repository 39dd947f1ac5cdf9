"""Recurring jobs across the cluster (CRON, a disq extension): every node holds every
schedule (disq/schedules.py), and each tick yields one job in the whole cluster.

- The table spreads by CRON_SET (a change, to every reachable node, at once) and by
  CRON_SYNC (the whole table to one random peer every SYNC_PERIOD_MS: tables.py): a
  node that was down or cut off catches up within a few periods. The newest version
  of a schedule wins everywhere.
- A tick is fired by one node: the first of the reachable nodes (itself included) in
  the order drawn from the schedule's name (the DEDUP key order of targets.py), the
  same on every node that sees the same nodes. It adds the job with DEDUP key
  `cron:<name>:<tick>` (in the schedule's queue, as every key is: a client's ADDJOB
  of that key in another queue is another key): if two nodes fire the same tick (a
  partition, or a view of the cluster that differs for a moment), the key gives one
  job once they can talk, and CRON_FIRED tells every node the tick is done.
- Every node checks, on each cron run, for a tick still not fired (its firer died
  before firing it): the new first node fires it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final

from ..cluster import messages as m
from ..cluster.membership import ClusterNode
from ..cluster.port import BusPort
from ..node import Node
from ..requests import AddJob
from ..schedules import CronSchedule
from .tables import SyncedTable
from .targets import key_order

if TYPE_CHECKING:
    from .dedup import Dedup

log = logging.getLogger("disq")

FIRE_TIMEOUT_MS: Final = 5000  # the tick's ADDJOB waits this long for its copies



def tick_key(name: bytes, tick: int) -> bytes:
    """The DEDUP key of a tick's job: the same on every node (AddJob scopes it to
    the schedule's queue)."""
    return b"cron:%s:%d" % (name, tick)


class Recurring:
    """The cluster side of CRON, a part of `Replication`."""

    def __init__(self, node: Node, bus: BusPort, dedup: Dedup) -> None:
        self.node = node
        self.bus = bus
        self.dedup = dedup
        self.table = node.schedules
        # name -> the tick whose ADDJOB is under way: one at a time per schedule, oldest
        # first, so `last_fire` never passes a tick that may still fail
        self._firing: dict[bytes, int] = {}
        self.sync = SyncedTable(bus, m.CRON_SET, m.CRON_SYNC,
                                lambda: self.table.schedules.values(), self._merge)
        # The server persists what changed (the AOF when on, and nodes.conf).
        self.on_change: Callable[[CronSchedule], None] = lambda schedule: None
        node.on_schedules_due = self.fire_due
        bus.on(m.CRON_FIRED, self._on_fired)

    # -- the node's side ----------------------------------------------------------------
    def changed(self, schedule: CronSchedule) -> None:
        """A schedule was defined or deleted here (CRON ADD / DEL): tell every node."""
        self.sync.changed(schedule.to_wire())
        self.changed_here(schedule.name)

    def changed_here(self, name: bytes) -> None:
        """The schedule `name` changed here (a definition, a deletion, a fired tick):
        persist it."""
        schedule = self.table.schedules.get(name)
        if schedule is not None:
            self.on_change(schedule)

    def cron(self, now: int) -> None:
        """Every cron run: fire what no node fired (its firer may have died), and
        send the table to a random peer now and then."""
        self.fire_due(self.table.overdue())
        self.sync.cron(now)

    def fire_due(self, due: list[tuple[CronSchedule, int]]) -> None:
        """Fire the oldest due tick of each schedule this node fires (the others follow
        one by one as each one's job is added: `_fire`'s answer)."""
        first: dict[bytes, tuple[CronSchedule, int]] = {}
        for schedule, tick in due:
            if schedule.name not in first or tick < first[schedule.name][1]:
                first[schedule.name] = (schedule, tick)
        for schedule, tick in first.values():
            if schedule.name not in self._firing and (
                    self._first_node(schedule.name) == self.node.id):
                self._fire(schedule, tick)

    # -- firing -------------------------------------------------------------------------
    def _first_node(self, name: bytes) -> str:
        ids = [self.node.id] + [n.id for n in self.bus.reachable_peers()]
        return key_order(name, ids)[0]

    def _fire(self, schedule: CronSchedule, tick: int) -> None:
        name = schedule.name
        request = AddJob(schedule.queue, schedule.body, FIRE_TIMEOUT_MS, schedule.repl,
                         retry=schedule.retry, dedup=tick_key(schedule.name, tick),
                         priority=schedule.priority, group=schedule.group)
        if schedule.ttl is not None:
            request.ttl = schedule.ttl
        self._firing[name] = tick

        def answer(reply: bytes) -> None:
            del self._firing[name]
            if reply[:1] != b"+":
                log.warning("CRON %s: the job of tick %d was not added: %s",
                            schedule.name.decode(errors="replace"), tick,
                            reply.decode(errors="replace").strip())
                return  # due again at the next cron run
            job_id = reply[1:-2]
            if self.table.fired(name, tick, job_id):
                self.bus.broadcast(m.CRON_FIRED, name, tick, job_id)
                self.changed_here(name)
            current = self.table.get(name)
            if current is not None:  # the next missed tick, if any
                self.fire_due([(current, t) for t in current.pending()[:1]])

        self.dedup.ask(request, answer)  # (alone: no peer to ask, this node's table)

    # -- bus messages -------------------------------------------------------------------
    def _merge(self, data: object) -> None:
        schedule = CronSchedule.from_wire(data)
        if schedule is not None and self.node.merge_schedule(schedule):
            self.changed_here(schedule.name)

    def _on_fired(self, sender: ClusterNode, fields: list[Any]) -> None:
        if len(fields) < 3:
            return
        name, tick, job_id = fields[0], fields[1], fields[2]
        if type(name) is bytes and type(tick) is int and type(job_id) is bytes and (
                self.table.fired(name, tick, job_id)):
            self.changed_here(name)
