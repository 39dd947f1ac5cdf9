"""disq/later.py without a server: a `Later` hands its outcome to the front end once,
only once the AOF has what the node logged (when durable), and its cancel runs only
while nothing came."""

from __future__ import annotations

from collections.abc import Callable

from disq import errors
from disq.config import Config
from disq.errors import DisqError
from disq.ids import new_node_id
from disq.later import Added, Later, when_durable
from disq.node import Node
from disq.ports import NoPersistence

JOB_ID = b"D-00000000-AAAAAAAAAAAAAAAAAAAAAAAA-05a1"


class SlowDisk(NoPersistence):
    """Records kept, made durable only when the test says (`sync`)."""

    def __init__(self) -> None:
        self.synced = False
        self.waiting: list[Callable[[], object]] = []

    @property
    def recording(self) -> bool:
        return True

    def commit(self) -> bool:
        return self.synced

    def on_durable(self, callback: Callable[[], object]) -> None:
        self.waiting.append(callback)

    def sync(self) -> None:
        self.synced = True
        for callback in self.waiting:
            callback()
        self.waiting.clear()


def node_on(disk: NoPersistence | None = None) -> Node:
    node = Node(Config(), new_node_id())
    if disk is not None:
        node.set_persistence(disk)
    return node


def test_the_outcome_reaches_the_front_end_once_whenever_it_comes() -> None:
    got: list[Added] = []
    later: Later[Added] = Later(node_on())
    later.then(got.append)
    later(JOB_ID)
    later(errors.NOREPL())  # (the cluster answers once; a second outcome is ignored)
    assert got == [JOB_ID]
    early: Later[Added] = Later(node_on())
    early(JOB_ID)  # came before the front end asked for it (the same loop turn)
    early.then(got.append)
    assert got == [JOB_ID, JOB_ID]


def test_a_durable_outcome_waits_for_the_aof() -> None:
    disk = SlowDisk()
    got: list[Added] = []
    later: Later[Added] = Later(node_on(disk))
    later.then(got.append)
    later(JOB_ID)
    assert got == []
    disk.sync()
    assert got == [JOB_ID]
    not_durable: Later[DisqError | None] = Later(node_on(SlowDisk()), durable=False)
    changed: list[DisqError | None] = []
    not_durable.then(changed.append)
    not_durable(None)  # (JOBSET's: not held for the AOF)
    assert changed == [None]


def test_when_durable_delivers_at_once_without_an_aof() -> None:
    got: list[int] = []
    when_durable(node_on(), got.append, 1)
    disk = SlowDisk()
    when_durable(node_on(disk), got.append, 2)
    assert got == [1]
    disk.sync()
    assert got == [1, 2]


def test_cancel_runs_only_while_nothing_came() -> None:
    cancelled: list[bytes] = []
    later: Later[Added] = Later(node_on(), True, cancelled.append, JOB_ID)
    later.cancel()
    later.cancel()
    assert cancelled == [JOB_ID]
    answered: Later[Added] = Later(node_on(SlowDisk()), True, cancelled.append, JOB_ID)
    answered(JOB_ID)  # came, waiting for the AOF: the copies are there, nothing to cancel
    answered.cancel()
    Later(node_on()).cancel()  # a DEDUP add: nothing to cancel
    assert cancelled == [JOB_ID]
