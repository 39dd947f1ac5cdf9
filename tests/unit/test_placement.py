"""Jobs placed on other nodes without a copy here (Disque's external replication): the
ENQUEUE that has one holder queue the job is sent until that holder answers it
(replication/placement.py), and applied once. Over the in-memory bus of
test_replication.py."""

from __future__ import annotations

import msgpack

from disq.cluster import messages as m
from disq.job import ACTIVE, QUEUED, Job
from disq.node import now_ms
from disq.replication.placement import ENQUEUE_RESEND_MS

from .test_replication import Member, Network, add_job, cluster, holders, ok


def step(net: Network) -> tuple[str, str, int]:
    """Deliver the next message on the bus, whatever the state of its receiver."""
    src, dst, mtype, payload = net.queue.popleft()
    net.log.append((src, dst, mtype))
    net.deliver(src, dst, mtype, msgpack.unpackb(payload, raw=False))
    return src, dst, mtype


def placed(members: list[Member]) -> tuple[Member, Job, list[bytes], Member]:
    """A leaving node's ADDJOB REPLICATE 1 whose copy reached its holder, and the
    holder's GOTJOB on its way back: (origin, job, replies, holder)."""
    origin = members[0]
    origin.node.leaving = True  # no copy kept here
    job, replies = add_job(origin, repl=1)
    net = origin.bus.network
    assert step(net)[2] == m.REPLJOB
    (holder,) = holders(members, job.id)
    assert [message[2] for message in net.queue] == [m.GOTJOB]
    return origin, job, replies, holder


def queued_on(members: list[Member], job: Job) -> list[Member]:
    return [x for x in members if (c := x.job(job.id)) is not None and c.state == QUEUED]


def test_an_enqueue_that_cannot_leave_is_sent_when_the_link_is_back() -> None:
    """The holder's GOTJOB comes while the link to it is down (it came on the holder's
    own link): the ENQUEUE cannot leave. It goes once the link is back, and the job
    is queued on its holder (it stayed active there until its RETRY before)."""
    net, members = cluster(3)
    a, job, replies, holder = placed(members)
    net.down.add(holder.id)
    step(net)  # GOTJOB: the ADDJOB is answered, the ENQUEUE is dropped
    assert replies == ok(job) and not net.queue
    net.down.discard(holder.id)
    a.repl.tick(now_ms() + ENQUEUE_RESEND_MS - 100)
    assert not net.queue  # not due yet
    a.repl.tick(now_ms() + ENQUEUE_RESEND_MS)
    net.pump()
    assert queued_on(members, job) == [holder] and holder.node.qlen(b"q") == 1
    assert net.sent(m.ENQUEUE) == 1 and net.sent(m.ENQUEUED) == 1
    a.repl.tick(now_ms() + 100 * ENQUEUE_RESEND_MS)  # answered: never sent again
    assert not net.queue


def test_a_lost_enqueue_is_sent_again_until_answered() -> None:
    """An ENQUEUE lost on the way (a link dropped with what it had to send) is sent
    again, after ENQUEUE_RESEND_MS and then twice as long each time."""
    net, members = cluster(3)
    a, job, replies, holder = placed(members)
    net.silent.add(holder.id)
    step(net)
    assert replies == ok(job)
    start = now_ms()
    a.repl.tick(start + ENQUEUE_RESEND_MS)  # sent again: lost again
    net.pump()
    a.repl.tick(start + 2 * ENQUEUE_RESEND_MS)
    assert not net.queue  # next: 1 s + 2 s after the first
    net.silent.discard(holder.id)
    a.repl.tick(start + 3 * ENQUEUE_RESEND_MS)
    net.pump()
    assert queued_on(members, job) == [holder]
    assert net.sent(m.ENQUEUED) == 1
    a.repl.tick(start + 100 * ENQUEUE_RESEND_MS)
    assert not net.queue


def test_an_enqueue_sent_again_is_applied_once() -> None:
    """The holder's answer is lost: the ENQUEUE comes again, after a consumer took the
    job. The holder answers it and leaves the job with its consumer (queued again, it
    would be delivered twice)."""
    net, members = cluster(3)
    a, job, _, holder = placed(members)
    step(net)  # GOTJOB
    net.silent.add(a.id)
    net.pump()  # ENQUEUE: queued; its ENQUEUED is lost
    assert queued_on(members, job) == [holder]
    assert [j.id for j in holder.node.consumers.get_jobs([b"q"], 1)] == [job.id]
    net.silent.discard(a.id)
    a.repl.tick(now_ms() + ENQUEUE_RESEND_MS)
    net.pump()
    copy = holder.job(job.id)
    assert copy is not None and copy.state == ACTIVE and holder.node.qlen(b"q") == 0
    assert net.sent(m.ENQUEUE) == 2 and net.sent(m.ENQUEUED) == 1
    a.repl.tick(now_ms() + 100 * ENQUEUE_RESEND_MS)
    assert not net.queue


def test_resends_stop_when_the_holders_would_requeue_the_job() -> None:
    """A holder that never answers (a disq without ENQUEUED, or one gone) gets the
    ENQUEUE again until DELAY + RETRY, when its copy's own timer requeues it."""
    net, members = cluster(3)
    a = members[0]
    a.node.leaving = True
    del a.bus.handlers[m.ENQUEUED]  # the answers are lost
    start = now_ms()
    job, replies = add_job(a, repl=1, retry=10)
    net.pump()
    assert replies == ok(job) and len(queued_on(members, job)) == 1
    for second in range(1, 40):
        a.repl.tick(start + second * 1000 + 10)
        net.pump()
    assert net.sent(m.ENQUEUE) == 1 + 3  # again after 1, 3 and 7 s; not after 15 s
    assert len(queued_on(members, job)) == 1


def test_only_the_holder_answering_its_enqueue_stops_the_resends() -> None:
    """ENQUEUED from another node, or malformed, changes nothing (and never raises)."""
    net, members = cluster(3)
    a, job, _, holder = placed(members)
    net.silent.add(holder.id)
    step(net)  # GOTJOB
    net.pump()  # the ENQUEUE is lost
    (other,) = [x for x in members if x not in (a, holder)]
    for fields in ([job.id], [], [None], [123], [job.id.decode()], [[job.id]], [{}]):
        net.deliver(other.id, a.id, m.ENQUEUED, fields)
    for fields in ([], [None], [123], [job.id.decode()], [[job.id]], [{}], [b"D-short"]):
        net.deliver(holder.id, a.id, m.ENQUEUED, fields)
    net.silent.discard(holder.id)
    a.repl.tick(now_ms() + ENQUEUE_RESEND_MS)
    net.pump()
    assert queued_on(members, job) == [holder] and net.sent(m.ENQUEUE) == 1  # (delivered)
