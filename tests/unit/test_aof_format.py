"""The AOF's bytes: Disque's job serialization (SER_STORAGE), the RESP records, the
parser that tells a cut-off tail from damage, and the loader applied to a Node."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from disq.aof.fileformat import (
    FormatError,
    Incomplete,
    RecordEncoder,
    RecordReader,
    deljob_record,
    loadjob_record,
    parse_record,
)
from disq.aof.loader import AofLoader, AofLoadError
from disq.aof.serialize import CorruptJob, JobEncoder, deserialize_job
from disq.config import Config
from disq.ids import new_node_id
from disq.job import (
    ACTIVE,
    BCAST_QUEUED,
    BCAST_WILLQUEUE,
    DELIVERED,
    QUEUED,
    Job,
    holder_set,
)
from disq.node import Node, now_ms
from disq.ports import NoPersistence
from disq.requests import AddJob

ME = "a" * 40
OTHER = "b" * 40
JOB_ID = b"D-aaaaaaaa-0123456789abcdefghijklmn-05a1"


def a_job(**fields: object) -> Job:
    job = Job(JOB_ID, b"myqueue", b"body bytes", QUEUED, 1_700_000_000_123_000_007,
              1_700_086_400_500, 3, 60, 2)
    job.flags = BCAST_QUEUED | BCAST_WILLQUEUE
    job.nacks, job.deliveries = 4, 5
    for name, value in fields.items():
        setattr(job, name, value)
    return job


def disque_bytes(job_id: bytes, state: int, flags: int, repl: int, etime_s: int, ctime: int,
                 delay: int, retry: int, nacks: int, deliv: int, queue: bytes, body: bytes,
                 nodes: list[bytes], gc_retry: int = 0) -> bytes:
    """A job as Disque's serializeJob lays it out, field by field from `struct job`
    (x86-64, little-endian): written independently of disq's encoder."""
    fixed = (job_id + bytes([state | gc_retry << 4, flags]) + struct.pack("<H", repl)
             + struct.pack("<I", etime_s) + struct.pack("<Q", ctime)
             + struct.pack("<I", delay) + struct.pack("<I", retry)
             + struct.pack("<H", nacks) + struct.pack("<H", deliv))
    assert len(fixed) == 68  # JOB_STRUCT_SER_LEN
    rest = (struct.pack("<I", len(queue)) + queue + struct.pack("<I", len(body)) + body
            + struct.pack("<I", len(nodes)) + b"".join(nodes))
    return struct.pack("<I", len(fixed) + len(rest)) + fixed + rest


# -- serialization -----------------------------------------------------------------------

def test_serialize_is_disques_layout() -> None:
    job = a_job(nodes_delivered=frozenset({ME, OTHER}))
    data = JobEncoder(ME).serialize(job)
    nodes = [n.encode() for n in job.nodes_delivered]  # type: ignore[union-attr]
    # etime 1_700_086_400_500 ms is stored as 1_700_086_401 s (rounded up)
    assert data == disque_bytes(JOB_ID, QUEUED, 3, 2, 1_700_086_401, 1_700_000_000_123_000_007,
                                3, 60, 4, 5, b"myqueue", b"body bytes", nodes)


def test_serialize_alone_lists_this_node_and_rounds_etime_up() -> None:
    job = a_job(etime=1_700_086_400_000)  # a whole second: no rounding
    data = JobEncoder(ME).serialize(job)
    assert data == disque_bytes(JOB_ID, QUEUED, 3, 2, 1_700_086_400, 1_700_000_000_123_000_007,
                                3, 60, 4, 5, b"myqueue", b"body bytes", [ME.encode()])
    assert deserialize_job(data).etime == 1_700_086_400_000


def test_serialize_saturates_wide_counters() -> None:
    job = a_job(nacks=70_000, deliveries=1 << 20, retry=1 << 40)
    back = deserialize_job(JobEncoder(ME).serialize(job))
    assert (back.nacks, back.deliveries, back.retry) == (0xFFFF, 0xFFFF, 0xFFFFFFFF)


def test_round_trip_keeps_every_stored_field() -> None:
    job = a_job(nodes_delivered=frozenset({ME, OTHER}), flags=BCAST_QUEUED | DELIVERED)
    back = deserialize_job(JobEncoder(ME).serialize(job))
    for field in ("id", "queue", "body", "state", "flags", "repl", "ctime", "delay", "retry",
                  "nacks", "deliveries", "nodes_delivered"):
        assert getattr(back, field) == getattr(job, field), field
    assert back.etime == 1_700_086_401_000  # rounded up to the second


def test_deserialize_a_disque_record() -> None:
    """What Disque wrote: gc_retry in the state byte's high nibble, an empty body,
    a node this node does not know (dropped, as Disque drops unknown nodes)."""
    data = disque_bytes(JOB_ID, ACTIVE, 1, 3, 2_000_000_000, 42, 0, 300, 0, 1, b"q", b"",
                        [ME.encode(), OTHER.encode()], gc_retry=5)
    job = deserialize_job(data, {ME: ME})
    assert (job.state, job.flags, job.repl, job.etime, job.ctime) == (ACTIVE, 1, 3,
                                                                    2_000_000_000_000, 42)
    assert (job.queue, job.body, job.deliveries) == (b"q", b"", 1)
    assert job.nodes_delivered == {ME}


@pytest.mark.parametrize("damage", [
    lambda d: d[:50],  # too short
    lambda d: d[:-1],  # length field disagrees
    lambda d: d + b"x",
    lambda d: d[:4] + b"X" + d[5:],  # not a job ID
    lambda d: d[:72] + b"\xff\xff\x00\x00" + d[76:],  # queue length past the end
    lambda d: d[:-44] + b"\x05\x00\x00\x00" + d[-40:],  # 5 node IDs announced, 1 present
])
def test_deserialize_refuses_damage(damage) -> None:
    data = JobEncoder(ME).serialize(a_job())
    with pytest.raises(CorruptJob):
        deserialize_job(damage(data))


@pytest.mark.parametrize("fields", [
    {},
    {"nodes_delivered": frozenset({ME, OTHER})},
    {"nodes_delivered": holder_set((ME, OTHER))},  # shared: its part is cached
    {"queue": b"", "body": b""},
    {"body": b"b" * 100_000, "queue": b"q" * 300},
    {"nacks": 70_000, "retry": 1 << 40},  # saturated by the general encoder
    {"etime": 1_700_086_400_000},
])
def test_record_encoder_matches_the_general_one(fields) -> None:
    encoder = RecordEncoder(ME)
    job = a_job(**fields)
    for _ in range(2):  # the second time from its caches
        assert encoder.loadjob_record(job) == loadjob_record(encoder.serialize(job))


# -- records and the parser ---------------------------------------------------------------

def some_records(count: int = 5) -> tuple[bytes, list[int]]:
    """A file of LOADJOBs and DELJOBs; the offsets where each record starts."""
    encoder = JobEncoder(ME)
    data, starts = b"", []
    for i in range(count):
        job_id = JOB_ID[:-9] + b"%04d-05a1" % i
        starts.append(len(data))
        data += loadjob_record(encoder.serialize(a_job(id=job_id, body=b"x" * i)))
        if i % 2:
            starts.append(len(data))
            data += deljob_record(job_id)
    return data, starts


def test_parse_records() -> None:
    data, starts = some_records()
    reader = RecordReader(data)
    records = list(reader)
    assert [offset for offset, _ in records] == starts
    assert reader.pos == len(data) and reader.cut_off is None
    assert records[2][1] == [b"DELJOB", JOB_ID[:-9] + b"0001-05a1"]
    assert deserialize_job(records[0][1][1]).id == JOB_ID[:-9] + b"0000-05a1"


def test_generic_commands_parse_too() -> None:
    data = b"*3\r\n$6\r\ndeljob\r\n$3\r\nabc\r\n$0\r\n\r\n"
    assert parse_record(data, 0) == ([b"deljob", b"abc", b""], len(data))


def test_every_cut_of_the_last_record_is_a_cut_off_tail() -> None:
    data, starts = some_records(3)
    last = starts[-1]
    for cut in range(last + 1, len(data)):
        reader = RecordReader(data[:cut])
        records = list(reader)
        assert [o for o, _ in records] == starts[:-1], cut
        assert reader.pos == last and reader.cut_off is not None


def test_zero_filled_tail_is_a_cut_off() -> None:
    data, starts = some_records(3)
    for tail in (b"\0" * 4096, data[starts[-1]:starts[-1] + 30] + b"\0" * 100):
        reader = RecordReader(data[:starts[-1]] + tail)
        assert len(list(reader)) == len(starts) - 1
        assert reader.pos == starts[-1] and "zero bytes" in reader.cut_off


def test_damage_in_the_middle_names_its_offset() -> None:
    data, starts = some_records(5)
    at = starts[2]
    broken = data[:at] + b"#" + data[at + 1:]
    with pytest.raises(FormatError) as exc:
        list(RecordReader(broken))
    assert exc.value.offset == at


def test_a_bad_length_in_the_middle_is_not_taken_for_a_tail() -> None:
    """A length field hit in the middle makes that record run past the end of the
    file; the whole records after it show it is damage, not a cut-off tail."""
    data, starts = some_records(5)
    at = starts[1]
    head = data.index(b"$", at + 17)
    eol = data.index(b"\r\n", head)
    broken = data[:head + 1] + b"9" * (eol - head - 1) + data[eol:]
    with pytest.raises(FormatError) as exc:
        list(RecordReader(broken))
    assert exc.value.offset == at


def test_incomplete_and_format_errors() -> None:
    with pytest.raises(Incomplete):
        parse_record(b"*2\r\n$7\r\nLOAD", 0)
    with pytest.raises(FormatError):
        parse_record(b"*2\r\n$x\r\n", 0)
    with pytest.raises(FormatError):
        parse_record(b"*0\r\n", 0)
    with pytest.raises(FormatError):
        parse_record(b"*1\r\n$3\r\nabcde", 0)  # no CRLF after the bulk


# -- the loader ------------------------------------------------------------------------

@pytest.fixture
def node() -> Node:
    n = Node(Config(), ME)
    n.arm_timer = lambda when: None
    return n


def write_file(path: Path, *records: bytes) -> str:
    path.write_bytes(b"".join(records))
    return str(path)


def load(node: Node, path: str, *, enqueue: bool = False, truncated: bool = True,
         known: dict[str, str] | None = None) -> AofLoader:
    loader = AofLoader(node, path, enqueue_jobs=enqueue, load_truncated=truncated,
                       known_ids=known if known is not None else {ME: ME, OTHER: OTHER})
    for _ in loader.run():
        pass
    return loader


def stored(job_id: bytes = JOB_ID, **fields: object) -> bytes:
    defaults: dict[str, object] = {"id": job_id, "etime": now_ms() + 3_600_000}
    defaults.update(fields)
    return loadjob_record(JobEncoder(ME).serialize(a_job(**defaults)))


def test_load_queued_job_comes_back_active(node: Node, tmp_path: Path) -> None:
    path = write_file(tmp_path / "a.aof", stored())
    before = now_ms()
    loader = load(node, path)
    job = node.lookup(JOB_ID)
    assert job is not None and job.state == ACTIVE and node.qlen(b"myqueue") == 0
    assert job.nodes_delivered is None  # only this node: the compact form
    # requeued by its timer after DELAY + RETRY, as Disque computes it
    assert before + 63_000 - 500 <= job.qtime <= now_ms() + 63_000 + 500
    assert job.flags & BCAST_WILLQUEUE and job.awake
    assert loader.jobs_loaded == 1


def test_load_with_enqueue_jobs_once_queues_them(node: Node, tmp_path: Path) -> None:
    other = JOB_ID[:-9] + b"0002-05a1"
    path = write_file(tmp_path / "a.aof", stored(), stored(other, state=ACTIVE))
    load(node, path, enqueue=True)
    assert node.lookup(JOB_ID).state == QUEUED  # type: ignore[union-attr]
    assert node.lookup(other).state == ACTIVE  # type: ignore[union-attr]
    assert node.qlen(b"myqueue") == 1


def test_load_never_requeues_retry_0_jobs(node: Node, tmp_path: Path) -> None:
    path = write_file(tmp_path / "a.aof", stored(retry=0, repl=1))
    load(node, path, enqueue=True)
    job = node.lookup(JOB_ID)
    assert job is not None and job.state == ACTIVE and job.qtime == 0


def test_load_skips_expired_deleted_and_duplicate(node: Node, tmp_path: Path) -> None:
    second = JOB_ID[:-9] + b"0002-05a1"
    third = JOB_ID[:-9] + b"0003-05a1"
    path = write_file(tmp_path / "a.aof",
                      stored(etime=now_ms() - 1000),
                      stored(second), stored(second, body=b"later copy"),
                      stored(third), deljob_record(third))
    load(node, path)
    assert node.lookup(JOB_ID) is None
    assert node.lookup(second).body == b"body bytes"  # type: ignore[union-attr]
    assert node.lookup(third) is None
    assert len(node.jobs) == 1


def test_load_keeps_known_holders_and_itself(node: Node, tmp_path: Path) -> None:
    path = write_file(tmp_path / "a.aof", stored(nodes_delivered=frozenset({OTHER, "c" * 40})))
    load(node, path)
    assert node.lookup(JOB_ID).nodes_delivered == {ME, OTHER}  # type: ignore[union-attr]


def test_load_truncates_a_cut_off_tail(node: Node, tmp_path: Path) -> None:
    whole = stored()
    second = stored(JOB_ID[:-9] + b"0002-05a1")
    path = write_file(tmp_path / "a.aof", whole, second[:-10])
    loader = load(node, path)
    assert len(node.jobs) == 1
    assert Path(path).read_bytes() == whole and loader.size_after == len(whole)


def test_load_refuses_a_cut_off_tail_when_told(node: Node, tmp_path: Path) -> None:
    path = write_file(tmp_path / "a.aof", stored(), stored()[:-3])
    with pytest.raises(AofLoadError, match="Unexpected end of file"):
        load(node, path, truncated=False)


def test_load_stops_at_damage_naming_the_offset(node: Node, tmp_path: Path) -> None:
    first = stored()
    bad = bytearray(stored(JOB_ID[:-9] + b"0002-05a1"))
    bad[28] ^= 0xFF  # the job ID's first dash
    path = write_file(tmp_path / "a.aof", first, bytes(bad), stored(JOB_ID[:-9] + b"0003-05a1"))
    with pytest.raises(AofLoadError, match=f"offset {len(first)}"):
        load(node, path)
    path = write_file(tmp_path / "b.aof", first, b"*2\r\n$3\r\nSET\r\n$1\r\nx\r\n", first)
    with pytest.raises(AofLoadError, match=f"Unknown command 'SET'.*offset {len(first)}"):
        load(node, path)


def test_load_missing_or_empty_file(node: Node, tmp_path: Path) -> None:
    load(node, str(tmp_path / "missing.aof"))
    load(node, write_file(tmp_path / "empty.aof"))
    assert len(node.jobs) == 0


def test_node_logs_what_disque_logs() -> None:
    """The hooks: LOADJOB when a job is queued (ADDJOB), DELJOB on ack, expiry,
    DELJOB and flush, nothing for a state change in between."""
    node = Node(Config(), new_node_id())
    node.arm_timer = lambda when: None

    class Log(NoPersistence):
        def __init__(self) -> None:
            self.records: list[tuple[str, bytes, int]] = []

        @property
        def recording(self) -> bool:
            return True

        def job_stored(self, job: Job) -> None:
            self.records.append(("load", job.id, job.state))

        def job_removed(self, job_id: bytes) -> None:
            self.records.append(("del", job_id, 0))

    log = Log()
    node.set_persistence(log)
    a = node.admission.add_job(AddJob(b"q", b"a", ttl=100))
    b = node.admission.add_job(AddJob(b"q", b"b", delay=5, ttl=100))
    c = node.admission.add_job(AddJob(b"q", b"c", ttl=100))
    assert log.records == [("load", a.id, QUEUED), ("load", b.id, ACTIVE),
                           ("load", c.id, QUEUED)]
    del log.records[:]
    node.consumers.get_jobs([b"q"], 1)
    node.requeue([a.id], nack=True)
    assert log.records == []
    node.ack([a.id])
    node.delete([b.id])
    c.etime = now_ms() - 1
    node.update_awake(c)
    node.wakeups.run()
    assert log.records == [("del", a.id, 0), ("del", b.id, 0), ("del", c.id, 0)]
    d = node.admission.add_job(AddJob(b"q", b"d", ttl=100))
    del log.records[:]
    node.flushall()
    assert log.records == [("del", d.id, 0)]
