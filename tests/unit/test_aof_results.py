"""Results in the AOF (a disq extension): a kept result's serialization and its
LOADRESULT record, FLUSHRESULTS, what the loader keeps (not past its time, the first
result of a job, within memory), damage refused with its offset, and what the core
logs (a result kept, nothing for a plain ACK)."""

from __future__ import annotations

import asyncio
import os
import random
import struct
import threading
from pathlib import Path

import pytest

from disq.aof import writer as writer_module
from disq.aof.fileformat import (
    FLUSHRESULTS_RECORD,
    FormatError,
    check_record,
    loadjob_record,
    loadresult_record,
    parse_record,
)
from disq.aof.frames import reader_for
from disq.aof.loader import AofLoader, AofLoadError
from disq.aof.serialize import (
    CorruptJob,
    JobEncoder,
    deserialize_end,
    serialize_end,
)
from disq.aof.writer import AppendOnlyFile
from disq.config import Config
from disq.job import QUEUED, Job
from disq.node import Node, now_ms
from disq.policies import MAX_RESULT_TTL_MS
from disq.ports import NoPersistence
from disq.requests import AddJob
from disq.results import ACKED_END, DEAD_END, END_FOOTPRINT, JobEnd

ME = "a" * 40
JOB_A = b"D-aaaaaaaa-" + b"a" * 24 + b"-05a1"
JOB_B = b"D-bbbbbbbb-" + b"b" * 24 + b"-05a1"
HOUR = 3_600_000


def an_end(job_id: bytes = JOB_A, how: bytes = ACKED_END, data: bytes | None = b"done",
           expires: int | None = None, ttl: int = HOUR, queue: bytes | None = b"q") -> JobEnd:
    return JobEnd(job_id, how, data, now_ms() + ttl if expires is None else expires, ttl,
                  queue)


def fields(end: JobEnd) -> tuple[object, ...]:
    return end.job_id, end.how, end.data, end.expires, end.ttl, end.queue


# -- serialization ------------------------------------------------------------------------

@pytest.mark.parametrize("end", [
    an_end(),
    an_end(how=DEAD_END, data=b"error: \x00\xff binary", queue=b"q" * 2000),
    an_end(data=None, queue=None),  # a plain ACK's end kept for a WAITJOB, a dummy ACK
    an_end(data=b"", queue=b"", ttl=MAX_RESULT_TTL_MS),
], ids=["acked", "dead", "none", "empty"])
def test_a_result_round_trips(end: JobEnd) -> None:
    assert fields(deserialize_end(serialize_end(end))) == fields(end)


def test_the_layout() -> None:
    data = serialize_end(an_end(expires=5000, ttl=1000, queue=None))
    assert data == (struct.pack("<BBQQ", 1, 0, 5000, 1000) + JOB_A
                    + b"\xff\xff\xff\xff" + struct.pack("<I", 4) + b"done")


def _damaged(offset: int, value: bytes) -> bytes:
    data = bytearray(serialize_end(an_end(expires=5000, ttl=1000)))
    data[offset:offset + len(value)] = value
    return bytes(data)


@pytest.mark.parametrize("data, reason", [
    (b"", "shorter than any"),
    (_damaged(0, b"\x02"), "unknown format"),
    (_damaged(1, b"\x02"), "unknown way"),
    (_damaged(18, b"X"), "invalid job ID"),
    (_damaged(10, struct.pack("<Q", 0)), "kept for 0 ms"),
    (_damaged(10, struct.pack("<Q", MAX_RESULT_TTL_MS + 1)), "kept for"),
    (_damaged(2, struct.pack("<Q", 999)), "until 999"),  # before its own TTL
    (_damaged(58, struct.pack("<I", 1 << 30)), "cut short"),  # the queue's length
    (serialize_end(an_end())[:-1], "cut short"),
    (serialize_end(an_end()) + b"x", "1 bytes after"),
], ids=["empty", "format", "how", "id", "ttl-0", "ttl-long", "expires", "queue-length",
        "cut", "trailing"])
def test_damage_is_refused(data: bytes, reason: str) -> None:
    with pytest.raises(CorruptJob, match=reason):
        deserialize_end(data)


def test_every_cut_and_flipped_byte_is_refused_or_decodes() -> None:
    """No other exception than CorruptJob, whatever the bytes (a damaged or hostile
    file); what decodes is within the bounds."""
    data = serialize_end(an_end(how=DEAD_END, data=b"x" * 50))
    for cut in range(len(data)):
        with pytest.raises(CorruptJob):
            deserialize_end(data[:cut])
    rng = random.Random(7)
    for _ in range(3000):
        damaged = bytearray(data)
        for _ in range(rng.randint(1, 4)):
            damaged[rng.randrange(len(damaged))] = rng.randrange(256)
        try:
            end = deserialize_end(bytes(damaged))
        except CorruptJob:
            continue
        assert 0 < end.ttl <= MAX_RESULT_TTL_MS and end.how in (ACKED_END, DEAD_END)


def test_records_parse_and_check() -> None:
    record = loadresult_record(an_end())
    args, after = parse_record(record + FLUSHRESULTS_RECORD, 0)
    assert args[0] == b"LOADRESULT" and after == len(record)
    check_record(args, 0)
    flush, end = parse_record(record + FLUSHRESULTS_RECORD, after)
    assert flush == [b"FLUSHRESULTS"] and end == len(record) + len(FLUSHRESULTS_RECORD)
    check_record(flush, after)
    with pytest.raises(FormatError, match="corrupted LOADRESULT data: .*cut short"):
        check_record([b"LOADRESULT", args[1][:-1]], 0)
    with pytest.raises(FormatError, match="wrong number"):
        check_record([b"LOADRESULT"], 0)


# -- loading ------------------------------------------------------------------------------

@pytest.fixture
def node() -> Node:
    n = Node(Config(), ME)
    n.arm_timer = lambda when: None
    return n


def load(node: Node, path: Path, *records: bytes, corrupt: str = "refuse") -> AofLoader:
    path.write_bytes(b"".join(records))
    loader = AofLoader(node, str(path), enqueue_jobs=False, load_truncated=True,
                       known_ids={ME: ME}, load_corrupt=corrupt)
    for _ in loader.run():
        pass
    return loader


def test_load_keeps_live_results_the_first_of_each_job(node: Node, tmp_path: Path) -> None:
    now = now_ms()
    job = Job(JOB_B, b"q", b"body", QUEUED, 1, now + HOUR, 0, 300, 1)
    load(node, tmp_path / "a.aof",
         loadresult_record(an_end(JOB_A, data=b"first")),
         loadjob_record(JobEncoder(ME).serialize(job)),  # records of both kinds mixed
         loadresult_record(an_end(JOB_A, data=b"second")),
         loadresult_record(an_end(JOB_B, expires=now - 1)))  # past its time
    end = node.ends.get(JOB_A, now_ms())
    assert end is not None and (end.data, end.queue, end.repeats) == (b"first", b"q", 0)
    assert node.ends.get(JOB_B, now_ms()) is None and node.lookup(JOB_B) is not None
    assert len(node.ends) == 1 and node.ends.bytes == end.size
    assert node.ends.repeats == 0  # counted when it came, not again


def test_a_later_result_after_an_expired_one_is_kept(node: Node, tmp_path: Path) -> None:
    now = now_ms()
    load(node, tmp_path / "a.aof",
         loadresult_record(an_end(data=b"old run", expires=now - 10, ttl=1000)),
         loadresult_record(an_end(data=b"new run")))
    assert node.ends.get(JOB_A, now_ms()).data == b"new run"  # type: ignore[union-attr]


def test_flushresults_forgets_what_came_before(node: Node, tmp_path: Path) -> None:
    load(node, tmp_path / "a.aof", loadresult_record(an_end(JOB_A)), FLUSHRESULTS_RECORD,
         loadresult_record(an_end(JOB_B)))
    assert [*node.ends.kept] == [JOB_B]


def test_never_kept_longer_than_its_ttl_from_now(node: Node, tmp_path: Path) -> None:
    """An expiry far ahead (a clock set back since, or a hostile file): its TTL from
    the load at most."""
    before = now_ms()
    load(node, tmp_path / "a.aof",
         loadresult_record(an_end(expires=before + 100 * HOUR, ttl=HOUR)))
    end = node.ends.kept[JOB_A]
    assert before + HOUR <= end.expires <= now_ms() + HOUR


def test_loaded_results_expire_in_order(node: Node, tmp_path: Path) -> None:
    """A rewrite writes the results kept while it ran before the ones it listed: the
    older ones still expire at their time."""
    now = now_ms()
    load(node, tmp_path / "a.aof",
         loadresult_record(an_end(JOB_B, expires=now + HOUR)),
         loadresult_record(an_end(JOB_A, expires=now + 1000)))
    assert node.ends.expire(now + 1000) == 1
    assert [*node.ends.kept] == [JOB_B]


def test_loading_evicts_over_maxmemory(node: Node, tmp_path: Path) -> None:
    node.full_bytes = 3 * (END_FOOTPRINT + len(JOB_A) + 1000)  # maxmemory's 95% mark
    ids = [b"D-aaaaaaaa-%024d-05a1" % i for i in range(10)]
    load(node, tmp_path / "a.aof",
         *(loadresult_record(an_end(job_id, data=b"x" * 1000)) for job_id in ids))
    assert [*node.ends.kept] == ids[7:] and node.ends.evicted == 7  # the oldest went


def test_a_damaged_result_stops_the_load_naming_its_offset(node: Node,
                                                           tmp_path: Path) -> None:
    good = loadresult_record(an_end(JOB_A))
    end = an_end(JOB_B)
    bad = bytearray(loadresult_record(end))
    bad[len(bad) - len(serialize_end(end)) - 2 + 1] = 9  # the end's `how`
    with pytest.raises(AofLoadError, match=f"offset {len(good)}: corrupted LOADRESULT data"):
        load(node, tmp_path / "a.aof", good, bytes(bad), good)
    node.flushall()
    loader = load(node, tmp_path / "b.aof", good, bytes(bad), good, corrupt="truncate")
    assert [*node.ends.kept] == [JOB_A] and loader.size_after == len(good)


def test_an_old_file_without_results_loads_as_before(node: Node, tmp_path: Path) -> None:
    job = Job(JOB_A, b"q", b"body", QUEUED, 1, now_ms() + HOUR, 0, 300, 1)
    load(node, tmp_path / "a.aof", loadjob_record(JobEncoder(ME).serialize(job)))
    assert node.lookup(JOB_A) is not None and len(node.ends) == 0


# -- what the core logs -------------------------------------------------------------------

class Recorder(NoPersistence):
    __slots__ = ("log",)

    def __init__(self) -> None:
        self.log: list[tuple[str, object]] = []

    @property
    def recording(self) -> bool:
        return True

    def job_removed(self, job_id: bytes) -> None:
        self.log.append(("removed", job_id))

    def result_stored(self, end: JobEnd) -> None:
        self.log.append(("result", fields(end)))

    def results_flushed(self) -> None:
        self.log.append(("flushed", None))


def test_the_core_logs_a_kept_result_and_nothing_more_for_a_plain_ack(node: Node) -> None:
    recorder = Recorder()
    node.set_persistence(recorder)
    plain = node.admission.add_job(AddJob(b"q", b"a", ttl=3600)).id
    with_result = node.admission.add_job(AddJob(b"q", b"b", ttl=3600)).id
    assert node.ack([plain]) == 1
    assert recorder.log == [("removed", plain)]
    recorder.log.clear()
    assert node.ack([with_result], b"the result") == 1
    kept = node.ends.kept[with_result]
    assert recorder.log == [("result", fields(kept)), ("removed", with_result)]
    assert kept.queue == b"q" and kept.data == b"the result"
    recorder.log.clear()
    assert not node.keep_result(with_result, ACKED_END, b"again", now_ms())  # first stays
    assert recorder.log == []
    node.flushall()
    assert recorder.log == [("flushed", None)] and len(node.ends) == 0
    node.flushall()  # nothing kept: nothing to log
    assert recorder.log == [("flushed", None)]


async def test_under_always_a_result_is_answered_after_its_fsync(tmp_path, monkeypatch) -> None:
    """What holds an ACKJOB RESULT's reply (`commit`, `on_durable`): its record, fsynced
    under `appendfsync always`, even with no job record logged with it."""
    monkeypatch.chdir(tmp_path)
    config = Config()
    config.apply("appendfsync", ["always"])
    node = Node(config, ME)
    node.arm_timer = lambda when: None
    aof = AppendOnlyFile(config, node, asyncio.get_running_loop())
    aof.open()
    gate = threading.Event()
    real_fdatasync = os.fdatasync

    def slow_fdatasync(fd: int) -> None:
        gate.wait(5)
        real_fdatasync(fd)

    monkeypatch.setattr(writer_module.os, "fdatasync", slow_fdatasync)
    assert node.ack([JOB_A], b"the result") == 0  # a job not held here: the result only
    assert aof.appended == 1 and aof.commit() is False
    answered: list[bool] = []
    aof.on_durable(lambda: answered.append(True))
    await asyncio.sleep(0.05)
    assert answered == []  # the record is written, its fsync not done
    args = [args for _, args in reader_for((tmp_path / "disque.aof").read_bytes(), None)]
    assert [name for name, *_ in args] == [b"LOADRESULT"]
    assert deserialize_end(args[0][1]).data == b"the result"
    gate.set()
    deadline = asyncio.get_running_loop().time() + 5
    while not answered and asyncio.get_running_loop().time() < deadline:
        await asyncio.sleep(0.001)
    assert answered == [True] and aof.synced == aof.appended
    aof.shutdown()
