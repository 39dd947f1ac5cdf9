"""One connection of the cluster bus (Link): framing, cluster-secret, output.

Messages for one link are coalesced and leave in one write at the end of the loop
turn, so pipelined replicated ADDJOBs cost one syscall per peer per turn, not one per
job. With cluster-secret, a new link proves the secret first and tags its frames
after that (session.py); tls-cluster wraps it in TLS (the bus's contexts).
"""

from __future__ import annotations

import asyncio
import logging
import socket
import struct
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, Final

from . import messages as m
from .nodes import ClusterNode
from .session import Handshake, HandshakeError, TagsOfALink

if TYPE_CHECKING:
    from .bus import ClusterBus

log = logging.getLogger("disq")

# Output queued for a peer that does not read it, beyond which the link is dropped
# (and reconnected): a stuck peer costs bounded memory. The largest frame a peer
# accepts is well under it, and big job copies wait for room (replication/copies.py),
# so a healthy link never gets there.
LINK_SENDBUF_LIMIT: Final = 4 * m.MAX_FRAME
AUTH_TIMEOUT_S: Final = 5.0  # a link that has not proven the cluster secret by then is closed


_FRAME_LENGTH: Final = struct.Struct(">I")


def frames(prefix: bytes, messages: list[Any], tag_len: int = 0,
           split: int = m.FRAME_SPLIT) -> list[list[bytes]]:
    """The frames of `messages`, as `m.frame` makes one, each of about `split` bytes at
    most (a message bigger than that alone in its frame): a turn that queued big job
    copies (or many) for a link. A PackedMessage whose encodings are one item each
    (REPLJOB: a copy each) is split between them into messages of the same head. A
    frame is a list of parts, for the caller to write without joining them (a copy
    of a 100 MB body less)."""
    out: list[list[bytes]] = []
    units: list[list[bytes]] = []  # the messages of the frame being filled
    size = 0
    for message in messages:
        for unit, unit_size in _units(message, split):
            if units and size + unit_size > split:
                out.append(_frame_parts(prefix, units, size, tag_len))
                units, size = [], 0
            units.append(unit)
            size += unit_size
    if units:
        out.append(_frame_parts(prefix, units, size, tag_len))
    return out


def _units(message: Any, split: int) -> Iterator[tuple[list[bytes], int]]:
    """A message's encoding (a list of parts) and its length; a PackedMessage of one
    item per encoding in as many messages as `split` asks for."""
    if type(message) is not m.PackedMessage:
        packed = m.pack_items([message])
        yield [packed], len(packed)
        return
    items, fields = message.items, message.fields
    if message.length - fields != len(items):  # (items added several at a time)
        parts = [m.array_header(message.length), message.head, *items]
        yield parts, sum(map(len, parts))
        return
    chunk: list[bytes] = []
    size = 0
    for item in items:
        if chunk and size + len(item) > split:
            yield [m.array_header(fields + len(chunk)), message.head, *chunk], size
            chunk, size = [], 0
        chunk.append(item)
        size += len(item)
    if chunk:
        yield [m.array_header(fields + len(chunk)), message.head, *chunk], size


def _frame_parts(prefix: bytes, units: list[list[bytes]], size: int,
                 tag_len: int) -> list[bytes]:
    parts = [b"", prefix, m.array_header(len(units))]
    for unit in units:
        parts += unit
    length = tag_len
    for part in parts:
        length += len(part)
    parts[0] = _FRAME_LENGTH.pack(length)
    return parts


class Outbox:
    """What a link sends at the end of this loop turn, as one frame. A native object
    (Link, an asyncio.Protocol, is a Python class whose methods cost a Python call
    and attribute lookups in a dict), so that the compiled bus queues the copies and
    confirmations of each job at native speed."""

    def __init__(self, schedule: Callable[[], None]) -> None:
        self.messages: list[list[Any] | m.PackedMessage] = []
        # Messages of this turn that more items may join (ClusterBus.send_batched),
        # by type (and head): [message, its index in `messages`] (a PackedMessage for
        # the types of m.PACKED_ONCE).
        self.batches: dict[object, tuple[list[Any] | m.PackedMessage, int]] = {}
        # `messages`' length after its last message that is not a batch: a batch
        # before it takes no more items, which would overtake that message. Batches
        # may pass each other (copies, confirmations, queries of different jobs and
        # keys), but a DELJOB or SETACK batch takes no more items once a REPLJOB batch
        # follows it (`copies_at`): it could delete or ack a job before its copy.
        self.fence = 0
        self.copies_at = 0  # `messages`' length before its last REPLJOB batch
        self.packed_bytes = 0  # of this turn's PackedMessage items (job copies)
        self.up = False  # connected: messages may be queued
        self.scheduled = False  # `schedule` was called this turn (the flush)
        self._schedule = schedule

    def send(self, message: list[Any]) -> None:
        """Queue `[type, *fields]` (dropped if the link is down)."""
        if self.up:
            self.messages.append(message)
            self.fence = len(self.messages)
            self.soon()

    def batch(self, key: object) -> list[Any] | m.PackedMessage | None:
        """This turn's message for `key` (ClusterBus.send_batched) that items may still
        join (see `fence`), if any."""
        entry = self.batches.get(key)
        if entry is not None and entry[1] >= self.fence and (
                entry[1] >= self.copies_at or key not in m.BEHIND_COPIES):
            return entry[0]
        return None

    def new_batch(self, key: object, message: list[Any] | m.PackedMessage,
                  copies: bool = False) -> None:
        """Queue `message`, which the items for `key` join from now on (`batch`).
        `copies`: a REPLJOB (see `copies_at`)."""
        if copies:
            self.copies_at = len(self.messages)
        self.batches[key] = (message, len(self.messages))
        self.messages.append(message)
        self.soon()

    def soon(self) -> None:
        """The queue leaves at the end of this loop turn."""
        if not self.scheduled:
            self.scheduled = True
            self._schedule()

    def take(self) -> list[list[Any] | m.PackedMessage]:
        """The queued messages, the queue emptied."""
        messages = self.messages
        self.messages = []
        self.fence = self.copies_at = self.packed_bytes = 0
        if self.batches:
            self.batches = {}
        return messages


class Link(asyncio.Protocol):
    """One bus connection. Outbound links belong to the node they reach; inbound ones
    only receive (and carry PONGs back)."""

    def __init__(self, bus: ClusterBus, node: ClusterNode | None) -> None:
        self.bus = bus
        self.node = node  # the target of an outbound link, None when inbound
        self.transport: asyncio.Transport | None = None
        # cluster-secret: until the peer proved it, only handshake frames (see _authenticate).
        self.authenticated = not bus.secret
        self.reader = m.FrameReader(m.MAX_FRAME if self.authenticated
                                    else m.MAX_HANDSHAKE_FRAME)
        self.outbox = Outbox(self._schedule_flush)  # the messages of this loop turn
        self.pong_queued = False  # a PONG waits in `out`: the PINGs of this turn have it
        self.peer_ip = ""
        self.local_ip = ""
        # cluster-secret: nothing is sent or handled until the peer proved it knows it;
        # then its frames name `peer_id` only, and frames each way carry tags.
        self.handshake: Handshake | None = None
        self.peer_id = ""
        self.tags: TagsOfALink | None = None  # of the frames this side sends
        self._auth_timer: asyncio.TimerHandle | None = None
        self.dial: asyncio.Task[None] | None = None  # an outbound link still connecting
        self.given_up = False  # abort()ed: its peer looked stuck (ClusterNode.unreached)
        self.written = 0  # bytes handed to the transport (sent, or in its buffer)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.outbox.up = True
        peer = transport.get_extra_info("peername")
        sock = transport.get_extra_info("sockname")
        self.peer_ip = peer[0] if isinstance(peer, tuple) else ""
        self.local_ip = sock[0] if isinstance(sock, tuple) else ""
        raw = transport.get_extra_info("socket")
        if raw is not None:
            try:
                raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except OSError:
                pass
        if not self.authenticated:
            self.handshake = Handshake(self.bus.secret.encode(), self.bus.myself.id,
                                       connector=self.node is not None)
            self._write(self.handshake.hello())
            self._auth_timer = self.bus.loop.call_later(AUTH_TIMEOUT_S, self._auth_timed_out)
        if self.node is not None:
            self.bus.link_up(self)
        else:
            self.bus.inbound.add(self)

    def data_received(self, data: bytes) -> None:
        self.bus.bytes_received += len(data)
        frames = self.reader.feed(data)  # decoded one by one: auth changes the limit
        try:
            for _, sender_id, sender_port, sender_flags, batch in frames:
                if self.transport is None or self.transport.is_closing():
                    return  # closed by a previous frame (e.g. a bad sender)
                if not self.authenticated:
                    self._authenticate(sender_id, batch)
                    continue
                if self.peer_id and sender_id != self.peer_id:
                    log.warning("Closing bus link %s %s: a frame in the name of node %s "
                                "from node %s.", "from" if self.node is None else "to",
                                self.peer_ip, sender_id[:40], self.peer_id)
                    self.close()
                    return
                self.bus.receive_frame(self, sender_id, sender_port, sender_flags, batch)
        except m.FrameError as exc:
            if self.authenticated:
                log.warning("Closing bus link from %s: %s", self.peer_ip, exc)
            else:
                log.warning("Closing bus link %s %s: %s before proving the cluster secret.",
                            "from" if self.node is None else "to", self.peer_ip, exc)
            self.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None
        self.outbox.up = False
        self.outbox.take()  # what was queued for it, and
        self.reader.clear()  # what it sent, are of no use now
        if self._auth_timer is not None:
            self._auth_timer.cancel()
            self._auth_timer = None
        self.bus.link_down(self)

    # -- cluster-secret ----------------------------------------------------------------
    def _authenticate(self, sender_id: str, batch: list[list[Any]]) -> None:
        """A frame of the handshake (session.py): answered, or, with the peer's proof,
        the link may talk. Anything else closes it."""
        handshake = self.handshake
        assert handshake is not None
        try:
            answer = handshake.receive(sender_id, batch)
        except HandshakeError as exc:
            log.warning("Closing bus link %s %s: %s (it did not prove the cluster secret).",
                        "from" if self.node is None else "to", self.peer_ip, exc)
            self.close()
            return
        if answer:
            self._write(answer)
        if handshake.done:
            self.handshake = None
            self.peer_id = handshake.peer_id
            self.tags = handshake.sending
            self.reader.tags = handshake.receiving
            self.reader.max_frame = m.MAX_FRAME
            self.authenticated = True
            if self._auth_timer is not None:
                self._auth_timer.cancel()
                self._auth_timer = None
            if self.outbox.messages:  # held until now
                self.outbox.soon()

    def _auth_timed_out(self) -> None:
        self._auth_timer = None
        if not self.authenticated:
            log.warning("Closing bus link %s %s: no proof of the cluster secret in time.",
                        "from" if self.node is None else "to", self.peer_ip)
            self.close()

    def _write(self, messages: list[list[Any]]) -> None:
        """Send a frame at once, outside the per-turn queue (authentication)."""
        if self.transport is not None:
            bus = self.bus
            data = m.frame(bus.frame_prefix(), messages)
            bus.bytes_sent += len(data)
            self.written += len(data)
            self.transport.write(data)

    def send(self, message: list[Any]) -> None:
        """Queue `[type, *fields]`; the link's queue leaves as one frame this turn."""
        self.outbox.send(message)

    def _schedule_flush(self) -> None:
        self.bus.loop.call_soon(self.flush)

    def flush(self) -> None:
        outbox = self.outbox
        outbox.scheduled = False
        if not self.authenticated:
            return  # held until the peer proved the cluster secret
        self.pong_queued = False
        big = outbox.packed_bytes > m.FRAME_SPLIT
        messages = outbox.take()
        transport = self.transport
        if not messages or transport is None:
            return
        if transport.is_closing():
            # closed here (Close: the peer forgotten), the peer not reading yet: what
            # is queued for it is dropped, as it is once connection_lost comes
            return
        try:
            self._write_turn(messages, big)
        except RuntimeError:
            # uvloop closed the handle under us (a reset seen while writing) before
            # connection_lost: each later write would raise again, so the link goes
            # now, as connection_lost would take it
            log.info("Bus link to %s closed while writing to it.", self.peer_ip)
            self.connection_lost(None)
            return
        if transport.get_write_buffer_size() > LINK_SENDBUF_LIMIT:
            log.warning("Dropping the bus link to %s: %d bytes wait for it to read.",
                        self.peer_ip, transport.get_write_buffer_size())
            self.abort()

    def _write_turn(self, messages: list[list[Any] | m.PackedMessage], big: bool) -> None:
        """This turn's messages as one frame (its tag after it with cluster-secret), or
        frames of about FRAME_SPLIT bytes when big."""
        bus = self.bus
        tags = self.tags
        transport = self.transport
        assert transport is not None
        if big:  # job copies: frames of FRAME_SPLIT, a big copy alone in its own
            self._write_split(messages)
        elif tags is None:
            data = m.frame(bus.frame_prefix(), messages)
            if len(data) > m.FRAME_SPLIT:  # (big jobs that moved: YOURJOBS)
                self._write_split(messages)
            else:
                transport.write(data)
                self.written += len(data)
                bus.bytes_sent += len(data)
        else:
            data = m.frame(bus.frame_prefix(), messages, m.TAG_LEN)
            if len(data) > m.FRAME_SPLIT:
                self._write_split(messages)
            else:
                transport.write(data)
                transport.write(tags.tag(data, 4))  # (writelines joins them: a copy)
                self.written += len(data) + m.TAG_LEN
                bus.bytes_sent += len(data)

    def _write_split(self, messages: list[list[Any] | m.PackedMessage]) -> None:
        """This turn's messages as frames of about FRAME_SPLIT bytes (`frames`)."""
        transport = self.transport
        assert transport is not None
        tags = self.tags
        bus = self.bus
        for parts in frames(bus.frame_prefix(), messages, m.TAG_LEN if tags else 0):
            if tags is None:
                length = 0
                for part in parts:  # each into the transport's buffer: no join (a copy)
                    transport.write(part)
                    length += len(part)
            else:
                data = b"".join(parts)  # the tag is made over the frame in one piece
                transport.write(data)
                transport.write(tags.tag(data, 4))
                length = len(data) + m.TAG_LEN
            self.written += length
            bus.bytes_sent += length

    def mark(self) -> tuple[Link, int] | None:
        """Where what is queued for the peer now ends in this link's output (None:
        not connected), for `sent_up_to` (BusPort.copy_mark)."""
        if self.transport is None:
            return None
        return (self, self.written + self.outbox.packed_bytes)

    def sent_up_to(self, offset: int) -> bool | None:
        """Whether this link's output up to `offset` (`mark`) left this process for
        the kernel; None if the link is down or replaced (it may never arrive)."""
        transport = self.transport
        if transport is None or self.node is None or self.node.link is not self:
            return None
        left: bool = self.written - transport.get_write_buffer_size() >= offset
        return left

    def unsent(self) -> int:
        """Bytes queued for the peer that have not left this process yet."""
        transport = self.transport
        return (0 if transport is None else transport.get_write_buffer_size()) + (
            self.outbox.packed_bytes)

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()
        elif self.dial is not None:
            self.dial.cancel()

    def abort(self) -> None:
        """Drop the connection and what it still had to send, as Disque frees a link:
        close() would wait for a peer that does not read to take it, forever, keeping
        the link (so no reconnection) and queueing every later message for it. A link
        still connecting gives its dial up (SYNs nobody answers, as behind a firewall
        dropping packets, would keep it for the kernel's two minutes of retries)."""
        self.given_up = True
        if self.transport is not None:
            self.transport.abort()
        elif self.dial is not None:
            self.dial.cancel()


