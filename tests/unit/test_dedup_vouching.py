"""A DEDUP key answered with a job its origin then deletes (the flaky
`spark/tests/test_write_jobs.py::test_a_body_function_and_a_key_column`: 53 of 100
keys queued). Deterministic, over test_replication's in-memory bus.

The cause: when a job's copies check its key (REPLICATE a majority), a node records
the key as soon as it accepts a copy, and from then on answers it, to its own
clients' ADDJOBs (server/service.py `JobService.add`) and to other nodes'
DEDUP_QUERY (`Dedup._on_query`), while the origin's add may still fail: another node
refuses a copy (it is adding the key itself), the origin deletes the job everywhere
and asks again. The IDs already answered then name a job that exists nowhere, and the
asking nodes that recorded it from a DEDUP_REPLY (no DEDUP_FORGET reaches them) go on
answering it."""

from __future__ import annotations

import asyncio
from collections import deque
from types import SimpleNamespace
from typing import Any

import msgpack

from disq.acl import AclTable
from disq.cluster import messages as m
from disq.config import Config
from disq.node import now_ms
from disq.replication.dedup_checks import SETTLE_SLACK_MS
from disq.replication.dedup_queries import RECHECK_MS
from disq.requests import AddJob
from disq.server.connection import Client
from disq.server.hotstate import HotState
from disq.server.service import JobService
from disq.server.table import CATEGORIES

from .test_dedup import dedup_add, queued, scoped
from .test_replication import Member, Network, cluster, into


def test_a_copy_is_not_vouched_for_while_its_add_may_still_fail() -> None:
    """One key added at once on a and c, checked by the copies (REPLICATE 3 of 3). b
    takes a's copy first (and refuses c's); c refuses a's copy; so both adds are
    deleted and asked again. Meanwhile b's client sends an ADDJOB of the key. Every
    ADDJOB must end with the ID of one job that exists."""
    net, (a, b, c) = cluster(3)
    first: list[bytes] = []
    third: list[bytes] = []
    dedup_add(a, b"k", first, repl=3, by_copies=True)
    dedup_add(c, b"k", third, repl=3, by_copies=True)
    a_job = a.node.dedup.get(scoped(b"k"), now_ms())
    net.queue = deque(sorted(net.queue, key=lambda item: item[1] != b.id))  # b's first
    while not b.node.dedup.get(scoped(b"k"), now_ms()):  # one message at a time
        src, dst, mtype, payload = net.queue.popleft()
        net.deliver(src, dst, mtype, msgpack.unpackb(payload, raw=False))
    assert b.node.dedup.get(scoped(b"k"), now_ms()) == a_job  # b took a's copy
    second: list[bytes] = []
    client = later_client(b, second)
    run_add(client, request(b"k"))  # (before the fix: a's job at once, from its copy)
    for _ in range(50):
        net.pump()
        if first and second and third:
            break
        for member in (a, b, c):
            member.repl.dedup.queries.check(now_ms() + RECHECK_MS + 1)
    assert len(first) == len(second) == len(third) == 1
    assert first == second == third, (first, second, third)
    job_id = first[0][1:-2]
    assert any(x.job(job_id) is not None for x in (a, b, c)), "answered a deleted job"
    assert queued([a, b, c]) == 1


# -- the settled rule: a copy's key is vouched for once its ADDJOB succeeded --------------

def ask_on(member: Member, key: bytes, replies: list[bytes]) -> None:
    """ADDJOB ... DEDUP key from a client of `member`, as the server runs it."""
    run_add(later_client(member, replies), request(key))


class _Replies(asyncio.Transport):
    """A client's socket: what the node writes to it lands in a list."""

    def __init__(self, replies: list[bytes]) -> None:
        super().__init__()
        self.replies = replies

    def write(self, data: Any) -> None:
        self.replies.append(bytes(data))


def run_add(client: Client, request: AddJob) -> None:
    """ADDJOB ... DEDUP from `client`, as the server runs it: its reply now or later
    keeps its place in the client's replies (Client._execute)."""
    added = JobService(client.server).add(client.user, request, client)
    client._replies.append(b"+" + added + b"\r\n" if isinstance(added, bytes) else added)
    client._flush_replies()


def later_client(member: Member, replies: list[bytes]) -> Client:
    """A client of `member`'s node for the job service's ADDJOB: its replies land in
    `replies`."""
    loop = SimpleNamespace(call_soon=lambda callback, *args: callback(*args))
    server = SimpleNamespace(node=member.node, replication=member.repl, loop=loop,
                             acl=AclTable(CATEGORIES), hot=HotState(Config()))
    client = Client(server)  # type: ignore[arg-type]
    client.transport = _Replies(replies)
    return client


def request(key: bytes) -> AddJob:
    return AddJob(b"q", b"body", 5000, 3, ttl=3600, dedup=key)


def copy_held(net: Network, origin: Member, members: list[Member], key: bytes,
              replies: list[bytes]) -> bytes:
    """`origin` adds a job with `key` (REPLICATE 3 of 3, checked by its copies); its
    REPLJOBs are delivered and its GOTJOBs held back. Returns the job's ID."""
    dedup_add(origin, key, replies, repl=3, by_copies=True)
    job_id = origin.node.dedup.get(scoped(key), now_ms())
    assert job_id is not None
    copies = [msg for msg in net.queue if msg[2] == m.REPLJOB]
    net.queue.clear()
    for src, dst, mtype, payload in copies:
        net.deliver(src, dst, mtype, msgpack.unpackb(payload, raw=False))
    held = [x for x in members if x is not origin]
    assert all(x.node.dedup.peek(scoped(key), now_ms()) == job_id for x in held)
    assert all(x.node.dedup.unsettled() == 1 for x in held)
    return job_id


def test_a_copys_key_is_vouched_for_once_its_add_succeeded() -> None:
    """While the origin waits for its copies, a holder answers its key neither to its
    own client (that ADDJOB asks, and waits) nor to a DEDUP_QUERY (busy); the origin's
    DEDUP_SETTLED, once replicated, makes it answer the job."""
    net, members = cluster(3)
    a, b, c = members
    first: list[bytes] = []
    job_id = copy_held(net, a, members, b"k", first)
    gotjobs = [msg for msg in net.queue if msg[2] == m.GOTJOB]
    net.queue.clear()
    second: list[bytes] = []
    ask_on(b, b"k", second)
    assert second == [] and scoped(b"k") in b.repl.dedup.pending  # asks a and c
    net.pump()  # a: busy (waiting for its copies); c: busy (its copy is unsettled)
    assert second == [] and first == []
    net.queue.extend(gotjobs)
    net.pump()  # a is answered, and tells b and c
    assert first == [b"+" + job_id + b"\r\n"]
    assert b.node.dedup.unsettled() == c.node.dedup.unsettled() == 0
    assert net.sent(m.DEDUP_SETTLED) == 2
    b.repl.dedup.queries.check(now_ms() + RECHECK_MS + 1)  # b asks again
    net.pump()
    assert second == first
    third: list[bytes] = []
    ask_on(c, b"k", third)  # settled: answered at once
    assert third == first and queued(members) == 1


def test_an_unsettled_copy_whose_origin_died_is_vouched_for() -> None:
    """The origin is killed before its ADDJOB is answered: its copies stay (an orphan
    job that exists), and once the origin is known down a holder answers it."""
    net, members = cluster(3)
    a, b, c = members
    job_id = copy_held(net, a, members, b"k", [])
    net.queue.clear()  # the GOTJOBs never reach a
    net.down.add(a.id)
    replies: list[bytes] = []
    ask_on(b, b"k", replies)
    assert replies == [b"+" + job_id + b"\r\n"]
    assert b.node.dedup.unsettled() == 0 and c.node.dedup.unsettled() == 1
    asked: list[bytes] = []
    net.buses[b.id].send(c.id, m.DEDUP_QUERY, [scoped(b"k"), 3600])
    net.buses[b.id].handlers[m.DEDUP_REPLY] = lambda _, fields: asked.extend(fields)
    net.pump()
    assert asked[0][:2] == [scoped(b"k"), job_id] and asked[0][2] > 0


def test_an_unsettled_copy_past_its_adds_deadline_is_vouched_for() -> None:
    """No DEDUP_SETTLED came (the origin restarted, a link dropped it), the origin is
    up: the copy is vouched for once its ADDJOB's timeout and SETTLE_SLACK_MS passed."""
    net, members = cluster(3)
    a, b, c = members
    job_id = copy_held(net, a, members, b"k", [])
    net.queue.clear()
    until = b.node.dedup.unsettled_until(job_id)
    assert until is not None
    assert now_ms() + 5000 + SETTLE_SLACK_MS - 100 <= until <= now_ms() + 5000 + SETTLE_SLACK_MS
    assert not b.repl.dedup.vouches(job_id, until - 1)
    assert b.repl.dedup.vouches(job_id, until) and b.node.dedup.unsettled() == 0


def test_a_failed_add_leaves_no_unsettled_copy_behind() -> None:
    """A copy refused elsewhere: the origin deletes its job and its holders forget the
    key (DEDUP_FORGET), unsettled entry included; the ADDJOB gets the known job."""
    net, members = cluster(3)
    a, b, c = members
    known = b"D-" + c.id[:8].encode() + b"-" + b"x" * 24 + b"-0e11"
    c.node.dedup.record(scoped(b"k"), known, now_ms() + 60_000)  # c knows the key's job
    replies: list[bytes] = []
    dedup_add(a, b"k", replies, repl=3, by_copies=True)
    net.pump()
    assert net.sent(m.DEDUP_CONFLICT) == 1 and net.sent(m.DEDUP_FORGET) == 2  # (b, c)
    assert replies == [b"+" + known + b"\r\n"]
    assert b.node.dedup.unsettled() == 0 and b.node.dedup.get(scoped(b"k"), now_ms()) is None
    assert not any(x.node.jobs for x in members)


def test_asynchronous_copies_are_settled_at_once() -> None:
    """ASYNC: the ADDJOB is answered before its copies leave and never fails after."""
    net, members = cluster(3)
    a = members[0]
    replies: list[bytes] = []
    a.repl.dedup.ask(AddJob(b"q", b"body", 0, 3, ttl=3600, async_=True, dedup=b"k"),
                     into(replies))
    net.pump()
    assert replies and replies[0].startswith(b"+D-")
    assert all(x.node.dedup.unsettled() == 0 for x in members)
    assert sum(x.node.dedup.get(scoped(b"k"), now_ms()) == replies[0][1:-2] for x in members) == 3
    assert net.sent(m.DEDUP_SETTLED) == 0
