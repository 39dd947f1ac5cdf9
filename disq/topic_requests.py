"""TOPIC PUBLISH's typed request (a disq extension): the topic, the body, its MSGID and
ADDJOB's options, which each subscribed queue's job gets (`job`), parsed as ADDJOB
parses them (the same option table, disq_client.spec)."""

from __future__ import annotations

import hashlib
from typing import ClassVar, cast

from disq_client.spec import TOPIC_PUBLISH, CommandOptions

from . import errors
from .options import compile_options
from .requests import AddJob
from .topics import TOPIC_MAX_LEN


class TopicPublish:
    """TOPIC PUBLISH topic body [MSGID id] [ADDJOB's options but DEDUP, UNIQUE]."""

    __slots__ = ("topic", "body", "msgid", "options", "attrs")
    OPTIONS: ClassVar[CommandOptions] = TOPIC_PUBLISH
    _MSGID = compile_options(TOPIC_PUBLISH)[b"msgid"]

    def __init__(self, topic: bytes, body: bytes, msgid: bytes | None,
                 options: list[bytes]) -> None:
        self.topic = check_topic(topic)
        self.body = body
        self.msgid = msgid
        self.options = options  # ADDJOB's, as given (checked by `parse`)
        # its ATTRs, which subscriptions' filters look at (set by `parse`)
        self.attrs: dict[bytes, bytes] | None = None

    @classmethod
    def parse(cls, args: list[bytes]) -> TopicPublish:
        """From TOPIC PUBLISH topic body [options] (args[0] TOPIC, args[1] PUBLISH). The
        options are ADDJOB's (their values skipped over by their parsers, so a GROUP
        named msgid is a group), checked once here on a first queue's request."""
        msgid: bytes | None = None
        options: list[bytes] = []
        parsers = AddJob._PARSERS
        j = 4
        while j < len(args):
            token = args[j]
            if token.lower() == b"msgid":
                if j + 1 >= len(args):
                    raise errors.SYNTAX
                msgid = cast(bytes, cls._MSGID.value(args[j + 1]))  # (a BYTES option)
                j += 2
                continue
            parser = parsers.get(token) or parsers.get(token.lower())
            if parser is None or parser.field in ("dedup", "unique"):
                raise errors.SYNTAX if parser is None else errors.err(
                    "TOPIC PUBLISH takes MSGID, not DEDUP or UNIQUE: a retried publish with "
                    "the same MSGID adds nothing twice")
            options += args[j:j + 1 + parser.values]
            j += 1 + parser.values
        request = cls(args[2], args[3], msgid, options)
        pairs = request.job(b"-").attrs  # every option checked now, before any queue
        request.attrs = None if pairs is None else dict(pairs)
        return request

    def job(self, queue: bytes) -> AddJob:
        """The ADDJOB of `queue`'s job: the options, and the DEDUP key of the MSGID
        (the same for the topic and MSGID, scoped to the queue as every key is)."""
        args = [b"ADDJOB", queue, self.body, b"0", *self.options]
        if self.msgid is not None:
            digest = hashlib.blake2b(b"%d:%s%s" % (len(self.topic), self.topic, self.msgid),
                                     digest_size=16).hexdigest().encode()
            args += [b"DEDUP", b"topic:" + digest]
        return AddJob.parse(args)


def check_topic(topic: bytes) -> bytes:
    """A topic's name as a client gives it: 1 to TOPIC_MAX_LEN bytes."""
    if not 0 < len(topic) <= TOPIC_MAX_LEN:
        raise errors.err(f"a topic's name must be 1 to {TOPIC_MAX_LEN} bytes")
    return topic
