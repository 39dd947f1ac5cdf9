"""The job lifecycle (disq/lifecycle.py): each transition goes from the states its
row of the table allows and only from those, and no other module of `disq` writes a
job's state."""

from __future__ import annotations

import ast
import logging
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from disq import lifecycle
from disq.job import ACKED, ACTIVE, DELETED, QUEUED, WAIT_REPL, Job

PACKAGE = Path(__file__).resolve().parents[2] / "disq"
STATES = (WAIT_REPL, ACTIVE, QUEUED, ACKED, DELETED)
# Objects of their own with a `state` the module itself keeps: the job record's
# constructor, and the AOF writer's on/off state.
# (end_requests.py: BATCH LIST's STATE option, a batch's phase, not a job's state)
OWN_STATE = {"job.py", "aof/writer.py", "end_requests.py"}


def job_in(state: int) -> Job:
    return Job(b"D-aaaaaaaa-" + b"0" * 24 + b"-05a1", b"q", b"body", state, 1, 2, 0, 60, 1)


@pytest.fixture
def strict() -> Iterator[None]:
    before = lifecycle._mode.strict
    lifecycle.set_strict(True)
    yield
    lifecycle.set_strict(before)


def transition(event: str) -> Callable[[Job], None]:
    function: Callable[[Job], None] = getattr(lifecycle, event)
    return function


def test_every_event_has_its_function() -> None:
    for event in lifecycle.TRANSITIONS:
        assert callable(transition(event))


@pytest.mark.parametrize("event", sorted(lifecycle.TRANSITIONS))
def test_the_table_is_walked_in_strict_mode(strict: None, event: str) -> None:
    allowed, target = lifecycle.TRANSITIONS[event]
    for state in STATES:
        job = job_in(state)
        if allowed >> state & 1:
            transition(event)(job)
            assert job.state == target
        else:
            with pytest.raises(lifecycle.IllegalTransition, match=event):
                transition(event)(job)


def test_an_illegal_transition_in_production_is_logged_once_and_done(
        caplog: pytest.LogCaptureFixture) -> None:
    """The caller already moved the job in or out of its queue: the state follows."""
    before = lifecycle._mode.strict
    lifecycle.set_strict(False)
    try:
        with caplog.at_level(logging.ERROR, logger="disq"):
            for _ in range(3):
                job = job_in(ACKED)
                lifecycle.delivered(job)
                assert job.state == ACTIVE
    finally:
        lifecycle.set_strict(before)
        lifecycle._mode.reported.discard((ACKED, "delivered"))
    assert [r.getMessage() for r in caplog.records].count(
        "illegal job state transition: delivered from acked "
        f"(job {job_in(ACKED).id.decode()}); done anyway, logged once") == 1


def state_writes(path: Path) -> list[int]:
    """The lines of `path` that assign an attribute named `state`."""
    lines = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets = [node.target]
        for target in targets:
            for part in ast.walk(target):
                if isinstance(part, ast.Attribute) and part.attr == "state":
                    lines.append(node.lineno)
    return lines


def test_only_the_lifecycle_writes_a_job_state() -> None:
    offenders = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        name = path.relative_to(PACKAGE).as_posix()
        if name == "lifecycle.py":
            continue
        lines = state_writes(path)
        if name in OWN_STATE:  # `self.state = ...` of the module's own object only
            source = path.read_text().splitlines()
            lines = [n for n in lines if not source[n - 1].strip().startswith("self.state")]
        if lines:
            offenders[name] = lines
    assert offenders == {}
