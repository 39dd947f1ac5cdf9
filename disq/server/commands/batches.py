"""Batches, a disq extension: BATCH NEW / CLOSE / STATUS / LIST. The table is `node.batches`
(disq/batches.py); the operations are the batch service's (batch_service.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from disq_client import spec

from ... import errors
from ...end_requests import BatchList, BatchNew, check_bid
from ...errors import DisqError
from .. import reply
from ..later import reply_held, reply_later
from ..table import PRODUCE, Both, OptionValue, Subcommand, command

if TYPE_CHECKING:
    from ..connection import Client
    from ..pending import Pending

_ONE_BATCH = (b"new", b"close", b"status")  # the subcommands naming one batch


@command("batch", -2, "wm",
         acl=PRODUCE,
         syntax=('BATCH NEW bid [ONDONE queue body] [ONSUCCESS queue body] [TTL s] | '
                 'BATCH CLOSE bid | BATCH STATUS bid | BATCH LIST [STATE open|closed|done]'),
         summary=('Batches: jobs added with ADDJOB ... BATCH bid; once the batch is closed and '
                  'every member ended, its callback job is added once in the cluster.'),
         reply=('NEW: status OK; CLOSE: integer, the members counted; STATUS: array of '
                'field / value pairs; LIST: array of such arrays, the newest '
                f'{spec.MAX_BATCHES_LISTED} batches (by creation) the user may read'),
         options=(spec.BATCH_NEW, spec.BATCH_LIST),
         queues=Subcommand({b"new": Both(OptionValue(b"ondone", 3),
                                         OptionValue(b"onsuccess", 3))}),
         extension=True)
def batch(client: Client, args: list[bytes]) -> bytes | Pending:
    """BATCH NEW bid [ONDONE queue body] [ONSUCCESS queue body] [TTL s] | BATCH CLOSE
    bid | BATCH STATUS bid | BATCH LIST [STATE open|closed|done]"""
    sub = args[1].lower()
    service = client.server.batch_service
    if sub in _ONE_BATCH and (len(args) != 3 if sub != b"new" else len(args) < 3):
        raise errors.err(f"wrong number of arguments for 'batch {sub.decode()}'")
    if sub == b"new":
        return reply_held(client, service.new(client.user, BatchNew.parse(args)), reply.OK)
    if sub == b"list":
        batches, _ = service.listed(client.user, BatchList.parse(args))
        return reply.encode([[item for pair in service.fields(batch) for item in pair]
                             for batch in batches])
    if sub == b"close":
        closed = service.close(client.user, check_bid(args[2]))
        return reply_later(client, closed, _closed_reply)
    if sub == b"status":
        fields = service.status(client.user, check_bid(args[2]))
        return reply.encode([item for pair in fields for item in pair])
    raise errors.err("unknown BATCH subcommand, try NEW, CLOSE, STATUS or LIST")


def _closed_reply(outcome: int | DisqError) -> bytes:
    if isinstance(outcome, DisqError):
        return outcome.reply()
    return reply.integer(outcome)
