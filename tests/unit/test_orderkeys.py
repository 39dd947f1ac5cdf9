"""ADDJOB ... ORDERKEY k [STRICT]: parsing, how the key travels (the bus's 11th
extended field, the AOF's format 6, older ones still read), and the core's lines on
one node (disq/orderkeys.py): the owner queues a key's head only."""

from __future__ import annotations

import msgpack
import pytest

from disq import errors
from disq.aof.serialize import (
    EXT_FORMAT_5,
    EXT_FORMAT_6,
    CorruptJob,
    deserialize_ext,
    serialize_ext,
)
from disq.cluster.nodes import ClusterNode, NodeFlag
from disq.config import Config
from disq.ids import new_node_id
from disq.job import ACTIVE, QUEUED, Job, JobExt
from disq.node import Node, now_ms
from disq.orderkeys import NO_MAJORITY, NOT_YET, OTHER, OWNER
from disq.replication.orderkeys import OrderOwners
from disq.replication.targets import key_order, owner_key
from disq.replication.wire import decode_copy, encode_copy
from disq.requests import AddJob


def request(*args: bytes) -> AddJob:
    return AddJob.parse([b"ADDJOB", b"q", b"body", b"0", *args])


def wire_trip(data: object) -> object:
    return msgpack.unpackb(msgpack.packb(data, use_bin_type=True), raw=False)


def test_orderkey_and_strict_are_parsed() -> None:
    parsed = request(b"ORDERKEY", b"k", b"STRICT")
    assert (parsed.orderkey, parsed.strict) == (b"k", True)
    assert request(b"orderkey", b"k").strict is False
    with pytest.raises(errors.DisqError, match="STRICT needs an ORDERKEY"):
        request(b"STRICT")
    with pytest.raises(errors.DisqError, match="ORDERKEY must be 1 to 256 bytes"):
        request(b"ORDERKEY", b"")
    typed = AddJob.from_fields(b"q", b"b", 0, {"orderkey": "k", "strict": True})
    assert (typed.orderkey, typed.strict) == (b"k", True)


@pytest.mark.parametrize("ext", [
    JobExt(orderkey=b"k"), JobExt(orderkey=b"k", order_strict=True),
    JobExt(3, b"g", 0, attrs=((b"a", b"1"),), after=(b"B1",), orderkey=b"k" * 256),
])
def test_the_key_travels_on_the_bus_and_in_the_aof(ext: JobExt) -> None:
    node = Node(Config(), new_node_id())
    job = node.admission.add_job(request(b"REPLICATE", b"1"))
    job.ext = ext
    now = now_ms()
    copy = decode_copy(wire_trip(encode_copy(job, now)), now, "peer")
    assert copy is not None and copy.ext is not None
    assert (copy.ext.orderkey, copy.ext.order_strict, copy.ext.attrs, copy.ext.after) == (
        ext.orderkey, ext.order_strict, ext.attrs, ext.after)
    data = serialize_ext(ext)
    assert data[0] == EXT_FORMAT_6
    back = deserialize_ext(data)
    assert (back.orderkey, back.order_strict, back.attrs, back.after, back.group) == (
        ext.orderkey, ext.order_strict, ext.attrs, ext.after, ext.group)
    with pytest.raises(CorruptJob):
        deserialize_ext(data[:-1])


def test_older_formats_still_read() -> None:
    five = serialize_ext(JobExt(attrs=((b"k", b"v"),)))
    assert five[0] == EXT_FORMAT_5 and deserialize_ext(five).orderkey is None
    node = Node(Config(), new_node_id())
    job = node.admission.add_job(request(b"ATTR", b"k", b"v"))
    copy = encode_copy(job, now_ms())
    assert len(copy[-1]) == 10  # no key: the frame an older node sends and reads
    decoded = decode_copy(copy, now_ms())
    assert decoded is not None and decoded.ext is not None and decoded.ext.orderkey is None


@pytest.mark.parametrize("order", [[b"", False], [b"k", 1], [b"k" * 257, False], [b"k"],
                                   b"k", None, [None, False]])
def test_a_peers_bad_key_drops_the_copy(order: object) -> None:
    node = Node(Config(), new_node_id())
    job = node.admission.add_job(request(b"ORDERKEY", b"k"))
    copy = encode_copy(job, now_ms())
    assert len(copy[-1]) == 11
    copy[-1][10] = order
    assert decode_copy(copy, now_ms()) is None


def add(node: Node, key: bytes, queue: bytes = b"q") -> Job:
    return node.admission.add_job(AddJob.parse(
        [b"ADDJOB", queue, b"body", b"0", b"ORDERKEY", key, b"RETRY", b"10"]))


def test_the_owner_queues_each_keys_head_only() -> None:
    node = Node(Config(), new_node_id())
    a1, a2, b1 = add(node, b"a"), add(node, b"a"), add(node, b"b")
    assert (a1.state, a2.state, b1.state) == (QUEUED, ACTIVE, QUEUED)
    assert a2.qtime == 0  # held: no timer of its own
    assert node.ack([a1.id]) == 1
    assert a2.state == QUEUED
    assert len(node.orderkeys) == 2 and len(node.orderkeys.lines) == 2


def test_a_node_that_does_not_own_the_key_keeps_its_copies_out_of_the_queue() -> None:
    node = Node(Config(), new_node_id())
    handed: list[Job] = []
    node.orderkeys.acts_for = lambda queue, key, strict: OTHER
    node.orderkeys.hand_off = handed.append
    job = add(node, b"a")
    assert job.state == ACTIVE and job.qtime > now_ms()  # looked at again after RETRY
    assert handed == [job]  # its owner may have no copy
    assert node.enqueue(job, nack=True) and job.state == QUEUED  # a NACK here: queued


def test_a_strict_key_without_a_majority_is_refused_and_withheld() -> None:
    node = Node(Config(), new_node_id())
    job = node.admission.add_job(request(b"ORDERKEY", b"k", b"STRICT", b"RETRY", b"10"))
    assert job.state == QUEUED
    node.orderkeys.has_majority = lambda: False
    node.orderkeys.acts_for = lambda queue, key, strict: NO_MAJORITY
    with pytest.raises(errors.DisqError, match="NOMAJORITY"):
        node.admission.add_job(request(b"ORDERKEY", b"k", b"STRICT"))
    assert node.orderkeys.withhold_strict(now_ms()) == 1
    assert job.state == ACTIVE and node.qlen(b"q") == 0
    assert node.orderkeys.strict_queues() == {b"q"}


class _Peers:
    """The bus as OrderOwners reads it: the reachable peers, the cluster's size and the
    frames heard from nodes counted failing."""

    def __init__(self, ids: list[str]) -> None:
        self.peers = [ClusterNode(i, "127.0.0.1", 7711, NodeFlag(0)) for i in ids]
        self.cluster_size = len(ids) + 1
        self.failing_heard = 0

    def reachable_peers(self) -> list[ClusterNode]:
        return self.peers


class _NoCopies:
    def __init__(self) -> None:
        self.former_owner: object = None
        self.sent: list[tuple[bytes, str]] = []

    def send_copy(self, job: Job, node_id: str, now: int) -> None:
        self.sent.append((job.id, node_id))


def _owned_key(my_id: str, peers: list[str]) -> bytes:
    """A key this node comes first for among `peers` (it owns it)."""
    for n in range(1000):
        key = b"k%d" % n
        if key_order(owner_key(b"q", key), [my_id, *peers])[0] == my_id:
            return key
    raise AssertionError("no key found")


def test_a_frame_from_a_node_counted_failing_holds_every_key_for_a_grace() -> None:
    node = Node(Config(), new_node_id())
    peers = [new_node_id() for _ in range(2)]
    bus = _Peers(peers)
    owners = OrderOwners(node, bus, _NoCopies())  # type: ignore[arg-type]
    key = _owned_key(node.id, peers)
    assert owners.acts_for(b"q", key, False) == OWNER
    bus.failing_heard += 1  # a peer this node counts failing talks: a heal under way
    assert owners.acts_for(b"q", key, False) == NOT_YET
    assert owners.grace_left() > 0


def test_during_a_takeover_a_new_jobs_copies_also_go_to_the_former_owner() -> None:
    node = Node(Config(), new_node_id())
    peers = [new_node_id() for _ in range(3)]
    bus = _Peers(peers)
    owners = OrderOwners(node, bus, _NoCopies())  # type: ignore[arg-type]
    # a key another peer owns once a node came back, whose owner was a third node before
    came_back = bus.peers.pop()
    for n in range(5000):
        key = b"k%d" % n
        before = key_order(owner_key(b"q", key), [node.id, *peers[:2]])[0]
        after = key_order(owner_key(b"q", key), [node.id, *peers])[0]
        if before != node.id and after == came_back.id:
            break
    else:
        raise AssertionError("no key found")
    assert owners.former_owner(b"q", key) is None  # no change seen: none
    bus.peers = [*bus.peers, came_back]  # the peer is back
    assert owners.owner(b"q", key) == came_back.id
    assert owners.former_owner(b"q", key) == before


def test_the_strict_keys_are_withheld_once_per_loss_of_the_majority() -> None:
    node = Node(Config(), new_node_id())
    majority = [True]
    node.orderkeys.has_majority = lambda: majority[0]
    first = node.admission.add_job(request(b"ORDERKEY", b"a", b"STRICT", b"RETRY", b"10"))
    assert first.state == QUEUED
    majority[0] = False
    checks = [node.orderkeys.check_majority(now_ms()) for _ in range(3)]  # GETJOBs, say
    assert checks == [1, 0, 0] and first.state == ACTIVE  # one walk for the loss
    majority[0] = True
    assert node.orderkeys.check_majority(now_ms()) == 0
    assert node.enqueue(first, nack=False) and first.state == QUEUED
    majority[0] = False
    assert node.orderkeys.check_majority(now_ms()) == 1  # a new loss: withheld again
    assert first.state == ACTIVE
