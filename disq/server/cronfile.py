"""CRON's schedules on disk: `<cluster-config-file>.cron` beside nodes.conf, written
whole (a temporary file renamed over it) at most once a second after a change, read
at start-up. A small file: a schedule is a few hundred bytes."""

from __future__ import annotations

import logging
import os

import msgpack

from ..node import Node, now_ms
from ..schedules import CronSchedule, CronTable

log = logging.getLogger("disq")

SAVE_PERIOD_MS = 1000


class ScheduleFile:
    def __init__(self, path: str, node: Node) -> None:
        self.path = path
        self.node = node
        self.dirty = False
        self._saved_at = 0

    def load(self) -> int:
        """The schedules of the last run (missed ticks fire once: CronTable.load)."""
        try:
            with open(self.path, "rb") as fh:
                data = msgpack.unpackb(fh.read(), raw=False)
        except FileNotFoundError:
            return 0
        except (OSError, ValueError, msgpack.UnpackException) as exc:
            log.warning("Can't read the CRON schedules in %s: %s", self.path, exc)
            return 0
        count = 0
        now = now_ms()
        for item in data if type(data) is list else []:
            schedule = CronSchedule.from_wire(item)
            if schedule is not None:
                self.node.schedules.load(schedule, now)
                count += 1
        return count

    def changed(self) -> None:
        self.dirty = True

    def cron(self, now: int) -> None:
        if self.dirty and now - self._saved_at >= SAVE_PERIOD_MS:
            self.save(now)

    def save(self, now: int) -> None:
        table: CronTable = self.node.schedules
        data = msgpack.packb([s.to_wire() for s in table.schedules.values()])
        tmp = f"{self.path}.tmp-{os.getpid()}"
        try:
            with open(tmp, "wb") as fh:
                fh.write(data)
            os.replace(tmp, self.path)
        except OSError as exc:
            log.warning("Can't save the CRON schedules in %s: %s", self.path, exc)
            return
        self.dirty = False
        self._saved_at = now
