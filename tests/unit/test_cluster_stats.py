"""Every node's stats over the bus (STATS_REQUEST / STATS_REPLY, replication/stats.py, for
the dashboard) on the replication tests' in-memory bus: what a node reports of its
queues, the answers gathered, a node that does not answer, gathers that share one
round, and replies that are not to be trusted."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest

from disq.cluster import messages as m
from disq.policies import QueuePolicy
from disq.queue import PAUSED_IN
from disq.replication import stats as stats_module
from disq.replication.stats import MAX_STATS_QUEUES, NodeStats, QueueStats, queue_stats
from disq.requests import AddJob

from .test_replication import Member, Network, cluster


@pytest.fixture
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    """For the timeout of a gather (run only where a test waits for it)."""
    loop = asyncio.new_event_loop()
    yield loop
    loop.close()


def add(member: Member, queue: bytes, count: int = 1) -> None:
    for _ in range(count):
        member.node.admission.add_job(AddJob(queue, b"body", 0, 1, 0, None, 3600, 0, False))


def gathered(net: Network, member: Member, loop: asyncio.AbstractEventLoop,
             ) -> list[dict[str, NodeStats]]:
    member.repl.stats._loop = loop
    answers: list[dict[str, NodeStats]] = []
    member.repl.stats.gather(answers.append)
    net.pump()
    return answers


def test_a_node_lists_its_biggest_queues_and_which_hold_dead_letters() -> None:
    net, (a,) = cluster(1)
    add(a, b"small")
    add(a, b"big", 3)
    add(a, b"dead:big")
    add(a, b"graveyard")
    add(a, b"x" * 1025, 5)  # a name too long to be listed
    a.node.merge_policy(QueuePolicy(b"work", max_deliveries=1, deadletter=b"graveyard",
                                    version=1, origin=a.id), 1)
    a.node.set_pause(b"small", PAUSED_IN, broadcast=False)
    listed = queue_stats(a.node)
    assert [(q.name, q.length, q.jobs_in, q.pause, q.dead_letters) for q in listed] == [
        (b"big", 3, 3, 0, False), (b"dead:big", 1, 1, 0, True),
        (b"graveyard", 1, 1, 0, True), (b"small", 1, 1, PAUSED_IN, False)]
    assert [q.name for q in queue_stats(a.node, 2)] == [b"big", b"dead:big"]
    mine = NodeStats.of_node(a.node)
    assert (mine.jobs, mine.queue_count, len(mine.queues)) == (11, 5, 4)


def test_every_node_answers(loop: asyncio.AbstractEventLoop) -> None:
    net, (a, b, c) = cluster(3)
    add(b, b"q", 2)
    add(c, b"q")
    add(c, b"other")
    (answer,) = gathered(net, a, loop)
    assert sorted(answer) == sorted([a.id, b.id, c.id])
    assert [(q.name, q.length) for q in answer[b.id].queues] == [(b"q", 2)]
    assert [(q.name, q.length) for q in answer[c.id].queues] == [(b"other", 1), (b"q", 1)]
    assert answer[a.id].queues == [] and answer[c.id].jobs == 2
    assert net.sent(m.STATS_REQUEST) == 2 and net.sent(m.STATS_REPLY) == 2


def test_what_the_server_adds_travels_with_the_stats(loop: asyncio.AbstractEventLoop) -> None:
    net, (a, b) = cluster(2)
    b.repl.stats.local = lambda: NodeStats(used_memory=5, rss=6, clients=7, ops_per_sec=8,
                                           uptime=9, time=10)
    (answer,) = gathered(net, a, loop)
    theirs = answer[b.id]
    assert (theirs.used_memory, theirs.rss, theirs.clients, theirs.ops_per_sec,
            theirs.uptime, theirs.time) == (5, 6, 7, 8, 9, 10)


def test_a_node_that_does_not_answer_is_left_out_after_the_timeout(
        loop: asyncio.AbstractEventLoop, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(stats_module, "STATS_TIMEOUT_MS", 20)
    net, (a, b, c) = cluster(3)
    net.silent.add(c.id)
    net.down.add(b.id)  # not reachable: not even asked
    assert gathered(net, a, loop) == []
    later: list[dict[str, NodeStats]] = []
    a.repl.stats.gather(later.append)  # asked meanwhile: shares the answer
    loop.run_until_complete(asyncio.sleep(0.05))
    assert len(later) == 1 and sorted(later[0]) == [a.id]
    assert net.sent(m.STATS_REQUEST) == 0  # (c's request was lost, not delivered)
    assert a.repl.stats._gathering is None


def test_a_node_computes_its_stats_at_most_every_cache_period(
        loop: asyncio.AbstractEventLoop) -> None:
    net, (a, b) = cluster(2)
    calls: list[int] = []

    def local() -> NodeStats:
        calls.append(1)
        return NodeStats()

    b.repl.stats.local = local
    for _ in range(5):
        gathered(net, a, loop)
    assert len(calls) == 1 and net.sent(m.STATS_REPLY) == 5


@pytest.mark.parametrize("stats", [
    None, [], [1, 2, 3], [-1, 0, 0, 0, 0, 0, 0, 0, 0, []], [0, 0, 0, 0, 0, 0, 0, 0, 2**63, []],
    [0, 0, 0, 0, 0, 0, 0, 0, "0", []], [0, 0, 0, 0, 0, 0, 0, 0, True, []],
    [0, 0, 0, 0, 0, 0, 0, 0, 0, "queues"], [0, 0, 0, 0, 0, 0, 0, 0, 0, [], 1]])
def test_a_reply_that_is_off_counts_as_no_answer(loop: asyncio.AbstractEventLoop,
                                                 stats: Any) -> None:
    net, (a, b) = cluster(2)
    a.repl.stats._loop = loop
    answers: list[dict[str, NodeStats]] = []
    a.repl.stats.gather(answers.append)
    request_id = a.repl.stats._request_id
    net.queue.clear()  # b's own answer is lost; an odd one comes instead
    net.deliver(b.id, a.id, m.STATS_REPLY, [request_id, stats])
    assert len(answers) == 1 and sorted(answers[0]) == [a.id]


def test_odd_queue_entries_are_left_out_and_the_list_is_capped(
        loop: asyncio.AbstractEventLoop) -> None:
    good = [b"q", 1, 1, 0, 0, 0, False]
    entries: list[Any] = [good, [b"", 1, 1, 0, 0, 0, False], [b"x", 1, 1, 0, 0, 4, False],
                          [b"x", 1, 1, 0, 0, 0, 1], [b"x", -1, 1, 0, 0, 0, False], "q",
                          [b"x", 1], [b"x" * 1025, 1, 1, 0, 0, 0, False],
                          *[good] * (MAX_STATS_QUEUES + 10)]
    parsed = NodeStats.from_wire([0, 0, 0, 0, 0, 0, 0, 0, 0, entries])
    assert parsed is not None and len(parsed.queues) == MAX_STATS_QUEUES - 7
    assert all(q.name == b"q" for q in parsed.queues)
    assert QueueStats.from_wire(good) is not None


def test_replies_not_asked_for_are_ignored(loop: asyncio.AbstractEventLoop) -> None:
    net, (a, b, c) = cluster(3)
    reply = [0, 0, 0, 0, 0, 0, 0, 0, 0, []]
    net.deliver(b.id, a.id, m.STATS_REPLY, [1, reply])  # nothing asked
    a.repl.stats._loop = loop
    answers: list[dict[str, NodeStats]] = []
    a.repl.stats.gather(answers.append)
    request_id = a.repl.stats._request_id
    net.queue.clear()
    net.deliver(b.id, a.id, m.STATS_REPLY, [request_id + 1, reply])  # another request
    net.deliver(b.id, a.id, m.STATS_REPLY, [True, reply])
    net.deliver(b.id, a.id, m.STATS_REPLY, [request_id, reply])
    net.deliver(b.id, a.id, m.STATS_REPLY, [request_id, reply])  # twice: once counts
    assert answers == []  # c still to answer
    net.deliver(c.id, a.id, m.STATS_REPLY, [request_id, reply])
    assert len(answers) == 1 and sorted(answers[0]) == sorted([a.id, b.id, c.id])


@pytest.mark.parametrize("fields", [[], ["1"], [None], [1.5]])
def test_odd_requests_are_not_answered(fields: list[Any]) -> None:
    net, (a, b) = cluster(2)
    net.deliver(a.id, b.id, m.STATS_REQUEST, fields)
    assert net.pump() == 0
