"""What consumers report of their jobs (NACK ... ERROR, WORKING ... PROGRESS / DATA),
without servers: the notes' rules, the node's operations, the AOF's format, the bus's
checks, and two holders exchanging them over a fake network."""

from __future__ import annotations

import msgpack
import pytest

from disq.aof.serialize import CorruptJob, deserialize_ext, serialize_ext
from disq.cluster import messages as m
from disq.config import Config
from disq.ids import new_node_id
from disq.job import (
    ACTIVE,
    HISTORY_BYTES,
    MAX_ERRORS,
    MAX_HISTORY,
    QUEUED,
    JobExt,
    JobNotes,
    notes_size,
)
from disq.memory import JOB_FOOTPRINT
from disq.node import Node
from disq.replication.wire import decode_error, decode_errors
from disq.requests import AddJob
from disq.results import DEAD_END

from .test_replication import add_job, cluster


def fresh_node() -> Node:
    return Node(Config(), new_node_id())


def delivered(node: Node, queue: bytes = b"q", retry: int = 60,
              max_deliveries: int = 0) -> bytes:
    """A job added, then taken by a consumer: active, ready to NACK."""
    request = AddJob(queue, b"body", 0, None, 0, retry, 3600, 0)
    if max_deliveries:
        request.max_deliveries = max_deliveries
    job = node.admission.add_job(request)
    assert node.consumers.get_jobs([queue], 1) == [job]
    return job.id


# -- the notes ------------------------------------------------------------------------------

def test_errors_are_ordered_deduplicated_and_the_last_five_kept() -> None:
    # (in time order: here the deliveries came in their order)
    notes = JobNotes()
    for delivery in (3, 1, 2, 7, 5, 4, 6):
        notes = notes.with_error((delivery, 1000 + delivery, b"e%d" % delivery))
    assert [e[0] for e in notes.errors] == [3, 4, 5, 6, 7]
    assert len(notes.errors) == MAX_ERRORS and notes.last_error == b"e7"
    assert notes.with_error((7, 1007, b"e7")) is notes  # heard twice: nothing new
    # after DEADLETTER REQUEUE (counters reset) a new error is still the last one
    assert notes.with_error((1, 2000, b"again")).errors[-1] == (1, 2000, b"again")
    assert notes.with_progress(5, None).errors == notes.errors  # a new object each time
    assert notes.progress == -1 and notes.with_progress(None, b"d").progress_data == b"d"


# -- the node --------------------------------------------------------------------------------

def test_a_nack_keeps_its_error_and_counts_its_bytes() -> None:
    node = fresh_node()
    job_id = delivered(node)
    job = node.lookup(job_id)
    assert job is not None and job.ext is None
    before = node.job_bytes
    assert node.requeue([job_id], nack=True, error=b"boom") == 1
    assert job.state == QUEUED and job.nacks == 1
    assert job.ext is not None and job.ext.notes is not None
    [(delivery, _, reason)] = job.ext.notes.errors
    assert (delivery, reason) == (1, b"boom")
    assert node.job_bytes == before + notes_size(job) > before
    node.delete([job_id])
    assert node.job_bytes == 0


def test_a_nack_that_requeues_nothing_keeps_no_error() -> None:
    node = fresh_node()
    job_id = delivered(node, retry=0)  # at most once, delivered: never queued again
    job = node.lookup(job_id)
    assert node.requeue([job_id], nack=True, error=b"boom") == 0
    assert job is not None and job.ext is None and job.nacks == 0


def test_working_leaves_a_plain_job_plain_a_nack_begins_its_history() -> None:
    node = fresh_node()
    job_id = delivered(node)
    job = node.lookup(job_id)
    assert node.working(job_id) == 60
    assert job is not None and job.ext is None
    assert node.job_bytes == JOB_FOOTPRINT + len(b"body")
    # a failed delivery: its history (history.py), counted at its bound
    assert node.requeue([job_id], nack=True) == 1
    assert job.ext is not None and job.ext.notes is not None
    history = job.ext.notes.history
    assert history is not None and [e for _, e, _ in history.events] == [
        b"added", b"nacked", b"queued"]
    assert node.job_bytes == JOB_FOOTPRINT + len(b"body") + HISTORY_BYTES
    node.delete([job_id])
    assert node.job_bytes == 0


def test_the_history_keeps_the_last_events_to_the_ack() -> None:
    node = fresh_node()
    job_id = delivered(node)
    job = node.lookup(job_id)
    assert job is not None
    for _ in range(10):  # 2 events a round (a delivery is the server's to record)
        assert node.requeue([job_id], nack=True) == 1
        assert node.consumers.get_jobs([b"q"], 1) == [job]
    assert job.ext is not None and job.ext.notes is not None
    history = job.ext.notes.history
    assert history is not None and len(history.events) == MAX_HISTORY
    assert history.events[0][1] != b"added"
    assert node.job_bytes == JOB_FOOTPRINT + len(b"body") + HISTORY_BYTES  # (its bound)
    assert node.ack([job_id]) == 1  # (then gone: no other holder)
    assert [e for _, e, _ in history.events[-3:]] == [b"nacked", b"queued", b"acked"]
    assert node.job_bytes == 0


def test_job_end_of_a_dead_letter_and_of_an_active_job() -> None:
    node = fresh_node()
    job_id = delivered(node, max_deliveries=1)
    assert node.requeue([job_id], nack=True, error=b"fatal") == 1
    assert node.job_end(job_id, 0) == (DEAD_END, b"fatal")
    other = delivered(node, max_deliveries=1)
    assert node.requeue([other], nack=True) == 1
    assert node.job_end(other, 0) == (DEAD_END, b"max-deliveries")
    active = delivered(node)
    assert node.job_end(active, 0) == (b"active", None)
    assert node.job_progress(active) is None
    node.working(active, 30, b"a third")
    assert node.job_end(active, 0) == (b"active", b"a third")
    assert node.job_progress(active) == 30
    node.working(active, None, b"more")
    assert (node.job_progress(active), node.job_end(active, 0)) == (30, (b"active", b"more"))


# -- the AOF -----------------------------------------------------------------------------------

def test_errors_in_the_aof_and_older_records() -> None:
    errors = ((1, 1_700_000_000_000, b"first"), (2, 1_700_000_000_001, b""))
    ext = JobExt(7, b"g", 0, notes=JobNotes(errors, 50, b"not recorded"))
    loaded = deserialize_ext(serialize_ext(ext))
    assert (loaded.priority, loaded.group) == (7, b"g")
    assert loaded.notes is not None and loaded.notes.errors == errors
    assert loaded.notes.progress == -1 and loaded.notes.progress_data is None
    # a job with progress only is recorded as before (formats 1 and 2 still load)
    assert serialize_ext(JobExt(7, notes=JobNotes(progress=5)))[0] == 1
    dead = JobExt(max_deliveries=3, dead_from=b"q", dead_reason=b"r", generation=1)
    assert deserialize_ext(serialize_ext(dead)).dead_from == b"q"
    assert serialize_ext(dead)[0] == 2
    data = serialize_ext(ext)
    for broken in (data[:-1], data + b"x", data[:-len(b"first") - 17]):
        with pytest.raises(CorruptJob):
            deserialize_ext(broken)


# -- the bus -----------------------------------------------------------------------------------

@pytest.mark.parametrize("error", [
    [0, 1, b"x"], [1, -1, b"x"], [1, 1, b"x" * 1025], [1, 1, "text"], [1, 1], None,
    [True, 1, b"x"],
])
def test_a_peer_s_bad_error_is_refused(error: object) -> None:
    assert decode_error(error) is None
    assert decode_errors([error]) is None
    assert decode_errors([[1, 1, b"x"]] * 6) is None
    assert decode_errors([[1, 1, b"x"]]) == [(1, 1, b"x")]


def test_holders_learn_errors_and_progress() -> None:
    net, members = cluster(2)
    a, b = members
    job, _ = add_job(a, repl=2, retry=60)
    net.pump()
    assert a.node.consumers.get_jobs([b"q"], 1) == [job]
    assert a.node.requeue([job.id], nack=True, error=b"boom") == 1
    net.pump()
    copy = b.job(job.id)
    assert copy is not None and copy.ext is not None and copy.ext.notes is not None
    assert copy.ext.notes.errors == job.ext.notes.errors  # type: ignore[union-attr]
    assert copy.nacks == 1
    assert a.node.consumers.get_jobs([b"q"], 1) == [job]
    a.node.working(job.id, 60, b"data")
    net.pump()
    assert b.node.job_progress(job.id) == 60 and b.node.job_end(job.id, 0)[1] == b"data"
    # a bad progress from a peer changes nothing
    for fields in ([job.id, 101, None], [job.id, 5, b"x" * 4097], [job.id, 5, "text"]):
        net.deliver(a.id, b.id, m.WORKING, msgpack.unpackb(msgpack.packb(fields)))
        assert b.node.job_progress(job.id) == 60
    # an error unknown there, with a QUEUED: kept; a bad one: the message is dropped
    net.deliver(a.id, b.id, m.QUEUED, [job.id, 2, 0, 0, [9, 2**42, b"late"]])
    assert copy.ext.notes is not None and copy.ext.notes.last_error == b"late"
    nacks = copy.nacks
    net.deliver(a.id, b.id, m.QUEUED, [job.id, 2, 0, 0, [0, 5, b"bad"]])
    assert copy.nacks == nacks and copy.ext.notes.last_error == b"late"
    assert copy.state in (ACTIVE, QUEUED)
