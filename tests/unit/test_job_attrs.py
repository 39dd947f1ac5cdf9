"""Job attributes (ADDJOB ... ATTR key value): parsing and bounds, and how they travel
(the bus's extended fields, the AOF's format 5)."""

from __future__ import annotations

import msgpack
import pytest

from disq import errors
from disq.aof.serialize import (
    EXT_FORMAT_4,
    EXT_FORMAT_5,
    CorruptJob,
    deserialize_ext,
    serialize_ext,
)
from disq.attrs import from_flat
from disq.config import Config
from disq.ids import new_node_id
from disq.job import Job, JobExt
from disq.node import Node, now_ms
from disq.replication.wire import decode_copy, encode_copy
from disq.requests import AddJob


def request(*args: bytes) -> AddJob:
    return AddJob.parse([b"ADDJOB", b"q", b"body", b"0", *args])


def added(*args: bytes) -> Job:
    return Node(Config(), new_node_id()).admission.add_job(request(*args))


def wire_trip(data: object) -> object:
    return msgpack.unpackb(msgpack.packb(data, use_bin_type=True), raw=False)


def test_attrs_are_kept_in_order_and_a_key_again_takes_the_last_value() -> None:
    job = added(b"ATTR", b"tenant", b"a", b"attr", b"size", b"12", b"ATTR", b"tenant", b"b",
                b"ATTR", b"empty", b"")
    assert job.ext is not None
    assert job.ext.attrs == ((b"tenant", b"b"), (b"size", b"12"), (b"empty", b""))


def test_a_plain_job_has_no_attrs() -> None:
    assert added(b"REPLICATE", b"1").ext is None


@pytest.mark.parametrize("args", [
    [b"ATTR", b"", b"v"], [b"ATTR", b"k" * 65, b"v"], [b"ATTR", b"k", b"v" * 257],
])
def test_attrs_out_of_bounds_are_refused(args: list[bytes]) -> None:
    with pytest.raises(errors.DisqError, match="ATTR needs a key of 1 to 64 bytes"):
        request(*args)


def test_a_missing_value_is_a_syntax_error() -> None:
    with pytest.raises(errors.DisqError, match="syntax"):
        request(b"ATTR", b"k")


def test_more_than_16_attrs_are_refused() -> None:
    args = [a for i in range(17) for a in (b"ATTR", b"k%d" % i, b"v")]
    with pytest.raises(errors.DisqError, match="at most 16 attributes"):
        request(*args)
    assert request(*args[:48]).attrs is not None  # 16 is fine


def test_bounds_are_the_largest_allowed() -> None:
    job = added(b"ATTR", b"k" * 64, b"v" * 256)
    assert job.ext is not None and job.ext.attrs == ((b"k" * 64, b"v" * 256),)


def test_typed_front_ends_give_a_list_of_pairs() -> None:
    job_request = AddJob.from_fields(b"q", b"body", 0, {"attrs": [("a", "1"), (b"b", b"2")]})
    assert job_request.attrs == [(b"a", b"1"), (b"b", b"2")]
    with pytest.raises(errors.DisqError, match="ATTR needs"):
        AddJob.from_fields(b"q", b"body", 0, {"attrs": [("", "1")]})


def test_attrs_travel_on_the_bus_with_and_without_parents() -> None:
    now = now_ms()
    job = added(b"ATTR", b"k", b"v", b"PRIORITY", b"3")
    copy = decode_copy(wire_trip(encode_copy(job, now)), now, "peer")
    assert copy is not None and copy.ext is not None
    assert copy.ext.attrs == ((b"k", b"v"),) and copy.ext.priority == 3 and copy.ext.after is None


@pytest.mark.parametrize("attrs", [
    [], [b"k"], [b"k", b"v", b"k", b"w"], [b"", b"v"], [b"k" * 65, b"v"], [b"k", b"v" * 257],
    [b"k", None], [None, b"v"], [b"k", 5], b"kv", None, [b"k%d" % (i // 2) for i in range(34)],
])
def test_a_peers_bad_attrs_drop_the_copy(attrs: object) -> None:
    now = now_ms()
    job = added(b"ATTR", b"k", b"v")
    copy = encode_copy(job, now)
    assert len(copy[-1]) == 10
    copy[-1][9] = attrs
    assert decode_copy(copy, now) is None


def test_a_peers_bad_parents_beside_attrs_drop_the_copy() -> None:
    now = now_ms()
    copy = encode_copy(added(b"ATTR", b"k", b"v"), now)
    copy[-1][8] = []
    assert decode_copy(copy, now) is None


def test_from_flat_takes_up_to_16_pairs() -> None:
    items = [x for i in range(16) for x in (b"k%d" % i, b"v")]
    assert from_flat(items) is not None and from_flat([*items, b"x", b"y"]) is None


def test_the_aof_keeps_attrs_in_format_5_and_still_reads_format_4() -> None:
    ext = JobExt(7, b"g", 0, attrs=((b"k", b"v"), (b"e", b"")))
    data = serialize_ext(ext)
    assert data[0] == EXT_FORMAT_5
    back = deserialize_ext(data)
    assert (back.priority, back.group, back.attrs) == (7, b"g", ((b"k", b"v"), (b"e", b"")))
    four = serialize_ext(JobExt(7, b"g", 0, batch=b"B1"))
    assert four[0] == EXT_FORMAT_4 and deserialize_ext(four).batch == b"B1"
    with pytest.raises(CorruptJob):
        deserialize_ext(data[:-1])
    with pytest.raises(CorruptJob):  # a count of pairs beyond what follows
        deserialize_ext(data[:-20] + bytes((3,)) + data[-19:])
