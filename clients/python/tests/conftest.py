"""Fixtures for the client's tests: real disq-server processes, started and stopped with
the server's own test support (tests/support.py at the repository root), so that
`pytest` from the repository root runs these tests with the rest of the suite."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

SERVER_TESTS = Path(__file__).resolve().parents[3] / "tests"
if str(SERVER_TESTS) not in sys.path:
    sys.path.insert(0, str(SERVER_TESTS))
pytest.register_assert_rewrite("support")

from bridge import make_client  # noqa: E402
from support import (  # noqa: E402
    NODE_TIMEOUT,
    DisqProcess,
    call,
    form_cluster,
    running_cluster,
    wait_for,
)


def reset(node: DisqProcess) -> None:
    """Empty a shared node between tests, once the clients of the last one are gone
    (a blocked GETJOB of an earlier test would take a job of this one)."""
    assert node.alive(), node.log()
    wait_for(lambda: b"blocked_clients:0" in call(node, "INFO", "clients"),  # type: ignore[operator]
             message="earlier blocked clients to go")
    assert call(node, "DEBUG", "FLUSHALL") == b"OK"


@pytest.fixture(scope="module")
def shared_node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DisqProcess]:
    node = DisqProcess(tmp_path_factory.mktemp("single"))
    node.start()
    try:
        yield node
    finally:
        node.stop()


@pytest.fixture
def node(shared_node: DisqProcess) -> DisqProcess:
    """The module's single node, emptied."""
    reset(shared_node)
    return shared_node


@pytest.fixture(scope="module")
def shared_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[DisqProcess]]:
    with running_cluster(tmp_path_factory.mktemp("trio")) as nodes:
        yield nodes


@pytest.fixture
def cluster(shared_cluster: list[DisqProcess]) -> list[DisqProcess]:
    """The module's three-node cluster, emptied. Tests that kill a node use
    `start_cluster` instead."""
    for n in shared_cluster:
        reset(n)
    return shared_cluster


@pytest.fixture
def start_cluster(tmp_path: Path) -> Iterator[Callable[..., list[DisqProcess]]]:
    """start_cluster(n, *args): n nodes of this test only, formed; always stopped."""
    started: list[DisqProcess] = []

    def start(n: int, *args: str) -> list[DisqProcess]:
        nodes = [DisqProcess(tmp_path / f"c{len(started) + i}", "--cluster-node-timeout",
                             str(NODE_TIMEOUT), *args) for i in range(n)]
        started.extend(nodes)
        for node in nodes:
            node.start()
        return form_cluster(nodes) if n > 1 else nodes

    yield start
    for node in started:
        node.stop()


@pytest.fixture(params=["sync", "async"])
def connect(request: pytest.FixtureRequest) -> Iterator[Callable[..., Any]]:
    """connect(nodes, **options): a Client, or an AsyncClient driven through a Bridge
    (the test runs once with each); closed at the end of the test."""
    factory = make_client(request.param)
    made: list[Any] = []

    def make(*args: Any, **kwargs: Any) -> Any:
        client = factory(*args, **kwargs)
        made.append(client)
        return client

    yield make
    for client in made:
        client.close()
