"""The recurring jobs' operations every front end runs (`Server.schedules_service`):
CRON ADD, DEL and LIST, typed arguments in, typed results out. A RESP handler is
parse -> service -> encode (commands/cron.py); an HTTP route is service -> JSON
(http/api_admin.py). The schedules are `node.schedules` (disq/schedules.py); telling
the other nodes and firing the ticks is `replication.recurring`
(disq/replication/schedules.py), reached only from here.

A change answers once every reachable node holds it (its first tick then fires on time
whichever node fires it): a `Later` of the nodes that did not confirm (later.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .. import errors
from ..node import now_ms
from ..schedules import CronSchedule, check_spec, parse_zone
from .guard import check_queue, user_may_see
from .later import Later

if TYPE_CHECKING:
    from ..acl import User
    from ..node import Node
    from ..queue_requests import CronAdd
    from .app import Server

# A field of CRON LIST's entry: text, a number, or none.
ScheduleField = bytes | int | None


def schedule_fields(schedule: CronSchedule, tick_replicate: int, now: int
                    ) -> list[tuple[bytes, ScheduleField]]:
    """A schedule as CRON LIST shows it: name, queue, spec, tz, next-fire-in (ms),
    last-fire (Unix ms, or None), last-job (or None), replicate (the REPLICATE given,
    or None), tick-replicate (the copies a tick fired now gets, 0: no majority
    reachable, no tick fires here)."""
    s = schedule
    return [
        (b"name", s.name), (b"queue", s.queue), (b"spec", s.spec.encode()),
        (b"tz", (s.tz or "UTC").encode()),
        (b"next-fire-in", max(s.following - now, 0)),
        (b"last-fire", s.last_fire or None),
        (b"last-job", s.last_job or None),
        (b"replicate", s.repl),
        (b"tick-replicate", tick_replicate),
    ]


class ScheduleService:
    """The schedules of one node."""

    __slots__ = ("server", "node")

    def __init__(self, server: Server) -> None:
        self.server = server
        self.node: Node = server.node

    def add(self, user: User, request: CronAdd) -> Later[list[str]]:
        """CRON ADD: the schedule defined (or replaced: `user` must be allowed the
        queue of the one it replaces too)."""
        try:
            spec = request.spec.decode()
            tz = request.tz.decode()
        except UnicodeDecodeError:
            raise errors.err("CRON spec and TZ must be text") from None
        check_spec(spec, parse_zone(tz))
        node = self.node
        if len(request.body) > node.config.job_max_body:  # its ticks' ADDJOBs would fail
            raise errors.body_too_big(len(request.body), node.config.job_max_body)
        now = now_ms()
        old = node.schedules.schedules.get(request.name)
        if old is not None and not old.deleted:
            check_queue(self.server.acl, user, old.queue)
        version = now if old is None or now > old.version else old.version + 1
        schedule = CronSchedule(request.name, request.queue, spec, request.body,
                                repl=request.repl, retry=request.retry, ttl=request.ttl,
                                priority=request.priority, group=request.group, tz=tz,
                                version=version, origin=node.id)
        node.wakeups.merge_schedule(schedule)
        return self._changed(schedule)

    def delete(self, user: User, name: bytes) -> Later[list[str]] | None:
        """CRON DEL: None if there is no such schedule, else as `add`."""
        node = self.node
        old = node.schedules.get(name)
        if old is None:
            return None
        check_queue(self.server.acl, user, old.queue)
        now = now_ms()
        tombstone = CronSchedule(name, old.queue, old.spec, b"", tz=old.tz,
                                 version=max(now, old.version + 1), origin=node.id,
                                 deleted=True)
        node.wakeups.merge_schedule(tombstone)
        return self._changed(tombstone)

    def _changed(self, schedule: CronSchedule) -> Later[list[str]]:
        replication = self.server.replication
        if replication is None:
            return Later.now([])
        return Later.of(lambda held: replication.recurring.changed(schedule, held))

    def listed(self, user: User) -> list[tuple[CronSchedule, int]]:
        """CRON LIST: the live schedules of the queues `user` may see, each with the
        copies a tick fired now gets (`schedule_fields`)."""
        replication = self.server.replication
        return [(s, replication.recurring.tick_replication(s) if replication is not None
                 else s.repl or 1)
                for s in self.node.schedules.live() if user_may_see(user, s.queue)]
