"""Frames assembled from items packed once (messages.PackedMessage, the REPLJOB copies
of a job sent to each of its holders) are byte for byte the frames msgpack makes of
the same messages as lists: no wire change."""

from __future__ import annotations

import struct
from types import SimpleNamespace
from typing import Any

import msgpack
from fuzzing import fuzz_settings
from hypothesis import given
from hypothesis import strategies as st

from disq.cluster import messages as m
from disq.cluster.bus import ClusterBus
from disq.cluster.link import Link, Outbox
from disq.cluster.link import frames as split_frames
from disq.cluster.membership import Membership
from disq.cluster.nodes import LEAVING_BIT, ClusterNode, NodeFlag
from disq.ids import new_node_id

SENDER = "a" * 40
HOLDERS = frozenset({"b" * 40, "c" * 40})
LEAVES = (st.none() | st.booleans() | st.integers(-2**63, 2**64 - 1) | st.floats(allow_nan=False)
          | st.text(max_size=20) | st.binary(max_size=70))
VALUES = st.recursive(LEAVES, lambda inner: st.lists(inner, max_size=5), max_leaves=20)


def reference(flags: list[str], messages: list[Any], sender: str = SENDER,
              port: int = 7711) -> bytes:
    """The frame as encode_frame made it before PackedMessage: one msgpack call."""
    payload = msgpack.packb([m.VERSION, sender, port, flags, messages], use_bin_type=True,
                            default=lambda obj: list(obj))
    return struct.pack(">I", len(payload)) + payload


def test_array_headers_are_msgpacks() -> None:
    for length in (0, 1, 15, 16, 255, 0xffff, 0x10000, 0x123456):
        header = m.array_header(length)
        assert msgpack.packb([None] * length)[:len(header)] == header


def test_items_are_packed_as_msgpack_packs_them() -> None:
    """pack_items: what follows an array's header, whatever the items' encodings."""
    edges = [0, 1, 0x7f, 0x80, 0xff, 0x100, 0xffff, 0x10000, 0xffffffff, 0x100000000,
             2**64 - 1, -1, -32, -33, -128, -129, -2**31 - 1, -2**63]
    blobs = [bytes(n) for n in (0, 1, 31, 32, 255, 256, 0xffff, 0x10000)]
    values = [*edges, *blobs, True, False, None, 1.5, "text", bytearray(b"ab"), HOLDERS,
              [edges, [blobs, []]], frozenset()]
    for value in values:
        assert m.pack_items([value]) == msgpack.packb(value, use_bin_type=True,
                                                      default=lambda obj: list(obj))
    assert m.pack_items(values) == msgpack.packb(values, use_bin_type=True,
                                                 default=lambda obj: list(obj))[3:]


# A frame: messages, each a list, or (as its head length) a PackedMessage whose items
# arrive in chunks (one send_batched each).
MESSAGE = st.tuples(st.integers(0, 50), st.lists(VALUES, max_size=20),
                    st.none() | st.integers(0, 3), st.lists(st.integers(1, 4), max_size=4))


@fuzz_settings(200)
@given(st.lists(MESSAGE, max_size=8), st.sampled_from([[], ["leaving"]]))
def test_assembled_frames_are_the_frames_of_the_lists(
        shapes: list[tuple[int, list[Any], int | None, list[int]]], flags: list[str]) -> None:
    lists: list[Any] = []
    queued: list[Any] = []
    for mtype, fields, head_length, chunks in shapes:
        lists.append([mtype, *fields])
        if head_length is None or head_length > len(fields):
            queued.append([mtype, *fields])
            continue
        packed = m.PackedMessage(m.pack_head(mtype, tuple(fields[:head_length])),
                                 1 + head_length)
        items = fields[head_length:]
        for size in [*chunks, len(items)]:
            chunk, items = items[:size], items[size:]
            packed.add(m.pack_items(chunk), len(chunk))
        queued.append(packed)
    expected = reference(flags, lists)
    assert m.frame(m.frame_prefix(SENDER, 7711, flags), queued) == expected
    assert m.encode_frame(SENDER, 7711, flags, queued) == expected
    assert m.encode_frame(SENDER, 7711, flags, lists) == expected


def test_long_messages_and_frames_take_the_long_headers() -> None:
    copy = [b"D-" + bytes(38), b"q", b"x" * 10, 1, 0, 3, 60_000, 17, 0, 300, 0, 0]
    for count in (15, 16, 70_000):
        packed = m.PackedMessage(m.pack_head(m.REPLJOB, (False, HOLDERS)), 3)
        packed.add(m.pack_items([copy] * count), count)
        queued = [[m.GOTJOB, b"J"]] * count + [packed, [m.DELJOB, b"J"]]
        lists = [[m.GOTJOB, b"J"]] * count + [[m.REPLJOB, False, HOLDERS, *[copy] * count],
                                              [m.DELJOB, b"J"]]
        assert m.encode_frame(SENDER, 7711, [], queued) == reference([], lists)
        frame = next(m.FrameReader().feed(m.encode_frame(SENDER, 7711, [], queued)))
        assert frame[4][count][3:] == [copy] * count


class Transport:
    def __init__(self) -> None:
        self.written: list[bytes] = []

    def write(self, data: bytes) -> None:
        self.written.append(data)

    def get_write_buffer_size(self) -> int:
        return 0

    def is_closing(self) -> bool:
        return False


def test_the_bus_sends_each_peer_the_frame_of_the_lists(tmp_path: Any) -> None:
    """send_batched packs a REPLJOB copy once for every peer it goes to; each peer's
    frame, with the messages queued around it (another head, a message that is no
    batch, other batches), is the frame of the lists. The frame's start follows the
    node's flags."""
    myself = ClusterNode(new_node_id(), "127.0.0.1", 7711, NodeFlag.MYSELF)
    membership = Membership(myself, str(tmp_path / "nodes.conf"))
    loop = SimpleNamespace(call_soon=lambda callback: None)
    bus = ClusterBus(membership, [], 7711, lambda: 1000, loop)  # type: ignore[arg-type]
    peers = []
    for port in (7712, 7713):
        peer = ClusterNode(new_node_id(), "127.0.0.1", port)
        link = Link(bus, peer)
        link.transport = Transport()  # type: ignore[assignment]
        link.outbox.up = True  # (as connection_made sets it)
        peer.connected, peer.link = True, link
        membership.nodes[peer.id] = peer
        peers.append(peer)
    ids = [peer.id for peer in peers]
    holders = frozenset({myself.id, *ids})
    plain = [b"D-1", b"q", b"body", 1, 0, 3, 60_000, 17, 0, 300, 0, 0]
    dedup = [b"D-2", b"q", b"", 1, 0, 3, 60_000, 17, 0, 300, 0, 0, b"key", True, 250]
    extended = [b"D-3", b"q", b"b" * 300, 1, 0, 3, 60_000, 17, 5, 300, 0, 0, b"key",
                [3, b"group", 1_700_000_000_000, 5, None, None, 0]]
    bus.send_batched(ids, m.REPLJOB, [plain], (False, holders))
    bus.send_batched(ids, m.REPLJOB, [dedup], (False, holders))
    bus.send_batched(ids[:1], m.REPLJOB, [extended], (True, holders))
    bus.send_batched(ids, m.GOTJOB, [b"D-0"])
    bus.send(ids[1], m.ENQUEUE, b"D-1", 0)
    bus.send_batched(ids, m.REPLJOB, [plain], (False, holders))
    bus.send_batched(ids, m.REPLJOB, [], (False, frozenset()))
    myself.flag_bits |= LEAVING_BIT
    for peer in peers:
        peer.link.flush()
    assert peers[0].link.transport.written == [reference(["leaving"], [  # type: ignore[union-attr]
        [m.REPLJOB, False, holders, plain, dedup, plain], [m.REPLJOB, True, holders, extended],
        [m.GOTJOB, b"D-0"], [m.REPLJOB, False, frozenset()]], myself.id)]
    assert peers[1].link.transport.written == [reference(["leaving"], [  # type: ignore[union-attr]
        [m.REPLJOB, False, holders, plain, dedup], [m.GOTJOB, b"D-0"], [m.ENQUEUE, b"D-1", 0],
        [m.REPLJOB, False, holders, plain], [m.REPLJOB, False, frozenset()]], myself.id)]
    myself.flag_bits &= ~LEAVING_BIT
    bus.send(ids[0], m.DELJOB, b"D-1")
    peers[0].link.flush()
    assert peers[0].link.transport.written[-1] == reference(  # type: ignore[union-attr]
        [], [[m.DELJOB, b"D-1"]], myself.id)


def test_acks_and_deletes_never_pass_a_copy_queued_after_them() -> None:
    """The batches of one loop turn pass each other, but a DELJOB or SETACK batch takes
    no more items once a REPLJOB batch follows it: a job's DELJOB must not arrive
    before its copy (the copy would outlive the job). A GOTACK batch still may."""
    outbox = Outbox(lambda: None)
    outbox.up = True
    for mtype in (m.DELJOB, m.SETACK, m.GOTACK):
        outbox.new_batch(mtype, [mtype, b"D-1"])
    outbox.new_batch((m.REPLJOB, ()), [m.REPLJOB, b"copy of D-2"], copies=True)
    assert outbox.batch(m.DELJOB) is None and outbox.batch(m.SETACK) is None
    assert outbox.batch(m.GOTACK) == [m.GOTACK, b"D-1"]
    assert outbox.batch((m.REPLJOB, ())) == [m.REPLJOB, b"copy of D-2"]
    outbox.new_batch(m.DELJOB, [m.DELJOB, b"D-2"])  # after the copy: joinable again
    assert outbox.batch(m.DELJOB) == [m.DELJOB, b"D-2"]
    assert [message[0] for message in outbox.take()] == [
        m.DELJOB, m.SETACK, m.GOTACK, m.REPLJOB, m.DELJOB]
    assert outbox.copies_at == 0 and outbox.batch(m.DELJOB) is None


def test_a_turn_too_big_for_one_frame_goes_in_frames_that_say_the_same() -> None:
    """link.frames: frames of about `split` bytes, a copy bigger than that alone in its
    own; a REPLJOB split between its copies, each part with the message's head. Read
    back, the messages are those of the one frame, the REPLJOB parts joined."""
    copies = [[b"D-%d" % i, b"q", bytes(size)] for i, size in enumerate((10, 3000, 20, 30))]
    head = (False, HOLDERS)
    packed = m.PackedMessage(m.pack_head(m.REPLJOB, head), 1 + len(head))
    for copy in copies:
        packed.add(m.pack_items([copy]), 1)
    messages: list[Any] = [[m.GOTJOB, b"x" * 40], packed, [m.DELJOB, b"y"]]
    prefix = m.frame_prefix(SENDER, 7711, [])
    frames = split_frames(prefix, messages, split=1000)
    reader = m.FrameReader()
    decoded = [message for parts in frames for frame in reader.feed(b"".join(parts))
               for message in frame[4]]
    assert len(frames) == 3  # [GOTJOB, REPLJOB of 1 copy], [the 3000-byte copy], [the rest]
    joined: list[Any] = []
    for message in decoded:
        if joined and message[0] == joined[-1][0] == m.REPLJOB and message[1:3] == joined[-1][1:3]:
            joined[-1] += message[3:]
        else:
            joined.append(list(message))
    one = reader.feed(m.frame(prefix, messages))
    assert joined == next(iter(one))[4]
    assert [len(message) - 3 for message in decoded if message[0] == m.REPLJOB] == [1, 1, 2]
