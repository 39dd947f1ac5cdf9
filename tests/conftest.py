"""Fixtures: real disq-server processes, always stopped."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from support import DisqProcess  # noqa: E402


@pytest.fixture
def start_node(tmp_path: Path) -> Iterator[Callable[..., DisqProcess]]:
    """Start disq-server processes: `start_node("--requirepass", "x")`. Each one is
    stopped at the end of the test, whatever happens."""
    started: list[DisqProcess] = []

    def start(*args: str, config_text: str | None = None, name: str | None = None,
              port: int | None = None) -> DisqProcess:
        node = DisqProcess(tmp_path / (name or f"node{len(started)}"), *args,
                           config_text=config_text, port=port)
        started.append(node)
        return node.start()

    yield start
    for node in started:
        node.stop()


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
