"""The retained jobs' segment files (disq/retention/segments.py, store.py's index): a
checksum per record, encryption with the AOF's key, a torn tail cut, a damaged record
ending what is read, the window reads' order and filters; RETAIN on the wire."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from disq.aof.frames import Codec
from disq.policies import QueuePolicy
from disq.retention.files import index_segment
from disq.retention.segments import RetainedJob, encode_record, read_segment
from disq.retention.store import RetentionStore, shard_of
from disq.where import parse_condition

KEY = bytes(range(32))


def job(i: int, ctime_ms: int = 1_700_000_000_000, attrs: list[bytes] | None = None
        ) -> RetainedJob:
    return RetainedJob(b"D-%038d" % i, b"q", b"body%d" % i, ctime_ms * 1_000_000 + i,
                       ctime_ms + 5, ["a" * 40], attrs or [])


def write(path: Path, jobs: list[RetainedJob], key: bytes | None = None) -> list[int]:
    """The segment file; the offsets where each record's frame ends."""
    codec = Codec(key)
    data = codec.header()
    ends = []
    for retained in jobs:
        data += codec.frame(encode_record(retained))
        ends.append(len(data))
    path.write_bytes(data)
    return ends


@pytest.mark.parametrize("key", [None, KEY], ids=["crc", "aes"])
def test_records_read_back_whole(tmp_path: Path, key: bytes | None) -> None:
    path = tmp_path / "1-a.seg"
    jobs = [job(i, attrs=[b"k", b"v%d" % i]) for i in range(5)]
    write(path, jobs, key)
    scan = read_segment(str(path), key)
    assert scan.damage is None and scan.cut_off is None
    assert [j.to_wire() for j in scan.jobs] == [j.to_wire() for j in jobs]
    assert scan.end == path.stat().st_size
    if key is not None:  # encrypted: the body is not in the file, another key is refused
        assert b"body1" not in path.read_bytes()
        assert "another key" in (read_segment(str(path), bytes(32)).damage or "")
        assert read_segment(str(path), None).damage


def test_a_torn_tail_is_cut_on_index(tmp_path: Path) -> None:
    path = tmp_path / "1700000000000-a.seg"
    ends = write(path, [job(i) for i in range(3)])
    with open(path, "r+b") as fh:
        fh.truncate(ends[2] - 7)  # the last record half written
    scan = read_segment(str(path), None)
    assert len(scan.jobs) == 2 and scan.cut_off and scan.damage is None
    segment, problem = index_segment(str(path), None)
    assert segment is not None and segment.count == 2 and "torn tail" in problem
    assert path.stat().st_size == ends[1]  # cut where the sound records end
    assert segment.first_ms == 1_700_000_000_000
    assert segment.min_ctime == job(0).ctime and segment.max_ctime == job(1).ctime


def test_a_flipped_byte_fails_its_records_checksum(tmp_path: Path) -> None:
    path = tmp_path / "1-a.seg"
    ends = write(path, [job(i) for i in range(3)])
    data = bytearray(path.read_bytes())
    data[ends[0] + 20] ^= 0x40  # inside the second record
    path.write_bytes(bytes(data))
    scan = read_segment(str(path), None)
    assert [j.id for j in scan.jobs] == [job(0).id]
    assert scan.damage and "checksum" in scan.damage
    segment, problem = index_segment(str(path), None)
    assert segment is not None and segment.count == 1 and segment.size == ends[0]
    assert "checksum" in problem
    assert path.stat().st_size == ends[2]  # damage is not cut: kept for a look


def test_an_empty_segment_is_deleted_on_index(tmp_path: Path) -> None:
    path = tmp_path / "1-a.seg"
    write(path, [])
    assert index_segment(str(path), None) == (None, "")
    assert not path.exists()


def test_a_policy_with_retain_crosses_the_wire() -> None:
    policy = QueuePolicy(b"q", retain=3600, retain_bytes=10**9, version=5, origin="n")
    wire = policy.to_wire()
    assert len(wire) == 19
    back = QueuePolicy.from_wire(wire)
    assert back is not None and (back.retain, back.retain_bytes) == (3600, 10**9)
    assert len(QueuePolicy(b"q").to_wire()) == 9  # nodes without RETAIN read the rest
    assert QueuePolicy.from_wire([*wire[:17], -1, 0]) is None
    assert QueuePolicy.from_wire([*wire[:17], 10, "x"]) is None


class _Node:
    id = "a" * 40

    class policies:  # noqa: N801  (the store reads node.policies.policies)
        policies: dict[bytes, QueuePolicy] = {}


def test_window_reads_order_filter_and_page(tmp_path: Path) -> None:
    """Two segments whose jobs interleave in creation time: a window is read in
    creation order, a page at a time, WHERE and SHARD applied."""
    queue_dir = tmp_path / "retain" / "x"
    queue_dir.mkdir(parents=True)
    (queue_dir / "QUEUE").write_bytes(b"q")
    evens = [job(i, attrs=[b"n", b"%d" % i]) for i in range(0, 20, 2)]
    odds = [job(i, attrs=[b"n", b"%d" % i]) for i in range(1, 20, 2)]
    write(queue_dir / "1700000000001-a.seg", evens)
    write(queue_dir / "1700000000002-b.seg", odds)

    async def run() -> None:
        store = RetentionStore(_Node(), str(tmp_path / "retain"))  # type: ignore[arg-type]
        await store.start(asyncio.get_running_loop())
        await store.indexed()
        try:
            assert store.queue_info(b"q") is not None and store.queue_info(b"q")[1] == 20
            first, more = await store.window(b"q", 0, 2**42, None, 7)
            assert more and [j.id for j in first] == [job(i).id for i in range(7)]
            rest, more = await store.window(b"q", 0, 2**42, first[-1].key(), 100)
            assert not more and [j.id for j in rest] == [job(i).id for i in range(7, 20)]
            where = [parse_condition([b"n", b">", b"15"], 0)[0]]
            found, _ = await store.window(b"q", 0, 2**42, None, 100, where)
            assert [j.id for j in found] == [job(i).id for i in range(16, 20)]
            shards = [[j.id for j in (await store.window(b"q", 0, 2**42, None, 100,
                                                         shard=(i, 3)))[0]]
                      for i in range(3)]
            assert sorted(sum(shards, [])) == [job(i).id for i in range(20)]
            assert all(shards) and all(shard_of(i, 3) == n for n, s in enumerate(shards)
                                       for i in s)
            none, more = await store.window(b"q", 0, 1_600_000_000_000, None, 100)
            assert none == [] and not more
        finally:
            await store.stop()

    asyncio.run(run())
    assert os.path.exists(queue_dir / "1700000000001-a.seg")


def test_expiry_by_age_by_size_and_by_a_deleted_policy(tmp_path: Path) -> None:
    """Segments wholly older than RETAIN go; then the oldest while over RETAIN-BYTES;
    a queue whose policy was deleted loses them all; an unknown queue keeps them."""
    now = 1_700_000_100_000
    root = tmp_path / "retain"
    for name, queue in (("a", b"q"), ("b", b"gone"), ("c", b"unknown")):
        (root / name).mkdir(parents=True)
        (root / name / "QUEUE").write_bytes(queue)
    old = [RetainedJob(b"D-old%035d" % i, b"q", b"x", 1, now - 100_000, [], [])
           for i in range(3)]
    mid = [RetainedJob(b"D-mid%035d" % i, b"q", b"x" * 500, 2, now - 5_000, [], [])
           for i in range(3)]
    new = [RetainedJob(b"D-new%035d" % i, b"q", b"x" * 500, 3, now - 1_000, [], [])
           for i in range(3)]
    write(root / "a" / "1-a.seg", old)
    write(root / "a" / "2-b.seg", mid)
    write(root / "a" / "3-c.seg", new)
    write(root / "b" / "1-a.seg", mid)
    write(root / "c" / "1-a.seg", mid)

    class Node:
        id = "n" * 40

        class policies:  # noqa: N801
            policies = {b"q": QueuePolicy(b"q", retain=60),
                        b"gone": QueuePolicy(b"gone", deleted=True)}

    async def run() -> None:
        store = RetentionStore(Node(), str(root))  # type: ignore[arg-type]
        await store.start(asyncio.get_running_loop())
        await store.indexed()
        try:
            store.expire(now)  # RETAIN 60 s: the segment acked 100 s ago goes
            assert [s.path[-7:] for s in store.queues[b"q"].segments] == ["2-b.seg",
                                                                           "3-c.seg"]
            assert b"gone" not in store.queues and store.queues[b"unknown"].segments
            size = store.queues[b"q"].size
            Node.policies.policies[b"q"] = QueuePolicy(b"q", retain=60,
                                                       retain_bytes=size - 1)
            store.expire(now)  # over RETAIN-BYTES: the oldest goes
            assert [s.path[-7:] for s in store.queues[b"q"].segments] == ["3-c.seg"]
            assert store.expired_segments == 3
        finally:
            await store.stop()

    asyncio.run(run())
    assert sorted(p.name for p in (root / "a").iterdir()) == ["3-c.seg", "QUEUE"]
    assert not (root / "b").exists() and (root / "c" / "1-a.seg").exists()
