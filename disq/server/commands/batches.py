"""Batches, a disq extension: BATCH NEW / CLOSE / STATUS. The table is `node.batches`
(disq/batches.py); the operations are the batch service's (batch_service.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from disq_client import spec

from ... import errors
from ...end_requests import BatchNew, check_bid
from ...errors import DisqError
from .. import reply
from ..later import reply_held, reply_later
from ..table import PRODUCE, OptionValue, Subcommand, command

if TYPE_CHECKING:
    from ..connection import Client
    from ..pending import Pending

_SUBCOMMANDS = (b"new", b"close", b"status")


@command("batch", -3, "wm",
         acl=PRODUCE,
         syntax=('BATCH NEW bid [ONDONE queue body] [ONSUCCESS queue body] [TTL s] | '
                 'BATCH CLOSE bid | BATCH STATUS bid'),
         summary=('Batches: jobs added with ADDJOB ... BATCH bid; once the batch is closed and '
                  'every member ended, its callback job is added once in the cluster.'),
         reply=('NEW: status OK; CLOSE: integer, the members counted; STATUS: array of '
                'field / value pairs'),
         options=(spec.BATCH_NEW,),
         queues=Subcommand({b"new": OptionValue(b"ondone", 3)}), extension=True)
def batch(client: Client, args: list[bytes]) -> bytes | Pending:
    """BATCH NEW bid [ONDONE queue body] [ONSUCCESS queue body] [TTL s] | BATCH CLOSE
    bid | BATCH STATUS bid"""
    sub = args[1].lower()
    service = client.server.batch_service
    if sub == b"new":
        return reply_held(client, service.new(client.user, BatchNew.parse(args)), reply.OK)
    if sub in _SUBCOMMANDS and len(args) != 3:
        raise errors.err(f"wrong number of arguments for 'batch {sub.decode()}'")
    if sub == b"close":
        closed = service.close(client.user, check_bid(args[2]))
        return reply_later(client, closed, _closed_reply)
    if sub == b"status":
        fields = service.status(client.user, check_bid(args[2]))
        return reply.encode([item for pair in fields for item in pair])
    raise errors.err("unknown BATCH subcommand, try NEW, CLOSE or STATUS")


def _closed_reply(outcome: int | DisqError) -> bytes:
    if isinstance(outcome, DisqError):
        return outcome.reply()
    return reply.integer(outcome)
