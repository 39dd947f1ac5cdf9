"""Retained jobs, disq extensions: REPLAY (a window of a RETAIN queue's acknowledged
jobs added again) and RETAINED (one node's retained jobs, a page at a time: REPLAY's
and Spark's reads). The jobs are kept by retention/store.py; the reads and the adds
are server/replay_service.py."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from disq_client import spec

from ...retention.requests import Replay, Retained, cursor_of
from ...retention.segments import RetainedJob
from .. import reply
from ..later import Later, reply_later
from ..replay_service import ReplayResult
from ..table import PRODUCE, At, Both, OptionValue, command

if TYPE_CHECKING:
    from ..connection import Client
    from ..pending import Pending


@command("replay", -4, "wm",
         acl=PRODUCE,
         syntax='REPLAY queue FROM unix-ms [TO unix-ms] [INTO queue] [WHERE key op value ...]',
         summary=("The retained jobs of a RETAIN queue created in a window, on every "
                  "reachable node, added again as new jobs in creation order; a retried "
                  "REPLAY adds none twice."),
         reply='array of field, value pairs: added, skipped, failed, nodes, unreached',
         options=(spec.REPLAY,), queues=Both(At(1), OptionValue(b"INTO", 2)),
         extension=True)
def replay(client: Client, args: list[bytes]) -> bytes | Pending:
    request = Replay.parse(args)
    later = client.server.replays.replay(client.user, request)
    return reply_later(client, later, encode_result)


def encode_result(result: ReplayResult) -> bytes:
    return reply.encode([item for pair in result.fields() for item in pair])


@command("retained", -4, "rm",
         acl=("read",),
         syntax=('RETAINED queue FROM unix-ms [TO unix-ms] [AFTER cursor] [COUNT n] '
                 '[SHARD i/n] [WHERE key op value ...]'),
         summary=("This node's retained jobs of a queue created in a window, in creation "
                  "order, COUNT at a time; with SHARD i/n, only those whose ID is in shard i "
                  "of n."),
         reply=('array: the cursor of the next page (empty: the last page), then one array '
                'per job: id, queue, body, created unix-ms, acked unix-ms, holders, '
                'attributes'),
         options=(spec.RETAINED,), queues=At(1), extension=True)
def retained(client: Client, args: list[bytes]) -> bytes | Pending:
    request = Retained.parse(args)
    service = client.server.replays
    service.check(request.queue)
    task = asyncio.get_running_loop().create_task(service.retained(request))
    later: Later[bytes] = Later()
    task.add_done_callback(lambda t: later.resolve(
        encode_page(*t.result()) if not t.cancelled() and t.exception() is None
        else reply.error("ERR reading the retained jobs failed")))
    return reply_later(client, later, lambda data: data)


def encode_page(jobs: list[RetainedJob], more: bool) -> bytes:
    cursor = cursor_of(jobs[-1].key()) if more and jobs else b""
    return reply.encode([cursor, [[job.id, job.queue, job.body, job.ms, job.acked,
                                   [n.encode() for n in job.nodes], job.attrs]
                                  for job in jobs]])
