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
  of that key in another queue is another key), and CRON_FIRED tells every node the
  tick is done.
- Only on a majority side: a node fires nothing unless it reaches more than half of
  the known nodes (itself included, as its failure detector sees them), and the tick's
  job is replicated to a majority of the known nodes (`tick_replication`). A node
  whose view is stale (cut off, its peers not flagged yet) cannot get those copies
  confirmed: its ADDJOB fails and adds nothing. Two ADDJOBs of one tick each reach a
  majority, so they share a node, which refuses the second copy of the key (the
  copies check it: dedup_checks.py): one job per tick, even from two firers. A node that
  regains a majority fires no tick from before (`CronTable.skip_until`): the
  majority side fired it, or no side could and it is skipped, never fired late.
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
from ..errors import DisqError
from ..node import Node, now_ms
from ..outcomes import Added
from ..requests import DEFAULT_TTL, AddJob
from ..schedules import CronSchedule
from .tables import OnHeld, SyncedTable
from .targets import first_reachable, majority_replication

if TYPE_CHECKING:
    from .dedup_checks import Dedup

log = logging.getLogger("disq")

FIRE_TIMEOUT_MS: Final = 5000  # the tick's ADDJOB waits this long for its copies
FAILURE_LOG_EVERY_MS: Final = 10_000  # a schedule's failing ticks: a log line this often


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
        self._without_majority = False  # this node saw no majority, and none since
        # name -> [ms of the last log line of a failed tick, failures since]
        self._failures: dict[bytes, list[int]] = {}
        self.sync = SyncedTable(bus, m.CRON_SET, m.CRON_SYNC, m.CRON_HELD,
                                lambda: self.table.schedules.values(), self._merge)
        # The server persists what changed (the AOF when on, and nodes.conf).
        self.on_change: Callable[[CronSchedule], None] = lambda schedule: None
        node.wakeups.on_schedules_due = self.fire_due
        bus.on(m.CRON_FIRED, self._on_fired)

    # -- the node's side ----------------------------------------------------------------
    def changed(self, schedule: CronSchedule, on_held: OnHeld | None = None) -> None:
        """A schedule was defined or deleted here (CRON ADD / DEL): tell every node
        (`on_held` once every reachable one holds it: tables.py)."""
        self.sync.changed(schedule.to_wire(), on_held)
        self.changed_here(schedule.name)

    def changed_here(self, name: bytes) -> None:
        """The schedule `name` changed here (a definition, a deletion, a fired tick):
        persist it."""
        schedule = self.table.schedules.get(name)
        if schedule is not None:
            if schedule.deleted:
                self._failures.pop(name, None)
            self.on_change(schedule)

    def cron(self, now: int) -> None:
        """Every cron run: fire what no node fired (its firer may have died), and
        send the table to a random peer now and then."""
        if self._reached() * 2 > self.bus.cluster_size:
            self.fire_due(self.table.overdue())
        self.sync.cron(now)

    def _reached(self) -> int:
        """The nodes this node reaches, itself included; on a loss of the majority, the
        ticks until it is back are left to the majority side (or skipped)."""
        reached = 1 + len(self.bus.reachable_peers())
        if reached * 2 > self.bus.cluster_size:
            if self._without_majority:
                self._without_majority = False
                self.table.skip_until = now_ms()
                log.info("CRON: a majority of the nodes is reachable again: the ticks "
                         "missed meanwhile are not fired here")
        elif not self._without_majority:
            self._without_majority = True
            if len(self.table):
                log.warning("CRON: no majority of the nodes reachable (%d of %d): no "
                            "tick fires here until there is", reached,
                            self.bus.cluster_size)
        return reached

    def tick_replication(self, schedule: CronSchedule) -> int:
        """The copies a tick of `schedule` fired here now gets, 0 if none fires here (no
        majority reachable): its REPLICATE (the default when none: 3, or every node if
        fewer), raised to a majority of the known nodes and lowered to the nodes
        reachable. At-most-once schedules (REPLICATE 1 RETRY 0) keep 1 copy."""
        repl = majority_replication(schedule.repl, self.bus.cluster_size, self._reached())
        if repl and schedule.repl == 1 and schedule.retry == 0:
            return 1
        return repl

    def fire_due(self, due: list[tuple[CronSchedule, int]]) -> None:
        """Fire the oldest due tick of each schedule this node fires (the others follow
        one by one as each one's job is added: `_fire`'s answer)."""
        if due and self._reached() * 2 <= self.bus.cluster_size:
            return
        first: dict[bytes, tuple[CronSchedule, int]] = {}
        for schedule, tick in due:
            if tick <= self.table.skip_until:
                continue
            if schedule.name not in first or tick < first[schedule.name][1]:
                first[schedule.name] = (schedule, tick)
        for schedule, tick in first.values():
            if schedule.name not in self._firing and (
                    first_reachable(schedule.name, self.node.id, self.bus) == self.node.id):
                self._fire(schedule, tick)

    # -- firing -------------------------------------------------------------------------
    def _fire(self, schedule: CronSchedule, tick: int) -> None:
        name = schedule.name
        repl = self.tick_replication(schedule)
        if not repl:
            return
        request = AddJob(schedule.queue, schedule.body, FIRE_TIMEOUT_MS, repl,
                         retry=schedule.retry, dedup=tick_key(schedule.name, tick),
                         priority=schedule.priority, group=schedule.group)
        # (set here: the other nodes keep the tick's key reservation for the job's TTL)
        request.ttl = schedule.ttl if schedule.ttl is not None else DEFAULT_TTL
        self._firing[name] = tick

        def answer(outcome: Added) -> None:
            del self._firing[name]
            if isinstance(outcome, DisqError):
                self._failed(schedule, tick, outcome)
                return  # due again at the next cron run
            self._failures.pop(name, None)
            job_id = outcome
            if self.table.fired(name, tick, job_id):
                self.bus.broadcast(m.CRON_FIRED, name, tick, job_id)
                self.changed_here(name)
            current = self.table.get(name)
            if current is not None:  # the next missed tick, if any
                self.fire_due([(current, t)
                               for t in current.pending(self.table.skip_until)[:1]])

        self.dedup.ask(request, answer)  # (alone: no peer to ask, this node's table)

    def _failed(self, schedule: CronSchedule, tick: int, error: DisqError) -> None:
        """A tick's ADDJOB failed (tried again at each cron run): logged once, then
        every FAILURE_LOG_EVERY_MS with the count of failures since."""
        now = now_ms()
        failures = self._failures.get(schedule.name)
        if failures is not None and now < failures[0] + FAILURE_LOG_EVERY_MS:
            failures[1] += 1
            return
        since = f" ({failures[1]} more failures since)" if failures and failures[1] else ""
        self._failures[schedule.name] = [now, 0]
        log.warning("CRON %s: the job of tick %d was not added: %s%s",
                    schedule.name.decode(errors="replace"), tick,
                    f"-{error.code} {error.message}", since)

    # -- bus messages -------------------------------------------------------------------
    def _merge(self, data: object) -> None:
        schedule = CronSchedule.from_wire(data)
        if schedule is not None and self.node.wakeups.merge_schedule(schedule):
            self.changed_here(schedule.name)

    def _on_fired(self, sender: ClusterNode, fields: list[Any]) -> None:
        if len(fields) < 3:
            return
        name, tick, job_id = fields[0], fields[1], fields[2]
        if type(name) is bytes and type(tick) is int and type(job_id) is bytes and (
                self.table.fired(name, tick, job_id)):
            self.changed_here(name)
