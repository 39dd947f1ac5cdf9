"""Copies of an ADDJOB ... DEDUP on nodes whose AOF is on (replication/provisional.py),
over test_replication's in-memory bus: provisional until DEDUP_SETTLED (logged again
then), and a provisional copy due to be queued asks the other holders first: queued
if one holds the job settled, dropped if none holds it, kept waiting otherwise."""

from __future__ import annotations

from disq.dedup_table import scoped_key
from disq.job import ACTIVE, PROVISIONAL, PROVISIONAL_RECHECK_MS, QUEUED, Job
from disq.node import now_ms
from disq.ports import NoPersistence

from .test_dedup import dedup_add
from .test_replication import Member, Network, cluster


class RecordingAof(NoPersistence):
    """What the core tells the AOF, in order; everything is durable at once."""

    def __init__(self) -> None:
        self.records: list[tuple[str, bytes, int]] = []

    @property
    def recording(self) -> bool:
        return True

    def job_stored(self, job: Job) -> None:
        self.records.append(("LOADJOB", job.id, job.flags & PROVISIONAL))

    def job_removed(self, job_id: bytes) -> None:
        self.records.append(("DELJOB", job_id, 0))


def added() -> tuple[Network, list[Member], Job, dict[str, RecordingAof]]:
    """A DEDUP job added on the first of three nodes, REPLICATE 3, the others' AOF on."""
    net, members = cluster(3)
    aofs = {}
    for member in members[1:]:
        aofs[member.id] = RecordingAof()
        member.node.set_persistence(aofs[member.id])
    replies: list[bytes] = []
    dedup_add(members[0], b"k", replies, repl=3, by_copies=True)
    net.pump()
    assert len(replies) == 1 and replies[0][:1] == b"+", replies
    job = members[0].job(replies[0][1:-2])
    assert job is not None
    return net, members, job, aofs


def come_due(member: Member, job: Job, now: int) -> Job:
    """The holder's copy reaches its requeue time, provisional again (as loaded from an
    AOF written before DEDUP_SETTLED came)."""
    copy = member.job(job.id)
    assert copy is not None and copy.state == ACTIVE
    copy.flags |= PROVISIONAL
    copy.qtime = now
    member.node.update_awake(copy)
    member.node.wakeups.run(now)
    return copy


def test_a_copy_is_provisional_until_settled_and_logged_again() -> None:
    _, (_, b, c), job, aofs = added()
    for member in (b, c):
        copy = member.job(job.id)
        assert copy is not None and not copy.flags & PROVISIONAL
        assert aofs[member.id].records == [("LOADJOB", job.id, PROVISIONAL),
                                           ("DELJOB", job.id, 0), ("LOADJOB", job.id, 0)]


def test_a_provisional_copy_whose_job_exists_is_queued_after_asking() -> None:
    net, (_, b, _), job, _ = added()
    now = now_ms()
    copy = come_due(b, job, now)
    assert copy.state == ACTIVE  # not queued on its own
    net.pump()  # JOB_CHECK; the origin holds it settled
    assert not copy.flags & PROVISIONAL
    b.node.wakeups.run(now_ms())  # due from the moment the answer came
    assert copy.state == QUEUED


def test_a_provisional_copy_no_holder_has_is_dropped() -> None:
    net, (a, b, c), job, aofs = added()
    for member in (a, c):  # the ADDJOB failed: deleted there
        deleted = member.job(job.id)
        assert deleted is not None
        member.node.unregister(deleted)
    come_due(b, job, now_ms())
    net.pump()
    assert b.job(job.id) is None
    assert aofs[b.id].records[-1] == ("DELJOB", job.id, 0)


def test_a_provisional_copy_waits_while_no_holder_vouches_for_it() -> None:
    net, (a, b, c), job, _ = added()
    deleted = c.job(job.id)
    assert deleted is not None
    c.node.unregister(deleted)
    origin = a.job(job.id)
    assert origin is not None
    origin.flags |= PROVISIONAL  # the origin does not say (as while its ADDJOB waits)
    now = now_ms()
    copy = come_due(b, job, now)
    net.pump()
    assert b.job(job.id) is copy and copy.state == ACTIVE and copy.flags & PROVISIONAL
    net.down.add(a.id)  # and then unreachable: b keeps asking, in vain
    b.node.wakeups.run(now + PROVISIONAL_RECHECK_MS)
    net.pump()
    assert b.job(job.id) is copy and copy.state == ACTIVE


def test_orphan_copies_of_an_addjob_never_answered_are_dropped() -> None:
    """The origin killed before it answered (it never logged the job): its copies
    are provisional on both holders, and the origin has no such job."""
    net, (a, b, c), job, _ = added()
    deleted = a.job(job.id)
    assert deleted is not None
    a.node.unregister(deleted)
    other = c.job(job.id)
    assert other is not None
    other.flags |= PROVISIONAL
    come_due(b, job, now_ms())
    net.pump()
    assert b.job(job.id) is None


def unsettled_copy(member: Member, job: Job, until: int) -> tuple[Job, bytes]:
    """The holder's copy provisional again and its key unsettled until `until` (as
    loaded from an AOF written before DEDUP_SETTLED came, or never settled)."""
    key = scoped_key(b"q", b"k")
    copy = member.job(job.id)
    assert copy is not None
    copy.flags |= PROVISIONAL
    member.node.dedup.forget(key, job.id)
    member.node.dedup.record_unsettled(key, job.id, job.etime, until)
    return copy, key


def test_a_key_past_its_deadline_is_not_vouched_for_before_the_origin_says() -> None:
    """The origin failed the ADDJOB (its DELJOB and DEDUP_FORGET lost) and the other
    holder cannot be reached: the origin's word is enough, the copy and its key go,
    and the key's job is not answered meanwhile."""
    net, (a, b, c), job, _ = added()
    deleted = a.job(job.id)
    assert deleted is not None
    a.node.unregister(deleted)
    now = now_ms()
    copy, key = unsettled_copy(b, job, now - 1)
    net.down.add(c.id)
    assert not b.repl.dedup.vouches(job.id, now)  # "busy" while the holders are asked
    net.pump()
    assert b.job(job.id) is None
    assert b.node.dedup.peek(key, now) is None


def test_a_copy_whose_job_exists_is_vouched_for_once_a_holder_says_so() -> None:
    net, (_, b, _), job, _ = added()
    now = now_ms()
    copy, key = unsettled_copy(b, job, now - 1)
    copy.qtime = now + 60_000
    assert not b.repl.dedup.vouches(job.id, now)
    net.pump()
    assert not copy.flags & PROVISIONAL and copy.state == ACTIVE
    assert copy.qtime == now + 60_000  # confirmed, not queued before its time
    assert b.repl.dedup.vouches(job.id, now)


def test_an_orphan_copy_is_vouched_for_once_its_origin_stays_silent() -> None:
    """The origin is down and does not answer: after PROVISIONAL_RECHECK_MS the
    copy is a job that exists as far as anyone can know (an orphan)."""
    net, (a, b, c), job, _ = added()
    now = now_ms()
    copy, _ = unsettled_copy(b, job, now + 60_000)
    other = c.job(job.id)
    assert other is not None
    other.flags |= PROVISIONAL
    net.down.add(a.id)
    assert not b.repl.dedup.vouches(job.id, now)
    net.pump()
    assert not b.repl.dedup.vouches(job.id, now + PROVISIONAL_RECHECK_MS - 1)
    assert copy.flags & PROVISIONAL
    assert b.repl.dedup.vouches(job.id, now + PROVISIONAL_RECHECK_MS)
    assert not copy.flags & PROVISIONAL
