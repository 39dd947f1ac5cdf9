"""Recurring jobs, a disq extension: CRON ADD / DEL / LIST. The schedules are
`node.schedules` (disq/schedules.py); the operations are the schedule service's
(cron_service.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from disq_client import spec

from ... import errors
from ...node import now_ms
from ...queue_requests import CronAdd
from .. import reply
from ..cron_service import schedule_fields
from ..later import reply_held
from ..table import PRODUCE, At, Subcommand, command

if TYPE_CHECKING:
    from ..connection import Client
    from ..pending import Pending


@command("cron", -2, "wm",
         acl=PRODUCE,
         syntax=('CRON ADD name queue spec body [REPLICATE n] [RETRY s] [TTL s] [PRIORITY p] '
                 '[GROUP g] [TZ zone] | CRON DEL name | CRON LIST'),
         summary=('Recurring jobs: a schedule kept by every node, fired once per tick by a node '
                  'that reaches a majority.'),
         reply='ADD, DEL: status OK or integer; LIST: array of schedules',
         options=(spec.CRON_ADD,), queues=Subcommand({b"add": At(3)}), extension=True)
def cron(client: Client, args: list[bytes]) -> bytes | Pending:
    """CRON ADD name queue spec body [REPLICATE n] [RETRY s] [TTL s] [PRIORITY p]
    [GROUP g] [TZ zone] | CRON DEL name | CRON LIST"""
    sub = args[1].lower()
    if sub == b"add":
        return _add(client, CronAdd.parse(args))
    if sub == b"del" and len(args) == 3:
        return _delete(client, args[2])
    if sub == b"list" and len(args) == 2:
        return _list(client)
    if sub in (b"add", b"del", b"list"):
        raise errors.err(f"wrong number of arguments for 'cron {sub.decode()}'")
    raise errors.err("unknown CRON subcommand, try ADD, DEL or LIST")


def _add(client: Client, request: CronAdd) -> bytes | Pending:
    held = client.server.schedules_service.add(client.user, request)
    return reply_held(client, held, reply.OK)


def _delete(client: Client, name: bytes) -> bytes | Pending:
    held = client.server.schedules_service.delete(client.user, name)
    if held is None:
        return reply.integer(0)
    return reply_held(client, held, reply.integer(1))


def _list(client: Client) -> bytes:
    """One entry per schedule, field / value pairs (`schedule_fields`)."""
    now = now_ms()
    return reply.array([
        reply.encode([item for pair in schedule_fields(schedule, tick_replicate, now)
                      for item in pair])
        for schedule, tick_replicate in client.server.schedules_service.listed(client.user)])
