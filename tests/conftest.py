"""Fixtures: real disq-server processes, always stopped."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

# An illegal job state transition fails loudly under tests (disq/lifecycle.py), in
# this process and in the servers it starts (they inherit the environment).
os.environ.setdefault("DISQ_STRICT_LIFECYCLE", "1")

sys.path.insert(0, str(Path(__file__).parent))
pytest.register_assert_rewrite("support")  # its cluster helpers assert, as tests do

from support import NODE_TIMEOUT, DisqProcess, form_cluster  # noqa: E402


@pytest.fixture
def start_node(tmp_path: Path) -> Iterator[Callable[..., DisqProcess]]:
    """Start disq-server processes: `start_node("--requirepass", "x")`. Each one is
    stopped at the end of the test, whatever happens."""
    started: list[DisqProcess] = []

    def start(*args: str, config_text: str | None = None, name: str | None = None,
              port: int | None = None, client_kwargs: dict | None = None,
              loaded: bool = True) -> DisqProcess:
        node = DisqProcess(tmp_path / (name or f"node{len(started)}"), *args,
                           config_text=config_text, port=port, client_kwargs=client_kwargs)
        started.append(node)
        return node.start(loaded)

    yield start
    for node in started:
        node.stop()


@pytest.fixture
def bus_args() -> list[str]:
    """Directives of every node make_cluster starts: none. A module whose tests must
    hold on both buses takes support.bus_variants as its `bus_args`."""
    return []


@pytest.fixture
def make_cluster(start_node: Callable[..., DisqProcess],
                 bus_args: list[str]) -> Callable[..., list[DisqProcess]]:
    """make_cluster(n, join="star"|"chain", timeout=NODE_TIMEOUT): n nodes with that
    cluster-node-timeout (ms) and `bus_args`, joined by MEETing node 0 only (star) or
    each the next one (chain, as Disque's test suite does), fully formed."""
    def make(n: int, join: str = "star", timeout: int = NODE_TIMEOUT) -> list[DisqProcess]:
        nodes = [start_node("--cluster-node-timeout", str(timeout), *bus_args)
                 for _ in range(n)]
        return form_cluster(nodes, join)
    return make


@pytest.fixture
def node(start_node: Callable[..., DisqProcess]) -> DisqProcess:
    """One running node with default settings."""
    return start_node()


@pytest.fixture
def r(node: DisqProcess):
    """A redis-py client connected to `node`."""
    client = node.client()
    yield client
    client.close()
