"""Recurring jobs, a disq extension: CRON ADD / DEL / LIST. The schedules are
`node.schedules` (disq/schedules.py); telling the other nodes and firing the ticks is
`replication.recurring` (disq/replication/schedules.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from disq_client import spec

from ... import errors
from ...node import now_ms
from ...queue_requests import CronAdd
from ...replication.tables import held_reply
from ...schedules import CronSchedule, check_spec, parse_zone
from .. import reply
from ..guard import check_queue, may_see
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
    try:
        spec = request.spec.decode()
        tz = request.tz.decode()
    except UnicodeDecodeError:
        raise errors.err("CRON spec and TZ must be text") from None
    check_spec(spec, parse_zone(tz))
    node = client.node
    if len(request.body) > node.config.job_max_body:  # its ticks' ADDJOBs would fail
        raise errors.body_too_big(len(request.body), node.config.job_max_body)
    now = now_ms()
    old = node.schedules.schedules.get(request.name)
    if old is not None and not old.deleted:
        check_queue(client, old.queue)  # (replacing a schedule of another queue)
    version = now if old is None or now > old.version else old.version + 1
    schedule = CronSchedule(request.name, request.queue, spec, request.body,
                            repl=request.repl, retry=request.retry, ttl=request.ttl,
                            priority=request.priority, group=request.group, tz=tz,
                            version=version, origin=node.id)
    node.merge_schedule(schedule)
    return _changed(client, schedule, reply.OK)


def _delete(client: Client, name: bytes) -> bytes | Pending:
    node = client.node
    old = node.schedules.get(name)
    if old is None:
        return reply.integer(0)
    check_queue(client, old.queue)
    now = now_ms()
    tombstone = CronSchedule(name, old.queue, old.spec, b"", tz=old.tz,
                             version=max(now, old.version + 1), origin=node.id,
                             deleted=True)
    node.merge_schedule(tombstone)
    return _changed(client, tombstone, reply.integer(1))


def _changed(client: Client, schedule: CronSchedule, done: bytes) -> bytes | Pending:
    """Tell every node; answer `done` once every reachable one holds the change (its
    first tick then fires on time whichever node fires it), else -NOREPL."""
    replication = client.server.replication
    if replication is None:
        return done
    pending = client.pending()
    replication.recurring.changed(
        schedule, lambda missing: pending.answer(held_reply(missing, done)))
    return pending


def _list(client: Client) -> bytes:
    """One entry per schedule, field / value pairs: name, queue, spec, tz,
    next-fire-in (ms), last-fire (Unix ms, or nil), last-job (or nil), replicate (the
    REPLICATE given, or nil), tick-replicate (the copies a tick fired now gets, 0: no
    majority reachable, no tick fires here)."""
    now = now_ms()
    replication = client.server.replication
    entries = []
    for s in client.node.schedules.live():
        if not may_see(client, s.queue):
            continue
        tick_repl = (replication.recurring.tick_replication(s) if replication is not None
                     else s.repl or 1)
        entries.append(b"*18\r\n" + b"".join((
            reply.bulk(b"name"), reply.bulk(s.name),
            reply.bulk(b"queue"), reply.bulk(s.queue),
            reply.bulk(b"spec"), reply.bulk(s.spec.encode()),
            reply.bulk(b"tz"), reply.bulk((s.tz or "UTC").encode()),
            reply.bulk(b"next-fire-in"), reply.integer(max(s.following - now, 0)),
            reply.bulk(b"last-fire"),
            reply.integer(s.last_fire) if s.last_fire else reply.NULL_BULK,
            reply.bulk(b"last-job"), reply.bulk(s.last_job) if s.last_job else reply.NULL_BULK,
            reply.bulk(b"replicate"),
            reply.integer(s.repl) if s.repl is not None else reply.NULL_BULK,
            reply.bulk(b"tick-replicate"), reply.integer(tick_repl),
        )))
    return reply.array(entries)
