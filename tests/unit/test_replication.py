"""The replication layer (disq/replication) between real `Node`s over an in-memory bus.

`Network` stands in for the cluster bus: messages go through msgpack as on the wire
and wait in one FIFO queue until the test pumps it, as real messages leave at the end
of a loop turn. A node can be `down` (not reachable: sends fail) or `silent` (reachable,
but whatever is sent to it is lost). Time is driven by passing `now` to `tick` and
`Node.wakeups.run`.
"""

from __future__ import annotations

import asyncio
import gc
import random
from collections import deque
from collections.abc import Callable, Iterable
from pathlib import Path
from types import SimpleNamespace

import msgpack
import pytest

from disq import errors
from disq.cluster import messages as m
from disq.cluster.bus import ClusterBus, Link
from disq.cluster.membership import ClusterNode, Membership, NodeFlag
from disq.config import Config
from disq.errors import DisqError
from disq.ids import new_node_id
from disq.job import ACKED, ACTIVE, DELIVERED, QUEUED, WAIT_REPL, Job, JobExt
from disq.node import Node, now_ms
from disq.ports import NoPersistence
from disq.queue import PAUSED_IN, PAUSED_OUT
from disq.replication.copies import ADD_NODE_PERIOD_MS, BACKLOG_MS_PER_1000, MAX_PATIENCE_MS
from disq.replication.federation import federation_of
from disq.replication.replicator import Replication
from disq.replication.requeue import sender_wins
from disq.replication.wire import decode_job, encode_copy, encode_job
from disq.requests import AddJob

NOREPL_TIMEOUT = errors.NOREPL_TIMEOUT.REPLY
NOREPL_EXPIRED = errors.NOREPL_EXPIRED.REPLY


class Network:
    def __init__(self) -> None:
        self.buses: dict[str, FakeBus] = {}
        self.peers: dict[str, ClusterNode] = {}  # how the others see each node
        self.queue: deque[tuple[str, str, int, bytes]] = deque()
        self.down: set[str] = set()
        self.silent: set[str] = set()
        self.leaving: set[str] = set()  # CLUSTER LEAVING yes: no new copies go there
        self.log: list[tuple[str, str, int]] = []  # (from, to, type) of every delivery
        # node ID -> its clock minus everyone else's (ms), as BusPort.clock_offset
        # tells it (one clock for all by default: unknown offsets)
        self.clock_offsets: dict[str, int] = {}
        # node ID -> its end of a loop turn: the consumers a message gave jobs to are
        # served after it (Consumers.serve_ready), as the server does
        self.turn_ends: dict[str, Callable[[], None]] = {}

    def add(self, bus: FakeBus) -> None:
        self.buses[bus.myself.id] = bus
        self.peers[bus.myself.id] = ClusterNode(bus.myself.id, "127.0.0.1", 7711)

    def pump(self, limit: int = 100_000) -> int:
        delivered = 0
        while self.queue and delivered < limit:
            src, dst, mtype, payload = self.queue.popleft()
            if dst in self.down or dst in self.silent:
                continue
            delivered += 1
            self.log.append((src, dst, mtype))
            self.deliver(src, dst, mtype, msgpack.unpackb(payload, raw=False))
        assert not self.queue, "messages still flowing: a loop between nodes?"
        return delivered

    def deliver(self, src: str, dst: str, mtype: int, fields: list) -> None:
        handler = self.buses[dst].handlers.get(mtype)
        if handler is not None:
            handler(self.peers[src], fields)
            self.turn_ends.get(dst, lambda: None)()

    def sent(self, mtype: int) -> int:
        return sum(1 for _, _, t in self.log if t == mtype)


class FakeBus:
    """BusPort over `Network`."""

    def __init__(self, network: Network, node_id: str) -> None:
        self.network = network
        self.myself = ClusterNode(node_id, "127.0.0.1", 7711, NodeFlag.MYSELF)
        self.handlers: dict[int, object] = {}
        # Peers this node has no link to (sends fail), as just after it started: ID ->
        # whether its dial failed (False: not tried yet, or dialled again after a drop).
        self.unlinked: dict[str, bool] = {}
        self.failing_heard = 0  # (no failure detector here)
        network.add(self)

    def on(self, mtype: int, handler: object) -> None:
        self.handlers[mtype] = handler

    def send(self, node_id: str, mtype: int, *fields: object) -> bool:
        net = self.network
        if (node_id == self.myself.id or node_id not in net.buses or node_id in net.down
                or node_id in self.unlinked):
            return False
        payload = msgpack.packb(list(fields), use_bin_type=True, default=list)  # sets
        net.queue.append((self.myself.id, node_id, mtype, payload))
        return True

    def can_send(self, node_id: str) -> bool:
        net = self.network
        return (node_id != self.myself.id and node_id in net.buses and node_id not in net.down
                and node_id not in self.unlinked)

    def send_batched(self, node_ids: Iterable[str], mtype: int, items: list,
                     head: tuple = ()) -> int:
        return sum(self.send(i, mtype, *head, *items) for i in node_ids)  # unbatched

    def copy_mark(self, node_id: str) -> object:
        return node_id if self.can_send(node_id) else None  # (one link per peer here)

    def copy_left(self, mark: object) -> bool | None:
        return True if type(mark) is str and self.can_send(mark) else None

    def broadcast(self, mtype: int, *fields: object,
                  node_ids: Iterable[str] | None = None, urgent: bool = False) -> int:
        targets = list(node_ids) if node_ids is not None else self.known_ids()
        return sum(self.send(i, mtype, *fields) for i in targets)

    def reachable_peers(self) -> list[ClusterNode]:
        net = self.network
        return [net.peers[i] for i in self.known_ids()
                if i not in net.down and i not in net.leaving]

    def reaching_peers(self) -> list[str]:
        return [n.id for n in self.reachable_peers() if self.unlinked.get(n.id) is False]

    def leaving_peers(self) -> list[str]:
        return [i for i in self.known_ids() if i in self.network.leaving and self.can_send(i)]

    def known_ids(self) -> list[str]:
        return [i for i in self.network.buses if i != self.myself.id]

    def known_id_map(self) -> dict[str, str]:
        return {i: i for i in self.network.buses}

    @property
    def cluster_size(self) -> int:
        return len(self.network.buses)

    def clock_offset(self, node_id: str) -> int | None:
        return self.network.clock_offsets.get(node_id)

    def clock_uncertainty(self, node_id: str) -> int | None:
        return 0 if node_id in self.network.clock_offsets else None


class Member:
    def __init__(self, network: Network) -> None:
        self.node = Node(Config(), new_node_id())
        self.bus = FakeBus(network, self.node.id)
        self.repl = Replication(self.node, self.bus)
        self.node.cluster = self.repl  # as the server installs it
        network.turn_ends[self.node.id] = self.node.consumers.serve_ready

    @property
    def id(self) -> str:
        return self.node.id

    def job(self, job_id: bytes) -> Job | None:
        return self.node.lookup(job_id)


def cluster(size: int) -> tuple[Network, list[Member]]:
    net = Network()
    return net, [Member(net) for _ in range(size)]


def as_reply(outcome: bytes | DisqError | None) -> bytes:
    """A typed outcome (disq/outcomes.py) as the RESP reply its client reads
    (server/pending.py): an ADDJOB's job ID or error, a JOBSET's None (+OK) or error."""
    if outcome is None:
        return b"+OK\r\n"
    if isinstance(outcome, bytes):
        return b"+" + outcome + b"\r\n"
    return outcome.reply()


def into(replies: list[bytes]) -> Callable[[bytes | DisqError | None], None]:
    """The outcome callback of an ADDJOB or JOBSET whose replies land in `replies`."""
    return lambda outcome: replies.append(as_reply(outcome))


def add_job(member: Member, *, repl: int | None = 3, timeout: int = 5000, ttl: int = 3600,
            retry: int | None = None, async_: bool = False,
            body: bytes = b"body") -> tuple[Job, list[bytes]]:
    """ADDJOB as the server runs it: add, then wait for the reply if it must."""
    job = member.node.admission.add_job(AddJob(b"q", body, timeout, repl, 0, retry, ttl, 0, async_))
    replies: list[bytes] = []
    if job.state == WAIT_REPL:
        member.repl.wait(job, into(replies))
    else:
        replies.append(b"+" + job.id + b"\r\n")
    member.node.consumers.serve_ready()  # the command's end
    return job, replies


def ok(job: Job) -> list[bytes]:
    return [b"+" + job.id + b"\r\n"]


def holders(members: list[Member], job_id: bytes) -> list[Member]:
    return [x for x in members if x.job(job_id) is not None]


# -- synchronous replication --------------------------------------------------------------

def test_replicate_3_puts_copies_on_3_nodes_and_answers_the_id() -> None:
    net, (a, b, c) = cluster(3)
    job, replies = add_job(a, body=b"hello")
    assert job.state == WAIT_REPL and replies == []
    net.pump()
    assert replies == ok(job)
    assert job.state == QUEUED and a.node.qlen(b"q") == 1
    assert job.nodes_confirmed is None
    for member in (b, c):
        copy = member.job(job.id)
        assert copy is not None and copy is not job
        assert (copy.state, copy.queue, copy.body, copy.repl) == (ACTIVE, b"q", b"hello", 3)
        assert copy.nodes_delivered == {a.id, b.id, c.id}
        assert copy.ctime == job.ctime and abs(copy.etime - job.etime) < 1000
        assert member.node.qlen(b"q") == 0
        assert copy.qtime > now_ms() + (copy.retry * 1000) - 1000  # requeue after RETRY
    assert job.nodes_delivered == {a.id, b.id, c.id}
    assert net.sent(m.REPLJOB) == 2 and net.sent(m.GOTJOB) == 2


def test_one_gotjob_message_confirms_several_jobs() -> None:
    """A node confirms the copies it got in one loop turn with one GOTJOB message
    listing their IDs; entries that are not waiting IDs are skipped."""
    net, (a, b, c) = cluster(3)
    net.silent.update((b.id, c.id))
    first, first_replies = add_job(a)
    second, second_replies = add_job(a)
    net.pump()
    assert first.state == second.state == WAIT_REPL
    for sender in (b, c):
        net.deliver(sender.id, a.id, m.GOTJOB, [first.id, 42, b"D-nothing", second.id])
    assert first_replies == ok(first) and second_replies == ok(second)
    assert first.state == second.state == QUEUED
    assert first.nodes_delivered == second.nodes_delivered == {a.id, b.id, c.id}


def test_default_replication_level_is_three_and_answers_once() -> None:
    net, members = cluster(5)
    job, replies = add_job(members[0], repl=None)
    net.pump()
    assert job.repl == 3 and replies == ok(job)
    assert len(holders(members, job.id)) == 3
    members[0].repl.tick(now_ms() + 10 * ADD_NODE_PERIOD_MS)  # nothing left to do
    net.pump()
    assert replies == ok(job) and len(holders(members, job.id)) == 3


def test_async_replication_queues_at_once_and_asks_no_confirmation() -> None:
    net, (a, b, c) = cluster(3)
    job, replies = add_job(a, async_=True)
    assert job.state == QUEUED and replies == ok(job)
    net.pump()
    assert b.job(job.id).state == ACTIVE and c.job(job.id).state == ACTIVE
    assert net.sent(m.GOTJOB) == 0


def test_silent_peer_means_norepl_after_the_timeout_and_cleanup() -> None:
    net, (a, b, c) = cluster(3)
    net.silent.add(c.id)
    start = now_ms()
    job, replies = add_job(a, timeout=1000)
    net.pump()
    assert replies == [] and b.job(job.id) is not None
    for t in range(start + 60, start + 1000, 60):  # retries, never more than asked
        a.repl.tick(t)
        net.pump()
    assert replies == [] and job.state == WAIT_REPL
    assert net.sent(m.REPLJOB) == 1  # b confirmed: only c is asked again (and lost)
    a.repl.tick(start + 1001)
    assert replies == [NOREPL_TIMEOUT]
    assert a.job(job.id) is None
    net.pump()  # the DELJOB reaches b
    assert b.job(job.id) is None


def test_a_node_behind_a_deep_pipeline_gets_time_before_another_is_tried() -> None:
    """A target that usually confirms after 400 ms (copies queued behind thousands)
    and has not confirmed anything sent after this job is given twice that before one
    more node is tried: under load, extra copies would only add load."""
    net, (a, b, c) = cluster(3)  # (nothing delivered: the copy waits)
    job, replies = add_job(a, repl=2)
    start = a.repl.copies._waiting[job.id].sent  # (a loaded machine: later than before)
    target = next(iter(job.nodes_delivered - {a.id}))
    a.repl.copies._progress[target] = [0, 400]  # confirmed older copies, usually in 400 ms
    for t in range(start + ADD_NODE_PERIOD_MS, start + 800, ADD_NODE_PERIOD_MS):
        a.repl.tick(t)
    assert job.nodes_delivered == {a.id, target}  # nobody else asked yet
    a.repl.tick(start + 800 + ADD_NODE_PERIOD_MS + 1)
    assert len(job.nodes_delivered) == 3
    assert MAX_PATIENCE_MS < 60_000  # (and never more than that, however slow)


def test_a_node_with_thousands_of_copies_to_confirm_gets_time_for_them() -> None:
    """A target that usually confirms in 10 ms, sent 5,000 copies at once (an ADDJOBS)
    that it has yet to go through, is given 2 x 10 ms plus BACKLOG_MS_PER_1000 per
    1,000 of them before one more node is tried; with none behind this one, 2 x 10 ms."""
    for backlog in (5000, 0):
        net, (a, b, c) = cluster(3)  # (nothing delivered: the copies wait)
        job, replies = add_job(a, repl=2)
        start = a.repl.copies._waiting[job.id].sent
        target = next(iter(job.nodes_delivered - {a.id}))
        copies = a.repl.copies
        copies._progress[target] = [copies._waiting[job.id].seq - 1, 10]
        copies._seq += backlog  # as if that many more adds had left since
        patience = 2 * 10 + backlog * BACKLOG_MS_PER_1000 // 1000
        a.repl.tick(start + 2 * 10 + ADD_NODE_PERIOD_MS + 30)
        assert len(job.nodes_delivered) == (2 if backlog else 3)
        if backlog:
            a.repl.tick(start + patience + ADD_NODE_PERIOD_MS + 30)
            assert len(job.nodes_delivered) == 3


def test_a_node_that_confirmed_later_copies_skipped_this_one() -> None:
    net, (a, b, c) = cluster(3)  # (nothing delivered)
    job, replies = add_job(a, repl=2)
    target = next(iter(job.nodes_delivered - {a.id}))
    later, _ = add_job(a, repl=2)
    a.repl.copies._progress[target] = [a.repl.copies._waiting[later.id].seq, 400]  # it confirmed later
    # the first job's next try is due ADD_NODE_PERIOD_MS after it was added: read the
    # clock after the adds (a loaded machine may pass a millisecond between them)
    a.repl.tick(now_ms() + ADD_NODE_PERIOD_MS)
    assert len(job.nodes_delivered) == 3  # one more node at once


def test_another_node_is_tried_when_a_target_stays_silent() -> None:
    extra_node_needed = 0
    for _ in range(12):  # the targets are random: the silent node is often picked
        net, members = cluster(4)
        a = members[0]
        net.silent.add(members[3].id)
        job, replies = add_job(a)
        net.pump()
        if not replies:
            extra_node_needed += 1
            a.repl.tick(now_ms() + ADD_NODE_PERIOD_MS)
            net.pump()
            assert job.nodes_delivered == {x.id for x in members}
        assert replies == ok(job)
    assert extra_node_needed > 0


def test_timeout_zero_waits_and_retries_until_the_node_comes_back() -> None:
    net, (a, b, c) = cluster(3)
    net.silent.add(c.id)
    start = now_ms()
    job, replies = add_job(a, timeout=0)
    net.pump()
    a.repl.tick(start + 3_600_000)
    net.pump()
    assert replies == [] and job.state == WAIT_REPL
    net.silent.clear()  # "restarted"
    a.repl.tick(start + 3_600_000 + ADD_NODE_PERIOD_MS)
    net.pump()
    assert replies == ok(job) and c.job(job.id) is not None


def test_job_expiring_while_waiting_answers_norepl_expired() -> None:
    net, (a, b, c) = cluster(3)
    net.silent.add(c.id)
    job, replies = add_job(a, ttl=1, timeout=15000)
    net.pump()
    assert not job.awake  # no expiry timer while confirmations may come at once...
    a.repl.tick(now_ms() + ADD_NODE_PERIOD_MS)
    assert job.awake == job.etime  # ...but from the first retry on
    a.node.wakeups.run(now_ms() + 2000)
    assert replies == [NOREPL_EXPIRED] and a.job(job.id) is None
    a.repl.tick(now_ms() + 20000)  # the timeout must not answer a second time
    assert replies == [NOREPL_EXPIRED]


def test_deljob_of_a_waiting_job_answers_norepl() -> None:
    net, (a, b, c) = cluster(3)
    net.silent.add(c.id)
    job, replies = add_job(a)
    assert a.node.delete([job.id]) == 1
    assert replies == [NOREPL_EXPIRED]


def test_client_gone_deletes_the_unreplicated_job_everywhere() -> None:
    net, (a, b, c) = cluster(3)
    net.silent.add(c.id)
    job, replies = add_job(a)
    net.pump()
    assert b.job(job.id) is not None
    a.repl.cancel_wait(job.id)
    assert a.job(job.id) is None
    net.pump()
    assert b.job(job.id) is None and replies == []
    a.repl.tick(now_ms() + 10_000)
    assert replies == []


def test_wait_after_the_job_settled_answers_at_once() -> None:
    net, (a, b, c) = cluster(3)
    job = a.node.admission.add_job(AddJob(b"q", b"x", 5000, 3, 0, None, 3600))
    net.pump()
    replies: list[bytes] = []
    a.repl.wait(job, into(replies))
    assert replies == ok(job)


def test_flushall_while_waiting_answers_on_the_next_tick() -> None:
    net, (a, b, c) = cluster(3)
    net.silent.add(c.id)
    job, replies = add_job(a)
    a.node.flushall()
    a.repl.tick(now_ms() + ADD_NODE_PERIOD_MS)
    assert replies == [NOREPL_EXPIRED]


def test_client_ack_of_a_waiting_job_answers_its_id() -> None:
    net, (a, b, c) = cluster(3)
    net.silent.add(c.id)
    job, replies = add_job(a, timeout=1000)
    net.pump()
    assert a.node.ack([job.id]) == 1  # the ID is visible to JSCAN meanwhile
    net.pump()
    a.repl.tick(now_ms() + 2000)  # past the timeout: answered, not deleted as a failure
    assert replies == ok(job) and job.state == ACKED and b.job(job.id).state == ACKED


def test_a_timeout_is_noticed_by_the_first_tick_after_it() -> None:
    """No structure orders the deadlines: a waiting ADDJOB is due at its next try, or
    at its deadline when that comes first, behind those queued before it."""
    net, (a, b, c) = cluster(3)
    net.silent.update((b.id, c.id))
    start = now_ms()
    slow, slow_replies = add_job(a, timeout=60_000)
    quick, quick_replies = add_job(a, timeout=30)
    net.pump()
    a.repl.tick(start + 30 + ADD_NODE_PERIOD_MS + 5)
    assert quick_replies == [NOREPL_TIMEOUT] and a.job(quick.id) is None
    assert slow_replies == [] and list(a.repl.copies._waiting) == [slow.id]


async def test_the_retry_timer_runs_on_the_event_loop() -> None:
    net, (a, b, c) = cluster(3)
    net.silent.add(c.id)
    job, replies = add_job(a, timeout=120)
    net.pump()
    for _ in range(40):
        await asyncio.sleep(0.02)
        if replies:
            break
    assert replies == [NOREPL_TIMEOUT]
    assert a.repl.copies._timer is None


# -- receiving REPLJOB ---------------------------------------------------------------------

def test_repljob_refused_when_the_queue_is_paused_in_or_the_node_leaving() -> None:
    net, (a, b, c) = cluster(3)
    b.node.set_pause(b"q", PAUSED_IN, broadcast=False)
    c.node.leaving = True
    job, _ = add_job(a, async_=True)
    net.pump()
    assert b.job(job.id) is None and c.job(job.id) is None


def repljob(job: Job, noreply: bool = False) -> list:
    """REPLJOB's fields for one job, as its origin sends them."""
    return [noreply, list(job.nodes_delivered), encode_copy(job, now_ms())]


def test_duplicate_repljob_merges_the_node_lists() -> None:
    net, (a, b, c, d) = cluster(4)
    job, _ = add_job(a, async_=True)
    net.pump()
    holder = next(x for x in (b, c, d) if x.job(job.id) is not None)
    copy = holder.job(job.id)
    job.nodes_delivered = job.nodes_delivered | {d.id}
    net.deliver(a.id, holder.id, m.REPLJOB, repljob(job))
    assert holder.job(job.id) is copy and d.id in copy.nodes_delivered
    net.pump()  # GOTJOB for a job that no longer waits: ignored
    assert job.state == QUEUED


def test_replica_confirms_its_copy_once_it_is_in_the_aof() -> None:
    class Log(NoPersistence):
        def __init__(self) -> None:
            self.stored: list[bytes] = []
            self.waiting: list = []

        @property
        def recording(self) -> bool:
            return True

        def job_stored(self, job: Job) -> None:
            self.stored.append(job.id)

        def job_removed(self, job_id: bytes) -> None:
            pass

        def on_durable(self, callback) -> None:  # the disk is slow: until `synced`
            self.waiting.append(callback)

        def synced(self) -> None:
            for callback in self.waiting:
                callback()
            self.waiting.clear()

    net, (a, b, c) = cluster(3)
    log = Log()
    b.node.set_persistence(log)
    job, replies = add_job(a)
    net.pump()
    assert log.stored == [job.id]
    assert job.state == WAIT_REPL and replies == []  # no GOTJOB from b yet
    log.synced()
    net.pump()
    assert job.state == QUEUED and replies == [b"+" + job.id + b"\r\n"]


# -- requeue coordination -----------------------------------------------------------------

def test_concurrent_requeues_leave_exactly_one_queued_copy() -> None:
    for _ in range(10):
        net, members = cluster(3)
        a = members[0]
        job, _ = add_job(a)
        net.pump()
        assert a.node.consumers.get_jobs([b"q"], 1) == [job]  # delivered: active everywhere
        for member in members:  # every node requeues before hearing of the others
            assert member.node.requeue([job.id], nack=False) == 1
        net.pump()
        queued = [x for x in members if x.job(job.id).state == QUEUED]
        assert len(queued) == 1
        winner = queued[0]
        assert all(sender_wins(winner.id, x.id, job.id) for x in members if x is not winner)
        assert all(x.job(job.id).deliveries == 3 for x in members)


def test_nack_is_counted_on_every_copy() -> None:
    net, (a, b, c) = cluster(3)
    job, _ = add_job(a)
    net.pump()
    a.node.consumers.get_jobs([b"q"], 1)
    assert a.node.requeue([job.id], nack=True) == 1
    net.pump()
    assert [x.job(job.id).nacks for x in (a, b, c)] == [1, 1, 1]
    assert b.job(job.id).state == ACTIVE  # postponed, not queued


class Clock:
    """A settable now_ms() for the core and the replication layer."""

    def __init__(self) -> None:
        self.now = now_ms()

    def __call__(self) -> int:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    fake = Clock()
    # under now_ms, which compiled modules (node.py, jobops.py) call directly
    monkeypatch.setattr("disq.clock._time_ns", lambda: fake.now * 1_000_000)
    return fake


def test_willqueue_to_a_node_with_the_job_queued_postpones_the_requeue(clock: Clock) -> None:
    net, (a, b, c) = cluster(3)
    job, _ = add_job(a, retry=5)
    net.pump()
    copy = b.job(job.id)
    before = copy.qtime
    clock.now = before - 400  # 500 ms before its requeue: WILLQUEUE
    b.node.wakeups.run(clock.now)
    net.pump()
    assert net.sent(m.WILLQUEUE) == 2 and net.sent(m.QUEUED) >= 1
    assert copy.state == ACTIVE and copy.qtime >= clock.now + 5000 - 250
    assert job.state == QUEUED and a.node.qlen(b"q") == 1
    clock.now = before + 100  # the old requeue time passes: nothing happens
    b.node.wakeups.run(clock.now)
    assert copy.state == ACTIVE and b.node.qlen(b"q") == 0


def test_working_dequeues_and_postpones_everywhere() -> None:
    net, (a, b, c) = cluster(3)
    job, _ = add_job(a, retry=60)
    net.pump()
    c_before = c.job(job.id).qtime
    assert b.node.working(job.id) == 60
    net.pump()
    assert job.state == ACTIVE and a.node.qlen(b"q") == 0
    assert job.qtime > now_ms() + 55_000
    assert c.job(job.id).qtime >= c_before - 600


def test_enqueue_message_queues_a_copy() -> None:
    net, (a, b, c) = cluster(3)
    job, _ = add_job(a)
    net.pump()
    net.deliver(a.id, b.id, m.ENQUEUE, [job.id, 0])
    copy = b.job(job.id)
    assert copy.state == QUEUED and b.node.qlen(b"q") == 1
    assert net.sent(m.QUEUED) == 0  # the first queueing is silent
    assert [message[2] for message in net.queue] == [m.ENQUEUED]  # (to the sender)
    net.deliver(a.id, c.id, m.ENQUEUE, [job.id, 30])
    assert c.job(job.id).state == ACTIVE
    assert now_ms() + 29_000 < c.job(job.id).qtime <= now_ms() + 30_000


def test_pause_is_broadcast() -> None:
    net, (a, b, c) = cluster(3)
    a.node.set_pause(b"q", PAUSED_OUT, broadcast=True)
    net.pump()
    assert b.node.pause_flags(b"q") == PAUSED_OUT == c.node.pause_flags(b"q")


# -- federation ----------------------------------------------------------------------------

class Consumer:
    """A consumer blocked in GETJOB on a member, waiting `wait_ms` more (None: forever)."""

    def __init__(self, member: Member, wait_ms: int | None) -> None:
        self.node = member.node
        self.wait_ms = wait_ms
        self.jobs: list[Job] = []
        self.where = None  # (GETJOB ... WHERE's conditions: none)
        self.queues = self.node.consumers.block(self, [b"q"])
        self.node.consumers.want_jobs([b"q"])  # GETJOB asks once parked

    def wait_left_ms(self) -> int | None:
        return self.wait_ms

    def serve_job(self, job: Job) -> None:
        self.jobs.append(job)
        self.leave()

    def leave(self) -> None:
        self.node.consumers.unblock(self, self.queues)
        self.queues = []


def wanted_by(member: Member) -> dict[str, tuple[int, int]]:
    return member.repl.federation.wanted.get(b"q", {})


def test_a_job_is_pushed_to_a_consumer_that_waits() -> None:
    net, (a, b) = cluster(2)
    consumer = Consumer(b, 5000)
    net.pump()
    assert now_ms() < wanted_by(a)[b.id][0] <= now_ms() + 3000  # at most WANTED_FOR_MS
    job, _ = add_job(a, repl=1)
    net.pump()
    assert [j.id for j in consumer.jobs] == [job.id]
    assert net.sent(m.NEEDJOBS_CANCEL) == 1  # its last consumer served: no more pushes
    assert wanted_by(a) == {} and not a.node.queues.get(b"q").remote_wanted


@pytest.mark.parametrize("how", ["timed out", "served here"])
def test_no_job_is_pushed_once_the_consumers_left(how: str) -> None:
    """The asker says when its last consumer left, and the jobs queued on
    the other nodes after that stay there."""
    net, (a, b, c) = cluster(3)
    first, second = Consumer(b, 200), Consumer(b, None)
    net.pump()
    assert net.sent(m.NEEDJOBS) == 2  # one ask
    assert b.id in wanted_by(a) and b.id in wanted_by(c)
    first.leave()
    net.pump()
    assert net.sent(m.NEEDJOBS_CANCEL) == 0  # one still waits
    if how == "timed out":
        second.leave()
    else:
        add_job(b, repl=1)
    net.pump()
    assert net.sent(m.NEEDJOBS_CANCEL) == 2
    assert wanted_by(a) == {} == wanted_by(c)
    job, _ = add_job(a, repl=1)
    net.pump()
    assert net.sent(m.YOURJOBS) == 0 and a.node.qlen(b"q") == 1
    assert federation_of(b.node.queues.get(b"q")).asked_time == 0


def test_needjobs_says_how_long_the_consumers_wait() -> None:
    net, (a, b) = cluster(2)
    Consumer(b, 40)
    Consumer(b, 70)  # asks no sooner than ASK_PERIOD_MS after the first: not sent
    net.pump()
    assert net.log == [(b.id, a.id, m.NEEDJOBS)]
    assert wanted_by(a)[b.id][0] <= now_ms() + 40
    federation_of(b.node.queues.get(b"q")).bcast_time = 0  # the timer's next ask
    b.repl.federation.need_jobs(b.node.queues.get(b"q"))
    net.pump()
    assert now_ms() + 40 < wanted_by(a)[b.id][0] <= now_ms() + 70  # the longest wait


def test_needjobs_without_consumers_takes_the_jobs_on_hand_only() -> None:
    """GETJOB NOHANG asks too (as Disque does) but nobody waits for a later job."""
    net, (a, b) = cluster(2)
    job, _ = add_job(a, repl=1)
    b.node.consumers.want_jobs([b"q"])
    net.pump()
    assert b.node.qlen(b"q") == 1 and b.job(job.id) is not None
    federation_of(b.node.queues.get(b"q")).bcast_time = 0
    b.node.consumers.want_jobs([b"q"])
    net.pump()
    assert wanted_by(a) == {}
    add_job(a, repl=1)
    net.pump()
    assert a.node.qlen(b"q") == 1


def test_needjobs_of_an_older_disq_is_remembered_for_a_while() -> None:
    """A NEEDJOBS without the wait (a disq before NEEDJOBS_CANCEL): pushes for
    WANTED_FOR_MS, as before; a malformed wait is ignored."""
    net, (a, b) = cluster(2)
    for fields in ([b"q", 10, "x"], [b"q", 10, None], [b"q", 10, 1.5], [b"q", 10, -5]):
        net.deliver(b.id, a.id, m.NEEDJOBS, fields)
    for fields in ([], [None], ["q"], [b"other"]):
        net.deliver(b.id, a.id, m.NEEDJOBS_CANCEL, fields)
    assert wanted_by(a) == {}
    net.deliver(b.id, a.id, m.NEEDJOBS, [b"q", 10])
    assert now_ms() + 2900 < wanted_by(a)[b.id][0] <= now_ms() + 3000
    job, _ = add_job(a, repl=1)
    net.pump()
    assert b.node.qlen(b"q") == 1 and b.job(job.id) is not None


def test_needjobs_is_answered_with_the_most_urgent_jobs() -> None:
    """Federation takes the jobs in delivery order, the most urgent first."""
    net, (a, b) = cluster(2)
    jobs = {}
    for priority in (200, 5, 128, 0):
        job = a.node.admission.add_job(AddJob(b"q", b"body", 0, 1, 1, None, 3600, 0))  # DELAY 1
        job.ext = JobExt(priority)
        assert a.node.enqueue(job, False)
        jobs[priority] = job
    b.node.consumers.want_jobs([b"q"])
    net.pump()
    assert b.node.qlen(b"q") == 2  # half of the 4 on hand
    assert b.job(jobs[0].id) is not None and b.job(jobs[5].id) is not None
    assert a.node.consumers.get_jobs([b"q"], 2) == [jobs[128], jobs[200]]


# -- acknowledgements and their garbage collection ------------------------------------------

@pytest.mark.parametrize("acker", [0, 1])
def test_ackjob_on_one_node_removes_every_copy(acker: int) -> None:
    net, members = cluster(3)
    job, _ = add_job(members[0])
    net.pump()
    assert members[acker].node.ack([job.id]) == 1
    net.pump()
    assert holders(members, job.id) == []
    assert net.sent(m.SETACK) >= 2 and net.sent(m.GOTACK) >= 2 and net.sent(m.DELJOB) >= 2


def test_gc_waits_for_a_node_that_is_down_then_completes() -> None:
    net, (a, b, c) = cluster(3)
    job, _ = add_job(a)
    net.pump()
    net.down.add(c.id)
    a.node.ack([job.id])
    net.pump()
    assert job.state == ACKED and b.job(job.id).state == ACKED
    net.down.clear()
    a.node.wakeups.run(job.qtime + 1)  # the next GC attempt (1 s later)
    net.pump()
    assert holders([a, b, c], job.id) == []


def test_gc_keeps_confirmations_between_attempts() -> None:
    net, (a, b, c) = cluster(3)
    job, _ = add_job(a)
    net.pump()
    net.down.add(c.id)
    a.node.ack([job.id])
    net.pump()
    assert job.nodes_confirmed == {a.id, b.id}
    net.down.clear()
    net.down.add(b.id)  # b confirmed already: c alone completes the GC
    a.node.wakeups.run(job.qtime + 1)
    net.pump()
    assert a.job(job.id) is None and c.job(job.id) is None


def test_dummy_ack_on_a_node_that_never_saw_the_job_removes_every_copy() -> None:
    net, (a, b, c, d) = cluster(4)
    net.down.add(d.id)
    job, replies = add_job(a)
    net.pump()
    assert replies == ok(job)
    net.down.clear()
    assert d.node.ack([job.id]) == 0
    dummy = d.job(job.id)
    assert dummy is not None and dummy.state == ACKED and dummy.body is None
    net.pump()
    assert holders([a, b, c, d], job.id) == []


def test_dummy_acks_wait_for_the_real_holders() -> None:
    net, (a, b, c, d, e) = cluster(5)
    net.down.update({d.id, e.id})
    job, _ = add_job(a)
    net.pump()
    net.down = {a.id, b.id, c.id}
    d.node.ack([job.id])
    e.node.ack([job.id])
    net.pump()  # two dummy ACKs asked each other: neither may forget the ACK yet
    assert d.job(job.id) is not None and e.job(job.id) is not None
    net.down.clear()
    d.node.wakeups.run(d.job(job.id).qtime + 1)  # d's next GC attempt reaches the holders
    net.pump()
    assert all(x.job(job.id) is None or x.job(job.id).state == ACKED for x in (a, b, c, e))
    for member in (a, b, c, e):  # whatever is left collects on its next attempt
        if member.job(job.id) is not None:
            member.node.wakeups.run(member.job(job.id).qtime + 1)
            net.pump()
    assert holders([a, b, c, d, e], job.id) == []


def test_dummy_ack_of_a_job_nobody_knows_is_collected() -> None:
    net, (a, b, c) = cluster(3)
    job_id = b"D-" + b.id[:8].encode() + b"-" + b"A" * 24 + b"-0001"
    assert a.node.ack([job_id]) == 0
    assert a.job(job_id) is not None
    net.pump()
    assert holders([a, b, c], job_id) == []
    assert net.sent(m.GOTACK) == 2


def test_setack_completes_a_waiting_addjob() -> None:
    net, (a, b, c) = cluster(3)
    net.silent.add(c.id)
    job, replies = add_job(a)
    net.pump()
    b.node.ack([job.id])
    net.pump()
    assert replies == ok(job)
    assert job.state == ACKED and a.node.qlen(b"q") == 0


def test_acked_job_never_comes_back() -> None:
    net, (a, b, c) = cluster(3)
    job, _ = add_job(a)
    net.pump()
    net.down.update({a.id, c.id})
    b.node.ack([job.id])
    net.pump()
    copy = b.job(job.id)
    assert copy.state == ACKED
    net.down.clear()
    # A late REPLJOB, QUEUED and WILLQUEUE from a: b stays acked and tells a.
    net.deliver(a.id, b.id, m.REPLJOB, repljob(job))
    net.deliver(a.id, b.id, m.QUEUED, [job.id, 4])
    net.deliver(a.id, b.id, m.WILLQUEUE, [job.id])
    assert b.job(job.id) is copy and copy.state == ACKED and b.node.qlen(b"q") == 0
    assert [t for _, dst, t in _queued(net) if dst == a.id] == [m.SETACK] * 3
    net.pump()
    assert job.state == ACKED or a.job(job.id) is None
    b.node.wakeups.run(copy.qtime + 1)  # b's next GC attempt reaches c too
    net.pump()
    assert holders([a, b, c], job.id) == []


def test_ack_messages_carry_many_jobs() -> None:
    """SETACK, GOTACK and DELJOB name the jobs of one loop turn (pairs, pairs, IDs): a
    holder acks each job of a SETACK and answers each in one GOTACK; the origin deletes
    each job of a GOTACK; a DELJOB deletes each; a bad pair is skipped, not the rest."""
    net, (a, b) = cluster(2)
    jobs = [add_job(a, repl=2)[0] for _ in range(3)]
    net.pump()
    assert all(len(holders([a, b], j.id)) == 2 for j in jobs)
    for job in jobs:
        a.node.acknowledge(a.job(job.id))
    net.deliver(a.id, b.id, m.SETACK, [jobs[0].id, 2, b"bad", 2, jobs[1].id, 2, jobs[2].id])
    assert [b.job(j.id).state == ACKED for j in jobs] == [True, True, False]  # (odd tail)
    gotacks = [msgpack.unpackb(p) for _, dst, t, p in net.queue if t == m.GOTACK]
    assert sum(gotacks, []) == [jobs[0].id, True, jobs[1].id, True]  # (FakeBus: unbatched)
    net.queue.clear()
    net.deliver(b.id, a.id, m.GOTACK, [jobs[0].id, True, jobs[2].id, 1, jobs[1].id, True])
    assert [a.job(j.id) is None for j in jobs] == [True, True, False]  # 1: not a bool
    assert sorted(msgpack.unpackb(p)[0] for _, _, t, p in net.queue if t == m.DELJOB) == \
        sorted([jobs[0].id, jobs[1].id])
    net.queue.clear()
    net.deliver(a.id, b.id, m.DELJOB, [jobs[0].id, 7, jobs[2].id])
    assert [b.job(j.id) is None for j in jobs] == [True, False, True]


def _queued(net: Network) -> list[tuple[str, str, int]]:
    return [(src, dst, mtype) for src, dst, mtype, _ in net.queue]


def test_fastack_on_an_owner_deletes_every_copy() -> None:
    net, (a, b, c) = cluster(3)
    job, _ = add_job(a)
    net.pump()
    assert b.node.fast_ack([job.id]) == 1
    net.pump()
    assert holders([a, b, c], job.id) == []
    assert net.sent(m.SETACK) == 0


def test_fastack_on_a_node_without_the_job_broadcasts_deljob() -> None:
    net, (a, b, c, d) = cluster(4)
    net.down.add(d.id)
    job, _ = add_job(a)
    net.pump()
    net.down.clear()
    assert d.node.fast_ack([job.id]) == 0
    net.pump()
    assert holders([a, b, c, d], job.id) == []


# -- memory -------------------------------------------------------------------------------------

def test_eviction_takes_acked_and_delivered_at_most_once_jobs_only() -> None:
    """Node.evict (above 95% of maxmemory) drops acked jobs still waiting for their
    GC and delivered RETRY 0 jobs; queued and active jobs stay, whatever the target."""
    net, (a, b, c) = cluster(3)
    replicated = [add_job(a)[0] for _ in range(30)]
    net.pump()
    net.silent.update((a.id, c.id))  # acks on b wait for GOTACKs: they stay ACKED
    b.node.ack([job.id for job in replicated[:10]])
    net.pump()
    at_most_once = [add_job(b, repl=1, retry=0)[0] for _ in range(10)]
    fetched = b.node.consumers.get_jobs([b"q"], 5)
    assert len(fetched) == 5 and all(job.retry == 0 for job in fetched)
    # each call is one command's slice (2 ms at most: a loaded machine may need several)
    assert not any(b.node.evict(0) for _ in range(20))  # the rest may not go
    states = {job.id: b.job(job.id) for job in replicated + at_most_once}
    assert all(states[job.id] is None for job in replicated[:10])
    assert all(states[job.id] is not None for job in replicated[10:])
    delivered = {job.id for job in fetched}
    for job in at_most_once:
        assert (states[job.id] is None) == (job.id in delivered)
    assert b.node.stats.jobs_evicted == 10 + 5


def test_holder_sets_are_shared_and_confirmation_sets_untracked() -> None:
    """A million replicated jobs must not cost a set each: jobs with the same holders
    share one frozenset, on the origin and on the replicas. The sets a job owns
    (confirmations of an ACK round) stay out of the cycle collector."""
    net, (a, b, c) = cluster(3)
    jobs = [add_job(a)[0] for _ in range(3)]
    net.pump()
    for member in (a, b, c):
        held = [member.job(job.id).nodes_delivered for job in jobs]
        assert held[0] == {a.id, b.id, c.id}
        assert all(h is held[0] for h in held)
    assert a.job(jobs[0].id).nodes_delivered is b.job(jobs[0].id).nodes_delivered
    b.node.ack([jobs[0].id])
    assert not gc.is_tracked(b.job(jobs[0].id).nodes_confirmed)
    dummy_id = b"D-" + b.id[:8].encode() + b"-" + b"B" * 24 + b"-0001"
    a.node.ack([dummy_id])
    assert a.job(dummy_id).nodes_delivered == frozenset()


# -- the wire format and node order ---------------------------------------------------------

def test_wire_round_trip() -> None:
    node = Node(Config(), new_node_id())
    job = node.admission.add_job(AddJob(b"q", b"body", 0, 1, 7, 30, 600))
    job.flags |= DELIVERED
    job.nacks, job.deliveries = 2, 5
    other = new_node_id()
    job.nodes_delivered = frozenset({node.id, other, "f" * 40})
    now = now_ms()
    data = msgpack.unpackb(msgpack.packb(encode_job(job, node.id, now), use_bin_type=True),
                           raw=False)
    copy = decode_job(data, now + 5, {node.id: node.id, other: other})
    assert copy is not None
    assert (copy.id, copy.queue, copy.body, copy.state, copy.repl, copy.ctime) == (
        job.id, b"q", b"body", ACTIVE, 1, job.ctime)
    assert (copy.delay, copy.retry, copy.nacks, copy.deliveries) == (7, 30, 2, 5)
    assert copy.etime == job.etime + 5  # relative TTL, re-anchored on the receiver's clock
    assert not copy.flags & DELIVERED
    assert copy.nodes_delivered == {node.id, other}  # unknown nodes left out


def _corruptions(valid: list) -> Iterable[object]:
    yield None
    yield b"garbage"
    yield valid[:-1]
    yield [*valid, 1]
    odd_values = [None, True, -1, 2**70, 1.5, "text", b"", b"x" * 41, [], {}, [1, 2]]
    for i in range(len(valid)):
        for value in odd_values:
            broken = list(valid)
            broken[i] = value
            yield broken
    yield [b"D-12345678-" + b"A" * 24 + b"X0001", *valid[1:]]


def test_corrupt_repljob_is_dropped() -> None:
    net, (a, b, c) = cluster(3)
    job = a.node.admission.add_job(AddJob(b"q", b"x", 0, 3, 0, None, 3600, 0, True))
    valid = encode_copy(job, now_ms())
    holders = [a.id, b.id]
    net.queue.clear()
    for data in _corruptions(valid):
        for noreply in (False, True):
            net.deliver(a.id, b.id, m.REPLJOB, [noreply, holders, data])
        net.deliver(a.id, b.id, m.REPLJOB, [False, data])
        if b.job(job.id) is not None:  # a mutation that is still a valid job
            b.node.delete([job.id])
    for fields in ([], [False], [False, holders], [valid, False], [None, holders, valid],
                   [0, holders, valid], [False, None, valid], [False, "ids", valid],
                   [False, [123], valid], [False, ["a" * 40] * 20_000, valid]):
        net.deliver(a.id, b.id, m.REPLJOB, fields)
    assert b.job(job.id) is None and len(b.node.jobs) == 0
    assert {mtype for _, _, mtype in _queued(net)} <= {m.GOTJOB}  # for the valid ones


def test_corrupt_job_messages_are_dropped() -> None:
    net, (a, b, c) = cluster(3)
    job, _ = add_job(a)
    net.pump()
    copy = b.job(job.id)
    state = (copy.state, copy.qtime, copy.nacks, copy.deliveries, set(copy.nodes_delivered))
    bad_fields = [[], [None], [123], ["x" * 40], [job.id.decode()], [b"D-short"],
                  [job.id, None], [job.id, -1], [job.id, 2**40], [job.id, "1"],
                  [job.id, 1.0], [job.id, [1]], [[job.id]], [{}, 1]]
    job_types = (m.GOTJOB, m.ENQUEUE, m.QUEUED, m.SETACK, m.WILLQUEUE, m.GOTACK,
                 m.DELJOB, m.WORKING)
    for mtype in (*job_types, m.PAUSE):
        for fields in bad_fields:
            if mtype in (m.DELJOB, m.WORKING, m.WILLQUEUE, m.GOTJOB) and fields[:1] == [job.id]:
                continue  # a valid message: the extra field is ignored
            net.deliver(a.id, b.id, mtype, fields)
    for fields in ([b"q", -1], [b"q", 9], ["q", 1], [b"q"], [None, 1]):
        net.deliver(a.id, b.id, m.PAUSE, fields)
    net.queue.clear()
    assert b.job(job.id) is copy
    assert (copy.state, copy.qtime, copy.nacks, copy.deliveries,
            set(copy.nodes_delivered)) == state
    assert b.node.pause_flags(b"q") == 0


def test_random_messages_never_raise() -> None:
    rng = random.Random(7)
    net, (a, b, c) = cluster(3)
    job, _ = add_job(a)
    net.pump()
    values = [None, True, 0, 1, -5, 2**33, 3.5, "s", b"", job.id, a.id, b"q", [], [job.id], {}]
    for _ in range(3000):
        mtype = rng.choice([m.REPLJOB, m.GOTJOB, m.ENQUEUE, m.QUEUED, m.SETACK, m.WILLQUEUE,
                            m.GOTACK, m.DELJOB, m.WORKING, m.PAUSE, m.NEEDJOBS,
                            m.NEEDJOBS_CANCEL, m.YOURJOBS])
        fields = [rng.choice(values) for _ in range(rng.randrange(4))]
        net.deliver(a.id, b.id, mtype, fields)
    net.queue.clear()


def test_sender_wins_is_a_strict_order_that_varies_by_job() -> None:
    ids = [new_node_id() for _ in range(4)]
    gen = Node(Config(), ids[0]).admission.ids
    jobs = [gen.next(3600, 1) for _ in range(400)]
    wins = 0
    for job_id in jobs:
        assert sender_wins(ids[0], ids[1], job_id) != sender_wins(ids[1], ids[0], job_id)
        assert not sender_wins(ids[0], ids[0], job_id)
        wins += sender_wins(ids[0], ids[1], job_id)
        best = [i for i in ids if all(sender_wins(i, o, job_id) for o in ids if o != i)]
        assert len(best) == 1  # one node keeps it, whatever the order messages arrive in
    assert 120 < wins < 280


def test_the_real_bus_batches_without_reordering_a_link(tmp_path: Path) -> None:
    """ClusterBus.send_batched: an item joins this turn's message of its type unless a
    message that is no batch was queued since (it would overtake it: a DEDUP_QUERY
    ahead of the DELJOB and DEDUP_FORGET of the job it would be answered with).
    Batches may pass each other."""
    # real objects (the bus may be compiled: it takes no stand-ins), a loop that never
    # flushes, so that the queued messages stay in link.outbox
    myself = ClusterNode(new_node_id(), "127.0.0.1", 7711, NodeFlag.MYSELF)
    membership = Membership(myself, str(tmp_path / "nodes.conf"))
    loop = SimpleNamespace(call_soon=lambda callback: None)
    bus = ClusterBus(membership, [], 7711, lambda: 1000, loop)  # type: ignore[arg-type]
    link = Link(bus, None)
    link.transport = object()  # type: ignore[assignment]
    link.outbox.up = True  # (as connection_made sets it)
    peer = ClusterNode(new_node_id(), "127.0.0.1", 7712)
    peer.connected, peer.link = True, link
    membership.nodes[peer.id] = peer

    def batched(mtype: int, item: object) -> None:
        bus.send_batched([peer.id], mtype, [item])

    batched(m.DEDUP_QUERY, [b"k1", 60])
    batched(m.GOTJOB, b"J1")
    batched(m.DEDUP_QUERY, [b"k2", 60])
    link.send([m.DELJOB, b"J"])
    batched(m.DEDUP_QUERY, [b"k3", 60])
    batched(m.GOTJOB, b"J2")
    batched(m.DEDUP_QUERY, [b"k4", 60])
    assert link.outbox.messages == [
        [m.DEDUP_QUERY, [b"k1", 60], [b"k2", 60]], [m.GOTJOB, b"J1"], [m.DELJOB, b"J"],
        [m.DEDUP_QUERY, [b"k3", 60], [b"k4", 60]], [m.GOTJOB, b"J2"]]
