"""disq/outcomes.py without a server: a `HeldAnswer` (the HTTP API's answer that comes later)
hands its outcome to the front end once, only once the AOF has what the node logged
(when durable), and its cancel runs only while nothing came; and the typed requests
the HTTP API builds from JSON fields (`AddJob.from_fields`, `JobSet.from_fields`)
check their values as RESP's parse does."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from disq import errors
from disq.config import Config
from disq.errors import DisqError
from disq.ids import new_node_id
from disq.node import Node
from disq.outcomes import Added, Changed, HeldAnswer, HeldAnswers, when_durable
from disq.ports import NoPersistence
from disq.requests import AddJob, JobSet

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
    got: list[Added | Changed] = []
    later = HeldAnswers(node_on()).later(None, b"", True)
    later.then(got.append)
    later.added(JOB_ID)
    later.added(errors.NOREPL())  # (the cluster answers once; a second outcome is ignored)
    assert got == [JOB_ID]
    early = HeldAnswer(node_on())
    early.added(JOB_ID)  # came before the front end asked for it (the same loop turn)
    early.then(got.append)
    assert got == [JOB_ID, JOB_ID]


def test_a_durable_outcome_waits_for_the_aof() -> None:
    disk = SlowDisk()
    got: list[Added | Changed] = []
    later = HeldAnswer(node_on(disk), durable=True)
    later.then(got.append)
    later.added(JOB_ID)
    assert got == []
    disk.sync()
    assert got == [JOB_ID]
    not_durable = HeldAnswer(node_on(SlowDisk()))
    not_durable.then(got.append)
    not_durable.changed(None)  # (JOBSET's: not held for the AOF)
    assert got == [JOB_ID, None]


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
    later = HeldAnswer(node_on(), cancelled.append, JOB_ID, durable=True)
    later.cancel()
    later.cancel()
    assert cancelled == [JOB_ID]
    answered = HeldAnswer(node_on(SlowDisk()), cancelled.append, JOB_ID, durable=True)
    answered.added(JOB_ID)  # came, waiting for the AOF: the copies are there, nothing to cancel
    answered.cancel()
    HeldAnswer(node_on()).cancel()  # a DEDUP add: nothing to cancel
    assert cancelled == [JOB_ID]


def resp_addjob(*args: bytes) -> AddJob:
    return AddJob.parse([b"ADDJOB", b"q", b"body", *args])


@pytest.mark.parametrize("fields", [
    {"repl": 2, "delay": 1, "retry": 3, "ttl": 60, "maxlen": 10, "async_": True},
    {"queue_randomly": True, "dedup": "k", "priority": 3, "group": "g", "max_deliveries": 2},
    {"delay_ms": 1500, "async_": False},
    {"at": 2_000_000_000_000},
])
def test_addjob_from_fields_is_addjob_parsed(fields: dict[str, object]) -> None:
    args: list[bytes] = []
    for name, value in fields.items():
        if value is False:
            continue
        args.append(AddJob.OPTIONS.by_field[name].token.encode())
        if value is not True:
            args.append(str(value).encode())
    typed = AddJob.from_fields(b"q", b"body", 5000, fields)
    parsed = resp_addjob(b"5000", *args)
    # (the request's fields by name: a compiled class has no __slots__ to list them)
    for name in ("queue", "body", "timeout", "dedup_check", *AddJob.OPTIONS.by_field):
        assert getattr(typed, name) == getattr(parsed, name), name


@pytest.mark.parametrize(("fields", "timeout"), [
    ({"repl": 0}, 0),
    ({"ttl": 0}, 0),
    ({"priority": 256}, 0),
    ({"dedup": "k" * 257}, 0),
    ({"group": ""}, 0),
    ({"delay": 1, "at": 5}, 0),
    ({"delay_ms": 1, "at": 5}, 0),
    ({"repl": 2**64}, 0),
    ({}, 2**64),
])
def test_addjob_from_fields_refuses_as_parse_does(fields: dict[str, object],
                                                   timeout: int) -> None:
    args: list[bytes] = []
    for name, value in fields.items():
        args += [AddJob.OPTIONS.by_field[name].token.encode(), str(value).encode()]
    with pytest.raises(DisqError) as parsed:
        resp_addjob(str(timeout).encode(), *args)
    with pytest.raises(DisqError) as typed:
        AddJob.from_fields(b"q", b"body", timeout, fields)
    assert typed.value.reply() == parsed.value.reply()


def test_jobset_from_fields() -> None:
    request = JobSet.from_fields(JOB_ID, {"priority": 7, "delay_ms": 100})
    assert (request.job_id, request.priority, request.delay_ms, request.at) == (
        JOB_ID, 7, 100, None)
    for fields, args in (({}, []), ({"at": 5, "delay_ms": 1}, [b"AT", b"5", b"DELAY-MS", b"1"]),
                         ({"priority": -1}, [b"PRIORITY", b"-1"])):
        with pytest.raises(DisqError) as parsed:
            JobSet.parse([b"JOBSET", JOB_ID, *args])
        with pytest.raises(DisqError) as typed:
            JobSet.from_fields(JOB_ID, fields)
        assert typed.value.reply() == parsed.value.reply()
    with pytest.raises(errors.BADID):
        JobSet.from_fields(b"D-nope", {"priority": 1})
    with pytest.raises(TypeError):
        JobSet.from_fields(JOB_ID, {"ttl": 1})
