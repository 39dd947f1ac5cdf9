"""CRON's schedules in the cluster config file (nodes.conf), for a node without the
AOF: a `cron` record per schedule after the node lines (disq/cluster/nodes.py), each
the schedule's msgpack (the CRON_SYNC form). Read at start-up; written with the nodes
(Membership.save) at most once a second after a change, and at shutdown. A new or
changed definition is fsynced; a fired tick only moves `last_fire`, and is written
without an fsync (a process kill keeps it, the page cache has it): at most a
second's fired ticks are unknown to a machine that lost power, the catch-up rule
(CronTable.load) fires the newest missed tick once."""

from __future__ import annotations

import logging

import msgpack

from ..cluster.membership import Membership
from ..cluster.nodes import read_records
from ..node import Node, now_ms
from ..schedules import CronSchedule

log = logging.getLogger("disq")

SAVE_PERIOD_MS = 1000
RECORD_KIND = "cron"


class ScheduleFile:
    def __init__(self, membership: Membership, node: Node) -> None:
        self.membership = membership
        self.node = node
        self.dirty = False
        self._fsync = False  # a definition changed since the last save
        self._saved_at = 0
        # version of each schedule as last saved: a change of version is a definition
        self._versions: dict[bytes, tuple[int, bool]] = {}
        membership.records = self._records

    def load(self) -> int:
        """The schedules of the last run (missed ticks fire once: CronTable.load)."""
        path = self.membership.config_path
        try:
            payloads = read_records(path).get(RECORD_KIND, [])
        except (OSError, UnicodeDecodeError) as exc:
            log.warning("Can't read the CRON schedules in %s: %s", path, exc)
            return 0
        count = 0
        now = now_ms()
        for payload in payloads:
            try:
                item = msgpack.unpackb(payload, raw=False)
            except (ValueError, msgpack.UnpackException):
                item = None
            schedule = CronSchedule.from_wire(item)
            if schedule is None:
                log.warning("Skipping a CRON schedule of %s that does not decode", path)
                continue
            self.node.load_schedule(schedule, now)
            self._versions[schedule.name] = (schedule.version, schedule.deleted)
            count += 1
        return count

    def changed(self, schedule: CronSchedule) -> None:
        self.dirty = True
        if self._versions.get(schedule.name) != (schedule.version, schedule.deleted):
            self._fsync = True

    def cron(self, now: int) -> None:
        if self.dirty and now - self._saved_at >= SAVE_PERIOD_MS:
            self.save(now)

    def save(self, now: int, fsync: bool | None = None) -> None:
        try:
            self.membership.save(fsync=self._fsync if fsync is None else fsync)
        except OSError as exc:
            log.warning("Can't save the CRON schedules in %s: %s",
                        self.membership.config_path, exc)
            return
        self.dirty = self._fsync = False
        self._saved_at = now

    def _records(self) -> list[tuple[str, bytes]]:
        """What Membership.save writes after the nodes (on any save of nodes.conf)."""
        schedules = self.node.schedules.schedules.values()
        self._versions = {s.name: (s.version, s.deleted) for s in schedules}
        return [(RECORD_KIND, msgpack.packb(s.to_wire())) for s in schedules]
