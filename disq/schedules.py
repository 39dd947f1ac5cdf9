"""Recurring jobs (CRON ADD / DEL / LIST, a disq extension): the schedules a node knows
and when each one is due. Sans-IO: the node asks `due(now)` from its timer pass; who
adds the tick's job, and how the table reaches every node, is replication/schedules.py.

A schedule's `spec` is cron syntax: five fields (minute hour day-of-month month
day-of-week) or six, seconds first (as Quartz, Spring, BullMQ and node-cron read
them); parsed and iterated by croniter, which
handles ranges, steps, names, `@hourly`-style aliases and the time zone's daylight
saving changes (a maintained library for what is easy to get subtly wrong).

Ticks are Unix milliseconds. `last_fire` is the newest tick some node fired: the ticks
after it are due. A node taking over from one that died fires every tick that one
missed (up to MAX_CATCHUP); a schedule loaded from disk has a `floor`, the newest tick
at load time, below which nothing is fired: a tick missed while every node was down
fires once on recovery, not once per missed tick. Every node holds every schedule; changes are ordered by
`version` (ms, node ID): the newest wins, a deletion is a version too (a tombstone,
kept a while so an old copy cannot bring the schedule back).

Before SPEC_FORMAT 2, a sixth field was the seconds *last* (croniter's default). A
schedule's wire form (the AOF's CRONSET, nodes.conf's `cron` lines, CRON_SET and
CRON_SYNC) carries its format since; one without it is an older node's or file's, and
its six-field spec is turned seconds first on reading (`from_wire`): it keeps its
meaning. `on_spec_converted` is told (the server logs the first one).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from datetime import UTC, datetime, tzinfo
from typing import Any

from . import errors
from .errors import DisqError

NAME_MAX_LEN = 256
MAX_CATCHUP = 100  # missed ticks of one schedule fired at once, the newest ones
TOMBSTONE_MS = 24 * 3600 * 1000  # a deleted schedule is remembered this long
UTC = UTC
SPEC_FORMAT = 2  # six fields: seconds first (1, or none in the wire form: seconds last)



def ignore_conversion(name: bytes, stored: str, spec: str) -> None:
    """The default `on_spec_converted`: nothing."""


# (name, spec as stored, spec now): a schedule stored seconds last was converted
on_spec_converted: Callable[[bytes, str, str], None] = ignore_conversion


def _croniter(spec: str, start: datetime) -> Any:
    """croniter over `spec` from `start`. croniter (and dateutil under it: ~20 ms) and
    zoneinfo are imported with the first schedule, not at every node's start."""
    from croniter import croniter

    return croniter(spec, start, second_at_beginning=True)


def seconds_first(spec: str) -> str:
    """A spec stored before SPEC_FORMAT 2, read as it was meant: six fields with the
    seconds last become the same six with the seconds first (five, an @alias: as is)."""
    fields = spec.split()
    if len(fields) != 6:
        return spec
    return " ".join([fields[5], *fields[:5]])


def parse_zone(name: str | None) -> tzinfo:
    if not name:
        return UTC
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise errors.err(f"unknown time zone '{name}'") from None


def check_spec(spec: str, zone: tzinfo) -> None:
    """-ERR unless `spec` is 5 or 6 cron fields (or an @alias) croniter can iterate."""
    fields = spec.split()
    if not (len(fields) in (5, 6) or (len(fields) == 1 and spec.startswith("@"))):
        raise errors.err(f"invalid cron spec '{spec}': 5 fields, or 6 with seconds first")
    from croniter.croniter import CroniterError

    try:
        _croniter(spec, datetime.now(zone)).get_next(float)
    except (CroniterError, ValueError, KeyError, TypeError, OverflowError) as exc:
        raise errors.err(f"invalid cron spec '{spec}': {exc}") from None


class CronSchedule:
    """One recurring job: what each tick adds (queue, body and ADDJOB's options) and
    its state (the newest fired tick and its job, the version of its definition)."""

    __slots__ = ("name", "queue", "spec", "body", "repl", "retry", "ttl", "priority",
                 "group", "tz", "version", "origin", "deleted", "last_fire", "last_job",
                 "tick", "following", "floor", "_zone")

    def __init__(self, name: bytes, queue: bytes, spec: str, body: bytes, *,
                 repl: int | None = None, retry: int | None = None, ttl: int | None = None,
                 priority: int | None = None, group: bytes | None = None,
                 tz: str = "", version: int = 0, origin: str = "",
                 deleted: bool = False, last_fire: int = 0, last_job: bytes = b"") -> None:
        self.name = name
        self.queue = queue
        self.spec = spec
        self.body = body
        self.repl = repl
        self.retry = retry
        self.ttl = ttl
        self.priority = priority
        self.group = group
        self.tz = tz
        self.version = version  # ms of the change, with `origin` (a node ID) as tiebreak
        self.origin = origin
        self.deleted = deleted
        self.last_fire = last_fire  # the newest tick fired (Unix ms), 0: none yet
        self.last_job = last_job
        self.tick = 0  # the newest tick <= the last `advance` time
        self.following = 0  # the tick after it
        self.floor = 0  # ticks at or before this are not fired (see the module's doc)
        self._zone: tzinfo | None = None

    @property
    def zone(self) -> tzinfo:
        if self._zone is None:
            self._zone = parse_zone(self.tz)
        return self._zone

    def newer_than(self, other: CronSchedule) -> bool:
        return (self.version, self.origin) > (other.version, other.origin)

    def advance(self, now: int) -> None:
        """Set `tick` (the newest tick at or before `now`) and `following`."""
        start = datetime.fromtimestamp(now / 1000, self.zone)
        it = _croniter(self.spec, start)
        following = int(round(it.get_next(float) * 1000))
        it = _croniter(self.spec, datetime.fromtimestamp(following / 1000, self.zone))
        tick = int(round(it.get_prev(float) * 1000))
        self.tick = tick if tick <= now else 0
        self.following = following

    def pending(self, after: int = 0) -> list[int]:
        """The ticks after `last_fire`, `floor`, the definition (`version`) and `after`
        up to `tick`, oldest first (at most MAX_CATCHUP, the newest)."""
        since = max(self.last_fire, self.floor, self.version, after)
        if self.tick <= since:
            return []
        ticks = [self.tick]
        it = _croniter(self.spec, datetime.fromtimestamp(self.tick / 1000, self.zone))
        while len(ticks) < MAX_CATCHUP:
            earlier = int(round(it.get_prev(float) * 1000))
            if earlier <= since:
                break
            ticks.append(earlier)
        ticks.reverse()
        return ticks

    def to_wire(self) -> list[Any]:
        return [self.name, self.queue, self.spec, self.body, self.repl, self.retry,
                self.ttl, self.priority, self.group, self.tz, self.version, self.origin,
                self.deleted, self.last_fire, self.last_job, SPEC_FORMAT]

    @classmethod
    def from_wire(cls, data: object) -> CronSchedule | None:
        """A schedule from `to_wire`'s list, or None if anything is off (a peer's
        message or a file: trusted no more than any input). Without its format (an
        older node's or file's), a six-field spec is turned seconds first."""
        if type(data) is not list or len(data) not in (15, 16):
            return None
        spec_format = data[15] if len(data) == 16 else 1
        if type(spec_format) is not int or spec_format not in (1, SPEC_FORMAT):
            return None
        (name, queue, spec, body, repl, retry, ttl, priority, group, tz, version, origin,
         deleted, last_fire, last_job) = data[:15]
        if not (type(name) is bytes and 0 < len(name) <= NAME_MAX_LEN
                and type(queue) is bytes and queue and type(spec) is str
                and type(body) is bytes and type(tz) is str and type(origin) is str
                and type(version) is int and type(deleted) is bool
                and type(last_fire) is int and type(last_job) is bytes
                and all(v is None or type(v) is int for v in (repl, retry, ttl, priority))
                and (group is None or type(group) is bytes)):
            return None
        if spec_format == 1:
            stored, spec = spec, seconds_first(spec)
            if spec != stored:
                on_spec_converted(name, stored, spec)
        schedule = cls(name, queue, spec, body, repl=repl, retry=retry, ttl=ttl,
                       priority=priority, group=group, tz=tz, version=version,
                       origin=origin, deleted=deleted, last_fire=last_fire,
                       last_job=last_job)
        if not deleted:
            try:
                check_spec(spec, schedule.zone)
            except DisqError:
                return None
        return schedule


class CronTable:
    """Every schedule this node knows (tombstones included), and a heap of the next
    tick of each live one: `due(now)` costs nothing until the earliest comes."""

    def __init__(self) -> None:
        self.schedules: dict[bytes, CronSchedule] = {}
        # Ticks at or before this are not fired here: they came while this node saw no
        # majority (the majority side fired them, or no side could: skipped).
        self.skip_until = 0
        self._heap: list[tuple[int, bytes]] = []  # (following, name); stale ones skipped

    def __len__(self) -> int:
        return sum(1 for s in self.schedules.values() if not s.deleted)

    def live(self) -> list[CronSchedule]:
        return sorted((s for s in self.schedules.values() if not s.deleted),
                      key=lambda s: s.name)

    def get(self, name: bytes) -> CronSchedule | None:
        schedule = self.schedules.get(name)
        return None if schedule is None or schedule.deleted else schedule

    def load(self, schedule: CronSchedule, now: int) -> None:
        """A schedule read from disk at start-up: the ticks missed while the node was
        down fire once (the newest), not once each."""
        if self.merge(schedule, now) and not schedule.deleted:
            schedule.floor = schedule.tick - 1  # the newest tick still fires, if missed

    def merge(self, schedule: CronSchedule, now: int) -> bool:
        """Take `schedule` if it is newer than what this node has (or keep what it
        fired: the newest `last_fire` of the two wins either way). True if the table
        changed."""
        mine = self.schedules.get(schedule.name)
        if mine is not None and not schedule.newer_than(mine):
            if schedule.last_fire > mine.last_fire and schedule.version == mine.version:
                mine.last_fire, mine.last_job = schedule.last_fire, schedule.last_job
                return True
            return False
        if mine is not None and mine.last_fire > schedule.last_fire and (
                mine.spec == schedule.spec and mine.tz == schedule.tz):
            schedule.last_fire, schedule.last_job = mine.last_fire, mine.last_job
        self.schedules[schedule.name] = schedule
        if not schedule.deleted:
            schedule.advance(now)
            heapq.heappush(self._heap, (schedule.following, schedule.name))
        return True

    def fired(self, name: bytes, tick: int, job_id: bytes) -> bool:
        """Some node fired `tick` of `name` (here, or a peer said so)."""
        schedule = self.get(name)
        if schedule is None or tick <= schedule.last_fire:
            return False
        schedule.last_fire, schedule.last_job = tick, job_id
        return True

    def due(self, now: int) -> list[tuple[CronSchedule, int]]:
        """The ticks to fire of the schedules whose next tick came (the heap's): the
        ones no node fired yet (`CronSchedule.pending`). Until the earliest next tick
        nothing is computed: the timer pass calls this often."""
        heap = self._heap
        out: list[tuple[CronSchedule, int]] = []
        while heap and heap[0][0] <= now:
            _, name = heapq.heappop(heap)
            schedule = self.get(name)
            if schedule is None or schedule.following > now:
                continue  # deleted, or a stale entry (redefined since)
            schedule.advance(now)
            heapq.heappush(heap, (schedule.following, name))
            out.extend((schedule, tick) for tick in schedule.pending(self.skip_until))
        return out

    def overdue(self) -> list[tuple[CronSchedule, int]]:
        """The ticks of every live schedule still not fired (the node that should have
        fired them may have died): the periodic check of every node."""
        return [(s, tick) for s in self.schedules.values()
                if not s.deleted
                and s.tick > max(s.last_fire, s.floor, s.version, self.skip_until)
                for tick in s.pending(self.skip_until)]

    def next_deadline(self) -> int | None:
        return self._heap[0][0] if self._heap else None

    def sweep(self, now: int) -> None:
        """Forget the tombstones older than TOMBSTONE_MS."""
        old = [n for n, s in self.schedules.items()
               if s.deleted and s.version < now - TOMBSTONE_MS]
        for name in old:
            del self.schedules[name]
