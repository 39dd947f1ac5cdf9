"""JOBSET (a disq extension) without a server: the request, the core's
`Node.set_job` in every state of a job, the AOF records it writes, and the cluster
side (replication/jobset.py) on the replication tests' in-memory bus."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest
from disq_client import commands as cmds

from disq import errors
from disq.cluster import messages as m
from disq.config import Config
from disq.ids import new_node_id
from disq.job import ACKED, ACTIVE, BCAST_QUEUED, DELIVERED, QUEUED, WAIT_REPL, Job
from disq.node import Node, now_ms
from disq.ports import NoPersistence
from disq.queue import PriorityJobs, SortedJobs
from disq.replication import jobset
from disq.requests import AddJob, JobSet

from .test_replication import Member, Network, cluster, into

HOUR_MS = 3_600_000
ID = "D-dcb833cf-8YL1NT17e9+wsA/09NqxscQI-05a1"


def args(text: str) -> list[bytes]:
    return [a.encode() for a in text.split()]


def request(text: str) -> AddJob:
    return AddJob.parse([a.encode() for a in f"ADDJOB q body 0 {text}".split()])


def solo() -> Node:
    return Node(Config(), new_node_id())


# -- the request ------------------------------------------------------------------------------

def test_jobset_request_options() -> None:
    parsed = JobSet.parse(args(f"JOBSET {ID} priority 3 AT 12345"))
    assert (parsed.job_id, parsed.priority, parsed.at, parsed.delay_ms) == (
        ID.encode(), 3, 12345, None)
    assert parsed.due(20_000) == 20_000  # an AT in the past: now
    assert parsed.due(10_000) == 12345
    parsed = JobSet.parse(args(f"JOBSET {ID} DELAY-MS 250"))
    assert parsed.priority is None and parsed.due(1000) == 1251  # from the next ms (clock.ms_after)
    assert JobSet.parse(args(f"JOBSET {ID} PRIORITY 0")).due(1000) is None
    built = JobSet(ID.encode(), priority=7)
    assert (built.priority, built.at, built.delay_ms) == (7, None, None)


def test_the_client_encodes_what_the_server_parses() -> None:
    command = cmds.set_job(ID, 4, datetime(2030, 1, 1, tzinfo=UTC), None)
    parsed = JobSet.parse([str(a).encode() for a in command.args])
    assert (parsed.job_id, parsed.priority, parsed.at, parsed.delay_ms) == (
        ID.encode(), 4, 1_893_456_000_000, None)
    parsed = JobSet.parse([str(a).encode() for a in cmds.set_job(ID, None, None, 5).args])
    assert (parsed.priority, parsed.at, parsed.delay_ms) == (None, None, 5)


@pytest.mark.parametrize(("text", "reply"), [
    ("JOBSET nope PRIORITY 1", errors.BADID.REPLY),
    ("JOBSET {id}", b"-ERR JOBSET needs PRIORITY, AT or DELAY-MS\r\n"),
    ("JOBSET {id} PRIORITY 256", b"-ERR PRIORITY must be between 0 and 255\r\n"),
    ("JOBSET {id} PRIORITY -1", b"-ERR PRIORITY must be between 0 and 255\r\n"),
    ("JOBSET {id} DELAY-MS -1", b"-ERR DELAY-MS time must be a non negative number\r\n"),
    ("JOBSET {id} AT soon", b"-ERR AT must be a Unix time in milliseconds\r\n"),
    ("JOBSET {id} AT 1 DELAY-MS 1", b"-ERR DELAY-MS and AT are mutually exclusive\r\n"),
    ("JOBSET {id} GROUP g", errors.SYNTAX.REPLY),
    ("JOBSET {id} PRIORITY", errors.SYNTAX.REPLY),
])
def test_bad_jobset_requests(text: str, reply: bytes) -> None:
    with pytest.raises(errors.DisqError) as info:
        JobSet.parse(args(text.format(id=ID)))
    assert info.value.reply() == reply


# -- the core ---------------------------------------------------------------------------------

def test_a_new_priority_moves_a_queued_job_to_its_new_place() -> None:
    node = solo()
    first, second, third = (node.admission.add_job(request("REPLICATE 1")) for _ in range(3))
    node.set_job(third, 0, None)
    assert third.state == QUEUED and third.ext is not None and third.ext.priority == 0
    assert type(node.queue(b"q").jobs) is PriorityJobs and node.qlen(b"q") == 3
    node.set_job(first, 200, None)
    assert [j.id for j in node.consumers.get_jobs([b"q"], 3)] == [third.id, second.id, first.id]


def test_the_default_priority_keeps_a_plain_queue_plain() -> None:
    node = solo()
    job = node.admission.add_job(request("REPLICATE 1"))
    node.set_job(job, 128, None)
    assert job.ext is not None and type(node.queue(b"q").jobs) is SortedJobs
    assert node.qlen(b"q") == 1 and node.consumers.get_jobs([b"q"], 1) == [job]


def test_a_queued_job_moved_into_the_future_leaves_its_queue_until_then() -> None:
    node = solo()
    job = node.admission.add_job(request("REPLICATE 1 RETRY 30 PRIORITY 5"))
    other = node.admission.add_job(request("REPLICATE 1"))
    due = now_ms() + 60_000
    node.set_job(job, None, due)
    assert (job.state, job.qtime) == (ACTIVE, due) and node.qlen(b"q") == 1
    assert job.ext is not None and (job.ext.priority, job.ext.due) == (5, due)
    assert not job.flags & BCAST_QUEUED  # queued again as a new job is: not broadcast
    node.wakeups.run(due - 1)
    assert job.state == ACTIVE
    node.wakeups.run(due)
    assert job.state == QUEUED and node.qlen(b"q") == 2
    assert due + 30_000 - 250 <= job.qtime <= due + 30_000 + 250  # RETRY from there
    assert node.consumers.get_jobs([b"q"], 2) == [job, other]  # its priority still counts


def test_a_scheduled_job_moves_to_its_new_due_time_or_is_queued_now() -> None:
    node = solo()
    due = now_ms() + 60_000
    job = node.admission.add_job(request(f"AT {due} REPLICATE 1"))
    later = due + 30_000
    node.set_job(job, None, later)
    assert (job.state, job.qtime, job.awake) == (ACTIVE, later, later)
    sooner = now_ms() + 1000
    node.set_job(job, None, sooner)
    assert (job.state, job.qtime) == (ACTIVE, sooner)
    node.set_job(job, None, now_ms())  # due now: queued at once
    assert job.state == QUEUED and node.qlen(b"q") == 1
    delayed = node.admission.add_job(request("DELAY 600 REPLICATE 1"))  # Disque's DELAY (seconds)
    node.set_job(delayed, None, due)
    assert (delayed.state, delayed.qtime) == (ACTIVE, due)


def test_a_delivered_job_is_requeued_retry_after_its_new_due_time() -> None:
    node = solo()
    job = node.admission.add_job(request("REPLICATE 1 RETRY 10"))
    assert node.consumers.get_jobs([b"q"], 1) == [job] and job.flags & DELIVERED
    due = now_ms() + 60_000
    node.set_job(job, None, due)
    assert job.state == ACTIVE and due + 10_000 - 250 <= job.qtime <= due + 10_000 + 250
    once = node.admission.add_job(request("REPLICATE 1 RETRY 0"))
    assert node.consumers.get_jobs([b"q"], 1) == [once]
    node.set_job(once, 3, due)  # at most once: still never requeued
    assert once.qtime == 0 and once.ext is not None and once.ext.priority == 3


def test_refusals_change_nothing() -> None:
    node = solo()
    job = node.admission.add_job(request("REPLICATE 1 TTL 60 PRIORITY 9"))
    with pytest.raises(errors.DisqError, match="beyond the job's TTL"):
        node.set_job(job, 1, job.etime)
    assert job.ext is not None and job.ext.priority == 9 and job.state == QUEUED
    node.ack([job.id])
    acked = Job(ID.encode(), b"q", b"x", ACKED, 1, now_ms() + HOUR_MS, 0, 10, 1)
    node.register(acked)
    with pytest.raises(errors.DisqError, match="already acknowledged"):
        node.set_job(acked, 1, None)
    assert acked.ext is None
    acked.state = WAIT_REPL
    with pytest.raises(errors.DisqError, match="still being replicated"):
        node.set_job(acked, 1, None)


class Records(NoPersistence):
    """The core's Persistence, recording what it is told."""

    def __init__(self) -> None:
        self.log: list[tuple[str, bytes, int | None]] = []

    @property
    def recording(self) -> bool:
        return True

    def job_stored(self, job: Job) -> None:
        self.log.append(("stored", job.id, None if job.ext is None else job.ext.priority))

    def job_removed(self, job_id: bytes) -> None:
        self.log.append(("removed", job_id, None))


def test_the_change_is_written_to_the_aof_as_the_job_again() -> None:
    node = solo()
    records = Records()
    node.set_persistence(records)
    job = node.admission.add_job(request("REPLICATE 1"))
    node.set_job(job, 4, None)
    assert records.log == [("stored", job.id, None), ("removed", job.id, None),
                           ("stored", job.id, 4)]


# -- the cluster --------------------------------------------------------------------------------

@pytest.fixture
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    """For the timeout of a JOBSET asked of other nodes (never run here)."""
    loop = asyncio.new_event_loop()
    yield loop
    loop.close()


def added(member: Member, text: str) -> Job:
    job = member.node.admission.add_job(request(text))
    if job.state == WAIT_REPL:
        member.repl.wait(job, lambda reply: None)
    return job


def asked(net: Network, member: Member, loop: asyncio.AbstractEventLoop, job_id: bytes,
          priority: int | None, due: int | None) -> list[bytes]:
    """JOBSET on `member`, which does not hold the job: the replies once the bus is
    quiet."""
    member.repl.changes._loop = loop
    replies: list[bytes] = []
    member.repl.set_job_elsewhere(job_id, priority, due, into(replies))
    net.pump()
    return replies


def test_a_change_reaches_every_holder() -> None:
    net, (a, b, c) = cluster(3)
    job = added(a, "REPLICATE 3 RETRY 5")
    net.pump()
    due = now_ms() + 60_000
    a.node.set_job(job, 7, due)
    net.pump()
    assert net.sent(m.JOBSET) == 2
    for member in (b, c):
        copy = member.job(job.id)
        assert copy is not None and copy.ext is not None
        assert (copy.ext.priority, copy.ext.due, copy.state) == (7, due, ACTIVE)
        assert due + 5000 - 250 <= copy.qtime <= due + 5000 + 250
    b.node.set_job(b.job(job.id), 1, None)  # type: ignore[arg-type]  # from a copy too
    net.pump()
    assert job.ext is not None and (job.ext.priority, job.ext.due) == (1, due)


def test_a_node_without_the_job_asks_the_others(loop: asyncio.AbstractEventLoop) -> None:
    net, (a, b, c) = cluster(3)
    job = added(b, "REPLICATE 1")
    net.pump()
    assert a.job(job.id) is None and c.job(job.id) is None
    net.clock_offsets[a.id] = 1000  # a's clock is 1 s ahead of b's
    due = now_ms() + 60_000
    assert asked(net, a, loop, job.id, 2, due) == [b"+OK\r\n"]
    assert job.ext is not None and (job.ext.priority, job.ext.due) == (2, due - 1000)
    assert job.state == ACTIVE and b.node.qlen(b"q") == 0
    assert asked(net, a, loop, b"D-" + job.id[2:-4] + b"0000", 2, None) == [
        errors.NOJOB.REPLY]  # every node said it does not know it
    assert not a.repl.changes._asks


def test_a_refusal_is_the_answer_when_no_node_applied_it(
        loop: asyncio.AbstractEventLoop) -> None:
    net, (a, b) = cluster(2)
    job = added(b, "REPLICATE 1")
    assert b.node.acknowledge(job) and job.state == ACKED
    assert asked(net, a, loop, job.id, 2, None) == [errors.JOB_ACKED.REPLY]


def test_no_answer_means_nojob_after_the_timeout(loop: asyncio.AbstractEventLoop,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(jobset, "JOBSET_TIMEOUT_MS", 20)
    net, (a, b) = cluster(2)
    job = added(b, "REPLICATE 1")
    net.silent.add(b.id)
    replies = asked(net, a, loop, job.id, 2, None)
    assert replies == []
    loop.run_until_complete(asyncio.sleep(0.05))  # the timer's 20 ms, on a loop
    assert replies == [errors.NOJOB.REPLY] and not a.repl.changes._asks


@pytest.mark.parametrize("fields", [
    [], [b"nope", 1, None], [ID.encode(), 256, None], [ID.encode(), None, -1],
    [ID.encode(), None, None], [ID.encode(), "1", None], [ID.encode(), True, None]])
def test_bad_messages_are_ignored(fields: list[object]) -> None:
    net, (a, b) = cluster(2)
    net.deliver(a.id, b.id, m.JOBSET, fields)
    net.deliver(a.id, b.id, m.JOBSET_ASK, [1, *fields])
    net.deliver(a.id, b.id, m.JOBSET_REPLY, [1, *fields])
    assert net.pump() == 0


def test_nojob_at_once_without_a_reachable_node(loop: asyncio.AbstractEventLoop) -> None:
    net, (a, b) = cluster(2)
    net.down.add(b.id)
    assert asked(net, a, loop, ID.encode(), 1, None) == [errors.NOJOB.REPLY]
    assert not a.repl.changes._asks
