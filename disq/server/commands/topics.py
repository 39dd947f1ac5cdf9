"""Topics, a disq extension: TOPIC SUBSCRIBE / UNSUBSCRIBE / LIST / PUBLISH. The table
is `node.topics` (disq/topics.py); the operations are the topic service's
(topic_service.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from disq_client import spec

from ... import errors
from ...errors import DisqError
from ...topic_requests import TopicPublish, check_topic
from ...topics import parse_filter
from .. import reply
from ..later import reply_held
from ..pending import BatchReplies
from ..table import PRODUCE, At, Both, Subcommand, command

if TYPE_CHECKING:
    from ..connection import Client
    from ..pending import Pending



@command("topic", -2, "wm",
         acl=PRODUCE,
         syntax=('TOPIC SUBSCRIBE topic queue [WHERE key op value ...] | '
                 'TOPIC UNSUBSCRIBE topic queue | TOPIC LIST [topic] | '
                 "TOPIC PUBLISH topic body [MSGID id] [ADDJOB's options but DEDUP, UNIQUE]"),
         summary=('Topics: each publish adds one job to every subscribed queue (a consumer '
                  'group); subscriptions are kept by every node.'),
         reply=('SUBSCRIBE, UNSUBSCRIBE: integer 1 (changed) or 0; LIST: array of [topic, '
                '[queue, ...], [filter, ...]]; PUBLISH: array of queue, then its job ID or '
                'error, for each subscribed queue whose filter matches (-NOTOPIC if no '
                'queue subscribes to the topic)'),
         options=(spec.TOPIC_PUBLISH,),
         queues=Subcommand({b"subscribe": Both(At(2), At(3)),
                            b"unsubscribe": Both(At(2), At(3)),
                            b"publish": At(2)}),
         extension=True)
def topic(client: Client, args: list[bytes]) -> bytes | Pending:
    """TOPIC SUBSCRIBE topic queue [WHERE ...] | TOPIC UNSUBSCRIBE topic queue | TOPIC LIST [topic]
    | TOPIC PUBLISH topic body [MSGID id] [ADDJOB's options but DEDUP, UNIQUE]"""
    sub = args[1].lower()
    service = client.server.topic_service
    if sub in (b"subscribe", b"unsubscribe"):
        if len(args) < 4 or (sub == b"unsubscribe" and len(args) != 4):
            raise errors.err(f"wrong number of arguments for 'topic {sub.decode()}'")
        queue = args[3]
        if not queue:
            raise errors.err("a queue's name cannot be empty")
        held = service.change(client.user, check_topic(args[2]), queue,
                              unsubscribe=sub == b"unsubscribe",
                              where=parse_filter(args, 4))
        return reply.integer(0) if held is None else reply_held(client, held,
                                                                reply.integer(1))
    if sub == b"list":
        if len(args) > 3:
            raise errors.err("wrong number of arguments for 'topic list'")
        listed = service.listed(client.user, check_topic(args[2]) if len(args) == 3
                                else None)
        return reply.encode([[name, queues, filters] for name, queues, filters in listed])
    if sub == b"publish":
        if len(args) < 4:
            raise errors.err("wrong number of arguments for 'topic publish'")
        results = service.publish(client.user, TopicPublish.parse(args), client)
        replies = BatchReplies(2 * len(results))
        for i, (queue, added) in enumerate(results):
            replies.give(2 * i, reply.encode(queue))
            if type(added) is bytes:
                replies.give(2 * i + 1, b"+" + added + b"\r\n")
            elif isinstance(added, DisqError):
                replies.give(2 * i + 1, added.reply())
            else:
                replies.adopt(2 * i + 1, added)  # type: ignore[arg-type]
        return replies.result(client)
    raise errors.err("unknown TOPIC subcommand, try SUBSCRIBE, UNSUBSCRIBE, LIST or PUBLISH")
