"""A DEDUP key given two live jobs by kill -9 and restarts alone (no partition):
copies of an ADDJOB that asked every node, delivered after its origin died.
Deterministic, over test_replication's in-memory bus.

The sequence: a node that restarted within the key's TTL (`node.dedup_since`; or any
node when REPLICATE is not a majority) cannot let its copies check a key: it asks
every node (DEDUP_QUERY), each one keeps a reservation, and once all said no it adds
the job, whose REPLJOBs carry the key *unchecked*. It is killed before it answers.
Its REPLJOBs are on the wire (in a kernel buffer, a proxy, a slow link). The client
retries on another node, which holds a reservation and so asks every node too; the
holders-to-be answer "no" (the copies have not arrived), and it adds a second job.
Then the first job's copies arrive: an unchecked copy was stored whatever its
receiver knew, so the key had two live jobs (the orphan copies are delivered, as
any copy of an unanswered ADDJOB is)."""

from __future__ import annotations

import random

import msgpack
import pytest

from disq.cluster import messages as m
from disq.dedup_table import DedupTable
from disq.node import now_ms
from disq.replication.dedup_queries import RECHECK_MS

from .test_dedup import scoped
from .test_dedup_vouching import ask_on
from .test_replication import Member, Network, cluster

KEY = b"k"


def live_jobs(members: list[Member], down: set[str]) -> set[bytes]:
    """The IDs of the jobs the nodes still up hold (a copy of either is delivered)."""
    return {job.id for x in members if x.id not in down for job in x.node.jobs.values()}


def held_copies(net: Network, origin: Member) -> list[tuple[str, str, int, bytes]]:
    """Pump until `origin`'s REPLJOBs leave; returns them, held back (on the wire)."""
    copies = []
    for _ in range(10_000):
        if not net.queue:
            break
        src, dst, mtype, payload = net.queue.popleft()
        if src == origin.id and mtype == m.REPLJOB:
            copies.append((src, dst, mtype, payload))
            continue
        net.deliver(src, dst, mtype, msgpack.unpackb(payload, raw=False))
    assert copies, "the origin sent no copy"
    return copies


def settle(net: Network, members: list[Member], down: set[str], done: list[bytes]) -> None:
    """Pump, and run the rechecks and the replication ticks, until `done` has a reply."""
    now = now_ms()
    for _ in range(200):
        net.pump()
        if done:
            return
        now += RECHECK_MS + 1
        for x in members:
            if x.id not in down:
                x.repl.dedup.queries.check(now)
                x.repl.copies.tick(now)
    raise AssertionError("no reply")


@pytest.mark.parametrize("seed", range(12))
def test_copies_of_a_dead_restarted_origin_arriving_late_give_the_key_no_second_job(
        seed: int) -> None:
    random.seed(seed)  # the random targets of the unchecked copies
    net, members = cluster(5)
    a, b, c, d, e = members
    a.node.dedup_since = now_ms()  # a restarted: it may have forgotten keys
    first: list[bytes] = []
    ask_on(a, KEY, first)  # REPLICATE 3 of 5, but a restarted: asks everyone
    assert scoped(KEY) in a.repl.dedup.pending
    late = held_copies(net, a)  # every node said no; a added and sent its copies
    a_job = next(a.node.jobs.values()).id
    net.down.add(a.id)  # kill -9: its GOTJOBs are lost, its copies still travel
    net.queue.clear()
    retry_on = next(x for x in (d, e, c, b) if x.id not in {dst for _, dst, _, _ in late})
    second: list[bytes] = []
    ask_on(retry_on, KEY, second)  # a reservation there (a asked): asks b..e
    settle(net, members, net.down, second)
    assert second[0].startswith(b"+D-"), second
    net.queue.extend(late)  # a's copies arrive now
    net.pump()
    for x in members:
        if x.id not in net.down:
            x.repl.copies.tick(now_ms() + 1000)
    net.pump()
    jobs = live_jobs(members, net.down)
    assert jobs == {second[0][1:-2]}, (a_job, jobs)
    for x in members:
        if x.id not in net.down:
            assert x.node.dedup.get(scoped(KEY), now_ms()) in (None, second[0][1:-2])


def test_a_refused_unchecked_copy_makes_its_origin_ask_again_and_find_the_job() -> None:
    """A copy of an ADDJOB that asked every node reaches a node that learned another
    job for the key since it answered: refused (before: stored, the key renamed); the
    origin deletes its job and asks again, and gets the known job's ID."""
    net, members = cluster(3)
    a, b, c = members
    a.node.dedup_since = now_ms()
    replies: list[bytes] = []
    ask_on(a, KEY, replies)
    late = held_copies(net, a)
    known = b"D-" + c.id[:8].encode() + b"-" + b"x" * 24 + b"-0e11"
    for x in (b, c):  # both learned c's job meanwhile (settled)
        x.node.dedup.record(scoped(KEY), known, now_ms() + 60_000)
    net.queue.extend(late)
    settle(net, members, set(), replies)
    assert replies == [b"+" + known + b"\r\n"]
    assert not any(x.node.jobs for x in members)
    assert all(x.node.dedup.get(scoped(KEY), now_ms()) == known for x in (b, c))


def test_an_unchecked_copy_is_taken_where_its_origin_asked_last() -> None:
    """The usual path of an ADDJOB that asks: each node's reservation names the origin
    as the node that asked last (another asked earlier), so its copies are taken and
    it is answered at once, with no refusal."""
    net, members = cluster(5)
    a, b = members[:2]
    a.node.dedup_since = now_ms()
    for x in members[2:]:  # b asked earlier (its ADDJOB went elsewhere, or failed)
        net.buses[b.id].send(x.id, m.DEDUP_QUERY, [scoped(KEY), 3600])
    net.pump()
    assert all(x.node.dedup.asker(scoped(KEY)) == b.id for x in members[2:])
    replies: list[bytes] = []
    ask_on(a, KEY, replies)
    net.pump()
    assert replies and replies[0].startswith(b"+D-")
    assert net.sent(m.DEDUP_CONFLICT) == 0 and len(live_jobs(members, set())) == 1


def test_a_reservation_names_the_last_asker_until_it_goes() -> None:
    table = DedupTable()
    table.reserve(KEY, 0, 9000, "n1")
    table.reserve(KEY, 0, 9000, "n2")
    assert table.asker(KEY) == "n2"
    table.record(KEY, b"D-job", 9000)  # a job: no reservation any more
    assert table.asker(KEY) is None
    table.forget(KEY, b"D-job")
    table.reserve(KEY, 0, 9000, "n3")
    assert table.peek(KEY, 9000) is None and table.asker(KEY) is None  # expired
    table.reserve(b"other", 0, 1000, "n4")
    assert table.sweep(3000) == 1 and table.asker(b"other") is None
    table.reserve(KEY, 0, 9000, "n5")
    table.clear()
    assert table.asker(KEY) is None
