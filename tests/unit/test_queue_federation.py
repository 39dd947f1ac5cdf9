"""What federation keeps of a queue (disq/queue_federation.py's QueueFederation): on the queue's
own object, made only once federation asks or imports for it; its import counts and
the peers' most urgent priorities."""

from __future__ import annotations

from disq.config import Config
from disq.ids import new_node_id
from disq.node import Node
from disq.queue import NO_PRIORITY, Queue
from disq.queue_federation import QueueFederation
from disq.requests import AddJob

from .test_replication import Consumer, add_job, cluster


def test_a_node_alone_keeps_no_federation_state() -> None:
    node = Node(Config(), new_node_id())
    node.arm_timer = lambda when: None
    node.admission.add_job(AddJob(b"q", b"x", 0, None, 0, None, 86400, 0))
    node.consumers.want_jobs([b"empty"])  # an empty GETJOB asks its (solo) cluster
    assert [job.body for job in node.consumers.get_jobs([b"q"], 1)] == [b"x"]
    assert all(queue.federation is None for queue in node.queues.values())
    queue = node.queues.get(b"q")
    assert queue is not None and queue.import_rate_at(0) == 0


def test_federation_state_comes_with_the_first_ask_and_import() -> None:
    net, (a, b) = cluster(2)
    Consumer(b, 5000)
    net.pump()
    asked = federation(b.node)
    assert asked is not None and asked.asked_time  # b's consumer asked
    assert federation(a.node) is None  # a only remembers the asker
    add_job(a, repl=1)
    net.pump()
    imported = federation(b.node)
    assert imported is asked and imported.responders is not None
    assert list(imported.responders) == [a.id]


def federation(node: Node) -> QueueFederation | None:
    queue = node.queues.get(b"q")
    assert queue is not None
    return queue.federation


def test_imports_are_counted_per_second_for_five_seconds() -> None:
    state = QueueFederation()
    assert state.import_rate_at(10_000) == 0
    for _ in range(3):
        state.note_import(10_000)
    state.note_import(11_500)
    assert state.import_rate_at(11_500) == 3  # this second's and the previous one's
    assert state.import_rate_at(12_100) == 1  # the previous second's only
    assert state.import_rate_at(15_000) == 1  # within 5 s of the last
    assert state.import_rate_at(16_501) == 0


def test_the_peers_most_urgent_priority_is_the_least_they_said() -> None:
    queue = Queue(b"q", 0)
    state = queue.federation = QueueFederation()
    assert state.set_peer_best("b", NO_PRIORITY) is None  # not heard of: no change
    assert state.set_peer_best("b", 10) == 10
    assert state.set_peer_best("c", 5) == 5
    assert state.set_peer_best("c", NO_PRIORITY) == 10
    queue.remote_best, queue.hold_until = 10, 123
    queue.forget_peer_best()
    assert (state.peer_best, queue.remote_best, queue.hold_until) == (None, NO_PRIORITY, 0)
