"""disq.node.Node without sockets: queue GC, requeue counters, timers with a fake now."""

from __future__ import annotations

import re
from types import SimpleNamespace

import pytest

from disq import errors
from disq.acl import AclTable
from disq.config import Config
from disq.ids import new_node_id
from disq.job import ACTIVE, DELETED, QUEUED, Job, JobExt, job_group, job_priority
from disq.node import QUEUE_MAX_IDLE_MS, Node, now_ms
from disq.queue import PAUSED_ALL, PAUSED_IN, PAUSED_OUT, PriorityJobs, Queue, SortedJobs
from disq.requests import AddJob
from disq.server.commands.queues import qpeek
from disq.server.queue_service import QueueService
from disq.server.table import CATEGORIES


@pytest.fixture
def node() -> Node:
    n = Node(Config(), new_node_id())
    n.arm_timer = ARMED.setdefault(id(n), []).append  # (a compiled Node takes no new attribute)
    return n


ARMED: dict[int, list[int]] = {}  # the times each test's node armed its timer at, by id


def add(node: Node, queue: bytes = b"q", body: bytes = b"x", *, repl: int | None = None,
        delay: int = 0, retry: int | None = None, ttl: int = 86400, maxlen: int = 0) -> Job:
    return node.admission.add_job(AddJob(queue, body, 0, repl, delay, retry, ttl, maxlen))


def add_ext(node: Node, queue: bytes = b"q", *, priority: int = 128,
            group: bytes | None = None) -> Job:
    """A job with a priority and/or a group, queued as ADDJOB would: added
    with a DELAY (not queued yet), given its JobExt, then queued."""
    job = add(node, queue, delay=1)
    assert job.state == ACTIVE
    job.ext = JobExt(priority, group)
    assert node.enqueue(job, False)
    return job


class FakeWaiter:
    """A blocked consumer: takes one job and unblocks itself, as the server does."""

    def __init__(self, node: Node, names: list[bytes]) -> None:
        self.node = node
        self.jobs: list[Job] = []
        self.where = None  # (GETJOB ... WHERE's conditions: none)
        self.queues: list[Queue] = node.consumers.block(self, names)

    def serve_job(self, job: Job) -> None:
        self.jobs.append(job)
        self.node.consumers.unblock(self, self.queues)
        self.queues = []


# -- add / fetch -------------------------------------------------------------------------

def test_add_job_defaults(node: Node) -> None:
    job = add(node)
    assert job.state == QUEUED
    assert (job.repl, job.retry, job.delay) == (1, 300, 0)
    assert node.lookup(job.id) is job
    assert node.qlen(b"q") == 1
    assert job.id[2:10] == node.id[:8].encode()
    assert job.id.endswith(b"-05a1")
    assert 0 < job.etime - now_ms() <= 86400 * 1000
    assert node.stats.jobs_added == 1


def test_add_job_errors(node: Node) -> None:
    with pytest.raises(errors.DisqError) as exc:
        add(node, repl=2)
    assert type(exc.value) is errors.NOREPL
    with pytest.raises(errors.DisqError, match="RETRY set to 0"):
        add(node, repl=2, retry=0)
    with pytest.raises(errors.DisqError, match="DELAY is greater than TTL"):
        add(node, delay=10, ttl=10)
    add(node)
    with pytest.raises(errors.DisqError) as exc:
        add(node, maxlen=1)
    assert type(exc.value) is errors.MAXLEN
    node.set_pause(b"q", PAUSED_IN, broadcast=False)
    with pytest.raises(errors.DisqError) as exc:
        add(node)
    assert type(exc.value) is errors.PAUSED
    assert len(node.jobs) == 1


def test_ctime_strictly_increasing(node: Node) -> None:
    jobs = [add(node) for _ in range(200)]
    ctimes = [j.ctime for j in jobs]
    assert ctimes == sorted(set(ctimes))


def test_get_jobs_round_robin(node: Node) -> None:
    a = [add(node, b"a") for _ in range(3)]
    b = [add(node, b"b")]
    got = node.consumers.get_jobs([b"a", b"missing", b"b"], 10)
    assert got == [a[0], b[0], a[1], a[2]]
    assert all(j.state == ACTIVE for j in got)
    assert node.consumers.get_jobs([b"a", b"b"], 10) == []
    q = node.queues.get(b"a")
    assert (q.jobs_in, q.jobs_out) == (3, 3)
    assert node.stats.jobs_delivered == 4


def test_get_jobs_skips_paused_out(node: Node) -> None:
    add(node, b"a")
    node.set_pause(b"a", PAUSED_OUT, broadcast=False)
    assert node.consumers.get_jobs([b"a"], 1) == []
    node.set_pause(b"a", 0, broadcast=False)
    assert len(node.consumers.get_jobs([b"a"], 1)) == 1


# -- requeue counters ----------------------------------------------------------------------

def test_requeue_counters(node: Node) -> None:
    job = add(node)
    assert node.requeue([job.id], nack=True) == 0  # queued: untouched
    node.consumers.get_jobs([b"q"], 1)
    assert node.requeue([job.id], nack=True) == 1
    assert (job.nacks, job.deliveries, job.state) == (1, 0, QUEUED)
    node.consumers.get_jobs([b"q"], 1)
    assert node.requeue([job.id, b"D-00000000-AAAAAAAAAAAAAAAAAAAAAAAA-05a1"], nack=False) == 1
    assert (job.nacks, job.deliveries) == (1, 1)
    node.consumers.get_jobs([b"q"], 1)
    assert node.requeue([job.id], nack=True) == 1
    assert (job.nacks, job.deliveries) == (2, 1)
    assert node.stats.jobs_nacked == 2
    assert node.stats.jobs_requeued == 1
    q = node.queues.get(b"q")
    assert (q.jobs_in, q.jobs_out) == (4, 3)


def test_first_queueing_of_delayed_job_is_not_a_redelivery(node: Node) -> None:
    job = add(node, delay=5)
    assert job.state == ACTIVE and node.qlen(b"q") == 0
    assert node.requeue([job.id], nack=False) == 1
    assert job.deliveries == 0
    node.consumers.get_jobs([b"q"], 1)
    assert node.requeue([job.id], nack=False) == 1
    assert job.deliveries == 1


def test_at_most_once_not_requeued_after_delivery(node: Node) -> None:
    job = add(node, retry=0)
    assert job.qtime == 0
    node.consumers.get_jobs([b"q"], 1)
    assert node.requeue([job.id], nack=True) == 0
    assert node.requeue([job.id], nack=False) == 0
    assert job.state == ACTIVE and job.nacks == 0


def test_dequeue_and_delete(node: Node) -> None:
    a, b = add(node), add(node)
    assert node.dequeue_ids([a.id, a.id]) == 1
    assert a.state == ACTIVE and node.qlen(b"q") == 1
    assert node.delete([a.id, b.id, a.id]) == 2
    assert a.state == DELETED and node.qlen(b"q") == 0 and len(node.jobs) == 0


def test_ack_single_node_deletes(node: Node) -> None:
    a = add(node)
    assert node.ack([a.id, a.id]) == 1
    assert node.lookup(a.id) is None and node.qlen(b"q") == 0
    assert node.ack([b"D-00000000-AAAAAAAAAAAAAAAAAAAAAAAA-05a1"]) == 0
    assert len(node.jobs) == 0  # no dummy ack when alone


# -- timers with a fake "now" ------------------------------------------------------------

def test_expiry_via_run_timers(node: Node) -> None:
    queued = add(node, ttl=10)
    fetched = add(node, ttl=10)
    node.consumers.get_jobs([b"q"], 1)  # takes `queued`, the older one
    keep = add(node, ttl=100)
    now = now_ms()
    node.wakeups.run(now + 1000)
    assert len(node.jobs) == 3
    deadline = node.wakeups.run(now + 11_000)
    assert node.lookup(queued.id) is None and node.lookup(fetched.id) is None
    assert queued.state == DELETED and fetched.state == DELETED
    assert node.lookup(keep.id) is keep and node.qlen(b"q") == 1
    assert node.stats.jobs_expired == 2
    assert deadline is not None and deadline > now + 11_000


def test_retry_requeue_via_run_timers(node: Node) -> None:
    job = add(node, retry=5)
    node.consumers.get_jobs([b"q"], 1)
    now = now_ms()
    node.wakeups.run(now + 4000)
    assert job.state == ACTIVE
    node.wakeups.run(now + 6000)
    assert job.state == QUEUED and node.qlen(b"q") == 1
    assert job.deliveries == 1
    assert now + 6000 + 4000 <= job.qtime <= now + 6000 + 6000
    # a queued job is not requeued again: its requeue time just moves on
    node.wakeups.run(job.qtime + 1)
    assert job.state == QUEUED and job.deliveries == 1 and node.qlen(b"q") == 1


def test_delay_via_run_timers(node: Node) -> None:
    job = add(node, delay=5, retry=60)
    now = now_ms()
    armed = ARMED[id(node)]
    assert armed and min(armed) <= now + 5000
    node.wakeups.run(now + 3000)
    assert job.state == ACTIVE and node.qlen(b"q") == 0
    node.wakeups.run(now + 5100)
    assert job.state == QUEUED and job.deliveries == 0


def test_paused_in_postpones_requeue(node: Node) -> None:
    retrying = add(node, delay=5, retry=2)
    once = add(node, delay=5, retry=0)
    node.set_pause(b"q", PAUSED_IN, broadcast=False)
    now = now_ms()
    node.wakeups.run(now + 5100)
    assert once.state == QUEUED
    assert retrying.state == ACTIVE and retrying.qtime > now + 5100
    node.set_pause(b"q", 0, broadcast=False)
    node.wakeups.run(retrying.qtime)
    assert retrying.state == QUEUED


def test_at_most_once_timer_never_requeues(node: Node) -> None:
    job = add(node, retry=0, ttl=100)
    node.consumers.get_jobs([b"q"], 1)
    node.wakeups.run(now_ms() + 50_000)
    assert job.state == ACTIVE and job.deliveries == 0
    node.wakeups.run(now_ms() + 101_000)
    assert node.lookup(job.id) is None


def test_working(node: Node) -> None:
    job = add(node, retry=7)
    with pytest.raises(errors.DisqError) as exc:
        node.working(b"D-00000000-AAAAAAAAAAAAAAAAAAAAAAAA-05a1")
    assert type(exc.value) is errors.NOJOB
    before = now_ms()
    assert node.working(job.id) == 7
    assert job.state == ACTIVE and node.qlen(b"q") == 0
    assert before + 7000 - 600 <= job.qtime <= now_ms() + 7000 + 600
    # more than half of the TTL gone: too late
    now = now_ms()
    job.ctime = (now - 60_000) * 1_000_000
    job.etime = now + 10_000
    with pytest.raises(errors.DisqError) as exc:
        node.working(job.id)
    assert type(exc.value) is errors.TOOLATE


# -- blocked consumers -------------------------------------------------------------------

def test_blocked_waiters_served_in_order(node: Node) -> None:
    w1 = FakeWaiter(node, [b"q", b"other"])
    w2 = FakeWaiter(node, [b"q"])
    assert node.blocked_clients == 2
    a, b, c = add(node), add(node), add(node)
    node.consumers.serve_ready()
    assert (w1.jobs, w2.jobs) == ([a], [b])
    assert node.qlen(b"q") == 1 and c.state == QUEUED
    assert node.blocked_clients == 0
    assert not node.queues.get(b"other").waiters


def test_a_waiter_is_served_after_the_operation_that_queued_its_job(node: Node) -> None:
    """Never inside it: the queue is marked, the server is told once (`on_ready`),
    and `serve_ready` serves the consumers afterwards, the most urgent job first of
    all those the operations queued meanwhile."""
    told: list[int] = []
    node.consumers.on_ready = lambda: told.append(len(node.consumers.ready))
    w = FakeWaiter(node, [b"q"])
    plain = add(node)
    assert w.jobs == [] and plain.state == QUEUED and node.qlen(b"q") == 1
    urgent = add_ext(node, priority=3)
    assert told == [0] and node.consumers.ready == [node.queues.get(b"q")]
    node.consumers.serve_ready()
    assert w.jobs == [urgent] and node.qlen(b"q") == 1 and node.blocked_clients == 0
    assert node.consumers.ready == [] and node.queues.get(b"q").ready == 0
    node.consumers.serve_ready()  # nothing more to do
    assert w.jobs == [urgent]


def test_a_job_whose_waiter_left_before_the_serve_stays_queued(node: Node) -> None:
    first, second = FakeWaiter(node, [b"q"]), FakeWaiter(node, [b"q"])
    job = add(node)
    node.consumers.unblock(first, first.queues)  # timed out, or its client went away
    node.consumers.serve_ready()
    assert first.jobs == [] and second.jobs == [job]
    third = FakeWaiter(node, [b"q"])
    kept = add(node)
    node.consumers.unblock(third, third.queues)
    node.consumers.serve_ready()
    assert third.jobs == [] and kept.state == QUEUED and node.qlen(b"q") == 1
    assert node.consumers.get_jobs([b"q"], 1) == [kept]  # delivered once, to the next taker


def test_unpause_out_serves_waiters(node: Node) -> None:
    add(node)
    node.set_pause(b"q", PAUSED_OUT, broadcast=False)
    w = FakeWaiter(node, [b"q"])
    add(node)
    assert w.jobs == []
    node.set_pause(b"q", PAUSED_IN, broadcast=False)
    node.consumers.serve_ready()
    assert len(w.jobs) == 1 and node.qlen(b"q") == 1


# -- priorities and groups ----------------------------------------------------------------

def test_get_jobs_most_urgent_first_then_creation_time(node: Node) -> None:
    plain = add(node)
    lazy = add_ext(node, priority=200)
    urgent = add_ext(node, priority=0)
    plain2 = add(node)
    also_urgent = add_ext(node, priority=0)
    assert type(node.queues.get(b"q").jobs) is PriorityJobs
    assert node.qlen(b"q") == 5
    got = node.consumers.get_jobs([b"q"], 10)
    assert got == [urgent, also_urgent, plain, plain2, lazy]
    assert node.qlen(b"q") == 0 and all(j.state == ACTIVE for j in got)


def test_get_jobs_across_queues_takes_each_queue_most_urgent(node: Node) -> None:
    a_plain, a_urgent = add(node, b"a"), add_ext(node, b"a", priority=3)
    b_plain, b_urgent = add(node, b"b"), add_ext(node, b"b", priority=1)
    assert node.consumers.get_jobs([b"a", b"b"], 4) == [a_urgent, b_urgent, a_plain, b_plain]


def test_blocked_consumers_get_the_most_urgent(node: Node) -> None:
    node.set_pause(b"q", PAUSED_OUT, broadcast=False)
    jobs = [add_ext(node, priority=p) for p in (50, 128, 7, 255, 7)]
    waiters = [FakeWaiter(node, [b"q"]) for _ in range(3)]
    node.set_pause(b"q", 0, broadcast=False)
    node.consumers.serve_ready()
    assert [w.jobs for w in waiters] == [[jobs[2]], [jobs[4]], [jobs[0]]]
    assert node.qlen(b"q") == 2
    assert node.consumers.get_jobs([b"q"], 1) == [jobs[1]]  # a newcomer: the most urgent left


def test_groups_take_turns_one_group_with_a_hundred_times_the_jobs(node: Node) -> None:
    for _ in range(300):
        add_ext(node, group=b"flood")
    for g in range(9):
        for _ in range(3):
            add_ext(node, group=b"g%d" % g)
    first = [job_group(j) for j in node.consumers.get_jobs([b"q"], 20)]
    one_round = [b"flood"] + [b"g%d" % g for g in range(9)]
    assert first == one_round + one_round
    node.set_pause(b"q", PAUSED_OUT, broadcast=False)
    waiters = [FakeWaiter(node, [b"q"]) for _ in range(10)]  # blocked consumers too
    node.set_pause(b"q", 0, broadcast=False)
    node.consumers.serve_ready()
    assert [job_group(w.jobs[0]) for w in waiters] == one_round
    assert node.qlen(b"q") == 300 + 27 - 30


def test_priorities_win_over_groups(node: Node) -> None:
    for _ in range(5):
        add_ext(node, group=b"a", priority=10)
    b = add_ext(node, group=b"b", priority=20)
    c = add_ext(node, group=b"c", priority=5)
    got = node.consumers.get_jobs([b"q"], 7)
    assert got[0] is c and got[-1] is b
    assert [job_priority(j) for j in got] == [5, 10, 10, 10, 10, 10, 20]


def test_dequeue_ack_and_working_remove_from_the_middle(node: Node) -> None:
    jobs = [add_ext(node, priority=p, group=g) for p, g in
            [(1, b"a"), (1, b"b"), (1, b"a"), (9, None), (128, None), (1, b"b")]]
    plain = add(node)
    assert node.dequeue_ids([jobs[2].id]) == 1
    assert node.ack([jobs[3].id]) == 1
    node.working(jobs[1].id)
    assert node.qlen(b"q") == 4
    assert node.consumers.get_jobs([b"q"], 10) == [jobs[0], jobs[5], jobs[4], plain]
    assert node.qlen(b"q") == 0


def test_requeued_job_keeps_its_priority(node: Node) -> None:
    plain = add(node)
    urgent = add_ext(node, priority=2)
    assert node.consumers.get_jobs([b"q"], 1) == [urgent]
    assert node.requeue([urgent.id], nack=True) == 1  # NACK: back in the queue
    assert node.consumers.get_jobs([b"q"], 2) == [urgent, plain]


def qpeek_ids(node: Node, count: int) -> list[bytes]:
    server = SimpleNamespace(node=node)
    server.queues_service = QueueService(server)  # type: ignore[arg-type]
    client = SimpleNamespace(node=node, user=AclTable(CATEGORIES).default, server=server)
    reply = qpeek(client, [b"QPEEK", b"q", b"%d" % count])  # type: ignore[arg-type]
    return re.findall(rb"D-[0-9a-f]{8}-[0-9a-zA-Z+/]{24}-[0-9a-f]{4}", reply)


def test_qpeek_shows_the_delivery_order(node: Node) -> None:
    plain = add(node)
    lazy = add_ext(node, priority=200)
    a1, b1, a2 = (add_ext(node, priority=1, group=g) for g in (b"a", b"b", b"a"))
    order = [a1, b1, a2, plain, lazy]
    assert qpeek_ids(node, 2) == [a1.id, b1.id]
    assert qpeek_ids(node, 10) == [j.id for j in order]
    assert qpeek_ids(node, -2) == [lazy.id, plain.id]
    assert qpeek_ids(node, -10) == [j.id for j in reversed(order)]
    assert node.consumers.get_jobs([b"q"], 10) == order  # what QPEEK showed


def test_plain_queue_keeps_the_plain_structure(node: Node) -> None:
    for _ in range(5):
        add(node)
    only_due = add(node, delay=1)
    only_due.ext = JobExt(due=now_ms())  # scheduled, no priority, no group
    node.enqueue(only_due, False)
    assert type(node.queues.get(b"q").jobs) is SortedJobs


def test_an_emptied_queue_goes_back_to_the_plain_structure(node: Node) -> None:
    add_ext(node, priority=1)
    node.consumers.get_jobs([b"q"], 1)
    assert type(node.queues.get(b"q").jobs) is PriorityJobs
    node.gc_queues(now_ms(), budget=1000)  # not idle long enough to drop: compacted
    assert type(node.queues.get(b"q").jobs) is SortedJobs
    FakeWaiter(node, [b"w"])  # waits: FLUSHALL keeps its queue
    node.set_pause(b"w", PAUSED_OUT, broadcast=False)
    add_ext(node, b"w", group=b"g")
    assert type(node.queues.get(b"w").jobs) is PriorityJobs
    node.flushall()
    queue = node.queues.get(b"w")
    assert queue is not None and type(queue.jobs) is SortedJobs and len(queue) == 0


# -- queue GC ----------------------------------------------------------------------------

def age(node: Node, name: bytes, ms: int) -> None:
    node.queues.get(name).atime = now_ms() - ms


def test_queue_gc_drops_idle_empty_queue(node: Node) -> None:
    job = add(node, b"idle")
    node.ack([job.id])
    assert node.queues.get(b"idle") is not None
    age(node, b"idle", QUEUE_MAX_IDLE_MS + 1000)
    assert node.gc_queues(now_ms(), budget=1000) == 1
    assert node.queues.get(b"idle") is None


def test_queue_gc_keeps_busy_or_recent_queues(node: Node) -> None:
    add(node, b"nonempty")
    node.set_pause(b"paused-in", PAUSED_IN, broadcast=False)
    node.set_pause(b"paused-out", PAUSED_OUT, broadcast=False)
    node.set_pause(b"paused-all", PAUSED_ALL, broadcast=False)
    FakeWaiter(node, [b"waited"])
    job = add(node, b"recent")
    node.ack([job.id])
    job = add(node, b"old")
    node.ack([job.id])
    for name in (b"nonempty", b"paused-in", b"paused-out", b"paused-all", b"waited", b"old"):
        age(node, name, QUEUE_MAX_IDLE_MS + 1000)
    age(node, b"recent", QUEUE_MAX_IDLE_MS - 10_000)
    removed = 0
    for _ in range(3):  # the budget may spread the walk over calls
        removed += node.gc_queues(now_ms(), budget=1000)
    assert removed == 1
    assert node.queues.get(b"old") is None
    for name in (b"nonempty", b"paused-in", b"paused-out", b"paused-all", b"waited",
                 b"recent"):
        assert node.queues.get(name) is not None, name


def test_queue_gc_budget(node: Node) -> None:
    for i in range(50):
        name = b"q%d" % i
        node.queue(name)
        age(node, name, QUEUE_MAX_IDLE_MS + 1)
    assert node.gc_queues(now_ms(), budget=10) == 10
    total = 10
    while len(node.queues):
        got = node.gc_queues(now_ms(), budget=10)
        assert got <= 10
        total += got
    assert total == 50


def test_enqueue_refreshes_queue_access_time(node: Node) -> None:
    add(node, b"q")
    node.consumers.get_jobs([b"q"], 1)
    age(node, b"q", QUEUE_MAX_IDLE_MS + 1000)
    job = add(node, b"q")  # enqueue = access (Disque's enqueueJob sets atime)
    assert node.dequeue_ids([job.id]) == 1  # empty again, without a fetch
    assert node.gc_queues(now_ms(), budget=1000) == 0
    assert node.queues.get(b"q") is not None


def test_flushall(node: Node) -> None:
    for i in range(10):
        add(node, b"q%d" % (i % 3))
    node.set_pause(b"q0", PAUSED_IN, broadcast=False)
    node.flushall()
    assert len(node.jobs) == 0 and len(node.queues) == 0 and len(node.timers) == 0
    add(node, b"q0")
    assert node.qlen(b"q0") == 1


# -- eviction ----------------------------------------------------------------------------

@pytest.mark.parametrize("samples", [1, 5, 20])
def test_maxmemory_samples_is_the_size_of_an_eviction_round(node: Node, samples: int) -> None:
    """Each eviction round looks at maxmemory-samples jobs: asked to free a single
    byte among evictable (acked) jobs, one round drops exactly that many."""
    node.config.apply("maxmemory-samples", [str(samples)])
    for job in [add(node) for _ in range(500)]:
        node.acknowledge(job)
    assert node.evict(node.job_bytes - 1) is True
    assert node.stats.jobs_evicted == samples
    assert len(node.jobs) == 500 - samples
