"""The core's null persistence (disq/ports.py): what a node without the AOF records,
and how its replies wait: not at all."""

from __future__ import annotations

from disq.config import Config
from disq.node import Node
from disq.ports import NO_PERSISTENCE, NoPersistence
from disq.requests import AddJob


def test_a_node_records_nothing_until_a_persistence_is_installed() -> None:
    node = Node(Config(), "a" * 40)
    node.arm_timer = lambda when: None
    assert node.persistence is NO_PERSISTENCE and not NO_PERSISTENCE.recording
    job = node.admission.add_job(AddJob(b"q", b"x", ttl=100))
    node.ack([job.id])
    assert NO_PERSISTENCE.appended == 0 and NO_PERSISTENCE.commit()


def test_durability_callbacks_run_at_once() -> None:
    called: list[int] = []
    NoPersistence().on_durable(lambda: called.append(1))
    assert called == [1]
