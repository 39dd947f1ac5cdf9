"""The scheduling and priority job fields (ADDJOB DELAY-MS, AT, PRIORITY, GROUP) in the core, on the
bus and in the AOF's records, without a server (the replication tests' in-memory bus)."""

from __future__ import annotations

from typing import Any

import msgpack
import pytest

from disq import errors
from disq.aof.fileformat import RecordEncoder, check_record, parse_record
from disq.aof.serialize import CorruptJob, deserialize_ext, serialize_ext
from disq.cluster import messages as m
from disq.config import Config
from disq.dedup_table import scoped_key
from disq.ids import new_node_id
from disq.job import ACTIVE, DEFAULT_PRIORITY, QUEUED, WAIT_REPL, Job, JobExt
from disq.node import Node, now_ms
from disq.replication.federation import federation_of
from disq.replication.wire import (
    COPY_FIELDS,
    decode_copy,
    decode_job,
    encode_copy,
    encode_job,
    without_ext,
)
from disq.requests import AddJob

from .test_replication import Member, cluster

HOUR_MS = 3_600_000


def request(text: str) -> AddJob:
    return AddJob.parse([a.encode() for a in f"ADDJOB q body 0 {text}".split()])


def solo() -> Node:
    return Node(Config(), new_node_id())


def added(member: Member, text: str) -> Job:
    """ADDJOB on a member of an in-memory cluster, replicated."""
    job = member.node.admission.add_job(request(text))
    if job.state == WAIT_REPL:
        member.repl.wait(job, lambda reply: None)
    return job


# -- the core ---------------------------------------------------------------------------------

def test_a_plain_job_stays_plain() -> None:
    node = solo()
    job = node.admission.add_job(request("REPLICATE 1 RETRY 5 DELAY 1"))
    assert job.ext is None
    assert len(encode_copy(job, now_ms())) == COPY_FIELDS
    assert len(encode_job(job, node.id, now_ms())) == COPY_FIELDS + 1


def test_at_schedules_the_job_for_that_millisecond_then_retry_counts_from_there() -> None:
    node = solo()
    due = now_ms() + 60_000
    job = node.admission.add_job(request(f"AT {due} RETRY 10 PRIORITY 3 GROUP g"))
    assert job.ext is not None
    assert (job.ext.priority, job.ext.group, job.ext.due) == (3, b"g", due)
    assert (job.state, job.qtime, job.awake, job.delay) == (ACTIVE, due, due, 0)
    assert node.timers.next_deadline() == due
    node.wakeups.run(due - 1)  # a timer that wakes early does nothing
    assert job.state == ACTIVE and node.qlen(b"q") == 0
    node.wakeups.run(due)
    assert job.state == QUEUED and node.qlen(b"q") == 1
    assert due + 10_000 - 250 <= job.qtime <= due + 10_000 + 250  # requeue: due + RETRY


def test_delay_ms_and_a_past_at() -> None:
    node = solo()
    before = now_ms()
    job = node.admission.add_job(request("DELAY-MS 1500"))
    # counted from the next millisecond: never early by the part of one now_ms drops
    assert job.ext is not None and before + 1501 <= job.ext.due <= now_ms() + 1501
    assert job.state == ACTIVE and job.qtime == job.ext.due
    for text in ("AT 0", f"AT {before - 5}", "DELAY-MS 0"):  # due already: queued now
        now = now_ms()
        job = node.admission.add_job(request(text))
        assert job.state == QUEUED and job.ext is not None and job.ext.due >= now
    job = node.admission.add_job(request("PRIORITY 9"))
    assert job.state == QUEUED and job.ext is not None
    assert (job.ext.priority, job.ext.group, job.ext.due) == (9, None, 0)
    job = node.admission.add_job(request("GROUP g DELAY 5"))  # a DELAY in seconds, as Disque's
    assert job.ext is not None and job.ext.priority == DEFAULT_PRIORITY and job.ext.due == 0
    assert job.state == ACTIVE and job.qtime >= now_ms() + 4000


@pytest.mark.parametrize(("text", "message"), [
    ("DELAY-MS 10000 TTL 10", "The specified DELAY-MS is beyond the TTL"),
    ("DELAY-MS 9999999999 TTL 10", "The specified DELAY-MS is beyond the TTL"),
    ("AT {in_a_day} TTL 3600", "The specified AT is beyond the TTL"),
    ("AT {in_a_day}", "The specified AT is beyond the TTL"),  # TTL: one day by default
    # the core's checks in Disque's order: RETRY 0 with REPLICATE, then the DELAYs
    ("AT {in_a_day} RETRY 0 REPLICATE 2", "With RETRY set to 0 please explicitly set"),
])
def test_a_due_time_the_job_would_not_live_to_is_refused(text: str, message: str) -> None:
    node = solo()
    with pytest.raises(errors.DisqError, match=message):
        node.admission.add_job(request(text.format(in_a_day=now_ms() + 24 * HOUR_MS + 1000)))
    assert len(node.jobs) == 0 and len(node.timers) == 0


# -- the bus ----------------------------------------------------------------------------------

def wire_trip(data: list[Any]) -> Any:
    return msgpack.unpackb(msgpack.packb(data, use_bin_type=True), raw=False)


def test_extended_fields_round_trip_on_the_wire() -> None:
    node = solo()
    now = now_ms()
    job = node.admission.add_job(request(f"AT {now + HOUR_MS} PRIORITY 0 GROUP tenant"))
    copy = decode_copy(wire_trip(encode_copy(job, now)), now, "peer")
    assert copy is not None and copy.ext is not None
    assert (copy.ext.priority, copy.ext.group, copy.ext.due) == (0, b"tenant", now + HOUR_MS)
    moved = decode_job(wire_trip(encode_job(job, node.id, now)), now, {node.id: node.id},
                       peer_id="peer")
    assert moved is not None and moved.ext is not None and moved.nodes_delivered == {node.id}
    assert (moved.ext.priority, moved.ext.group, moved.ext.due) == (0, b"tenant",
                                                                    now + HOUR_MS)
    no_group = node.admission.add_job(request("PRIORITY 200"))
    copy = decode_copy(wire_trip(encode_copy(no_group, now)), now)
    assert copy is not None and copy.ext is not None
    assert (copy.ext.priority, copy.ext.group, copy.ext.due) == (200, None, 0)


@pytest.mark.parametrize("ext", [
    None, 5, b"x", [], [1, None], [1, None, 0, 0], [256, None, 0], [-1, None, 0],
    [True, None, 0], [1.5, None, 0], ["1", None, 0], [1, b"", 0], [1, b"g" * 257, 0],
    [1, "text", 0], [1, 5, 0], [1, None, -1], [1, None, 2**64], [1, None, None],
    [1, None, 1.5], [1, None, False],
])
def test_bad_extended_fields_drop_the_job(ext: object) -> None:
    node = solo()
    job = node.admission.add_job(request("PRIORITY 1"))
    now = now_ms()
    if type(ext) is list:  # (in a copy, other values there are DEDUP's, checked there)
        copy = encode_copy(job, now)
        copy[-1] = ext
        assert decode_copy(copy, now) is None
    moved = encode_job(job, node.id, now)
    moved[-1] = ext
    assert decode_job(moved, now, {node.id: node.id}) is None


def test_the_fields_after_a_copy_are_told_apart_by_type() -> None:
    """DEDUP's fields (key, check, ms left) go between the job's and the extended ones."""
    node = solo()
    now = now_ms()
    job = node.admission.add_job(request("GROUP g"))
    fields = encode_copy(job, now)
    ext = fields.pop()
    for dedup in ([], [b"key"], [b"key", True, 5000]):
        data = [*fields, *dedup, ext]
        copy = decode_copy(data, now)
        assert copy is not None and copy.ext is not None and copy.ext.group == b"g"
        assert without_ext(data)[COPY_FIELDS:] == dedup
        plain = [*fields, *dedup]
        copy = decode_copy(plain, now)
        assert copy is not None and copy.ext is None and without_ext(plain) == plain
    assert decode_copy([*fields, b"key", True, 5000, 7], now) is None  # one too many


def test_a_replica_keeps_the_fields_and_requeues_after_the_due_time() -> None:
    net, (a, b, c) = cluster(3)
    due = now_ms() + 30_000
    job = added(a, f"AT {due} RETRY 5 PRIORITY 4 GROUP g REPLICATE 3")
    net.pump()
    assert job.state == ACTIVE and job.qtime == due
    for member in (b, c):
        copy = member.job(job.id)
        assert copy is not None and copy.ext is not None
        assert (copy.ext.priority, copy.ext.group, copy.ext.due) == (4, b"g", due)
        assert due + 5000 - 250 <= copy.qtime <= due + 5000 + 250  # from the due time
        member.node.wakeups.run(due + 4000)
        assert copy.state == ACTIVE


def test_a_dedup_copy_keeps_its_key_and_its_fields() -> None:
    net, (a, b, c) = cluster(3)
    job = added(a, "DEDUP k1 PRIORITY 2 REPLICATE 3")
    net.pump()
    copy = b.job(job.id)
    assert copy is not None and copy.ext is not None and copy.ext.priority == 2
    assert b.node.dedup.get(scoped_key(b"q", b"k1"), now_ms()) == job.id


def test_enqueue_and_yourjobs_never_queue_a_copy_before_its_due_time() -> None:
    """ENQUEUE (from a node that kept no copy) and YOURJOBS (federation) queue a copy at
    once, unless its due time is still ahead here (the origin's clock ahead of ours)."""
    net, (a, b, c) = cluster(3)
    due = now_ms() + 30_000
    job = added(a, f"AT {due} REPLICATE 3")
    net.pump()
    net.deliver(a.id, b.id, m.ENQUEUE, [job.id, 0])
    copy = b.job(job.id)
    assert copy is not None and copy.state == ACTIVE and copy.qtime == due
    b.node.wakeups.run(due - 1)
    assert copy.state == ACTIVE
    b.node.wakeups.run(due)
    assert copy.state == QUEUED
    net.pump()
    moved = encode_job(job, a.id, now_ms())
    moved[0] = job.id[:-4] + b"0001"  # another job
    net.deliver(a.id, c.id, m.YOURJOBS, [[moved]])
    other = c.job(moved[0])
    assert other is not None and other.state == ACTIVE and other.qtime == due


def test_a_scheduled_import_not_due_here_yet_still_lets_the_consumers_ask_again() -> None:
    """A job pushed as it came due on its node is due a little later here (the clock
    offset's uncertainty): it is queued then, and the import still resets the ask
    throttle, so the consumers it serves ask again at once (before: the next ask waited
    up to 100 ms, the lateness of scheduled jobs across nodes)."""
    net, (a, b) = cluster(2)
    net.clock_offsets[a.id] = -5  # a's clock 5 ms behind b's: its due times are later
    due = now_ms() + 30_000
    job = added(a, f"AT {due} REPLICATE 1")
    moved = encode_job(job, a.id, now_ms())
    queue = b.node.queue(b"q")
    federation_of(queue).bcast_time = now_ms() + 100  # asked a moment ago
    net.deliver(a.id, b.id, m.YOURJOBS, [[moved]])
    copy = b.job(job.id)
    assert copy is not None and copy.state == ACTIVE and copy.qtime == due + 5
    assert federation_of(queue).bcast_time == 0


def test_a_peers_due_time_is_moved_onto_this_nodes_clock() -> None:
    """The copy's due time goes through due_from_peer with the bus's clock offsets
    (replication/clock.py): a peer whose clock is 1 s ahead sets due times 1 s
    ahead of this node's clock, so its copy is due 1 s earlier here (plus the
    estimate's uncertainty: late, never early). (No spy on due_from_peer: compiled,
    replication/copies.py calls it bound at build time; the due time shows it.)"""
    net, (a, b) = cluster(2)
    net.clock_offsets[a.id] = 1000  # a's clock is 1 s ahead of b's
    due = now_ms() + 30_000
    job = added(a, f"AT {due} REPLICATE 2")
    net.pump()
    copy = b.job(job.id)
    uncertainty = b.repl.bus.clock_uncertainty(a.id) or 0
    assert copy is not None and copy.ext is not None
    assert copy.ext.due == due - 1000 + uncertainty


# -- the AOF ----------------------------------------------------------------------------------

def test_extended_fields_in_the_aof() -> None:
    node = solo()
    due = now_ms() + HOUR_MS
    job = node.admission.add_job(request(f"AT {due} PRIORITY 1 GROUP g"))
    encoder = RecordEncoder(node.id)
    record = encoder.loadjob_record(job)
    assert record.startswith(b"*3\r\n$7\r\nLOADJOB\r\n")
    args, end = parse_record(record, 0)
    assert end == len(record) and len(args) == 3
    check_record(args, 0)
    ext = deserialize_ext(args[2])
    assert (ext.priority, ext.group, ext.due) == (1, b"g", due)
    assert serialize_ext(JobExt()) == b"\x01\x80" + bytes(8)  # no group: nothing after
    plain = node.admission.add_job(request("REPLICATE 1"))
    assert encoder.loadjob_record(plain).startswith(b"*2\r\n$7\r\nLOADJOB\r\n")
    for bad in (b"", b"\x01\x80", b"\x02\x80" + bytes(8), b"\x01\x80" + bytes(8) + b"g" * 257):
        with pytest.raises(CorruptJob):
            deserialize_ext(bad)
