"""disq_spark's PartitionWriter without Spark, against real disq nodes: batches in
flight, bad rows, a node that cannot be reached, transient refusals retried with
back-off, and the bound on retries."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from disq_spark import PartitionWriter, WriteError, WriteOptions
from support import DisqProcess, call, free_port, wait_for


def options(nodes: list[str], **kwargs: Any) -> WriteOptions:
    kwargs.setdefault("backoff_s", 0.01)
    return WriteOptions(queue="q", nodes=nodes, body="body", job_name="t", **kwargs)


def rows(n: int) -> list[dict[str, Any]]:
    return [{"body": f"row-{i}"} for i in range(n)]


def test_batches_in_flight_and_bad_rows(node: DisqProcess) -> None:
    data = rows(95) + [{"body": None}, {"body": "x" * 300}]
    writer = PartitionWriter(options([f"127.0.0.1:{node.port}"], batch_size=10, pipeline=3,
                                     max_body_bytes=200), 0)
    stats = writer.write(data)
    assert (stats.added, stats.bad_rows, stats.retries) == (95, 2, 0)
    assert [reason.split(" ")[0] for _, reason in stats.bad_examples] == ["null", "body"]
    assert call(node, "QLEN", "q") == 95
    again = PartitionWriter(options([f"127.0.0.1:{node.port}"], batch_size=7,
                                    max_body_bytes=200), 0).write(data)
    assert again.added == 95 and call(node, "QLEN", "q") == 95  # same keys: nothing new


def test_an_unreachable_first_node_moves_the_partition_on(node: DisqProcess) -> None:
    dead = f"127.0.0.1:{free_port()}"
    writer = PartitionWriter(options([dead, f"127.0.0.1:{node.port}"], batch_size=10), 0)
    stats = writer.write(rows(50))
    assert stats.added == 50 and stats.retries >= 1
    assert call(node, "QLEN", "q") == 50


def test_refusals_are_retried_until_they_pass(node: DisqProcess) -> None:
    call(node, "PAUSE", "q", "in")
    writer = PartitionWriter(options([f"127.0.0.1:{node.port}"], batch_size=10,
                                     max_attempts=1000), 0)

    def unpause_after_a_retry() -> None:
        wait_for(lambda: writer.stats.retries >= 2, timeout=30, message="a retry")
        call(node, "PAUSE", "q", "none")

    thread = threading.Thread(target=unpause_after_a_retry, daemon=True)
    thread.start()
    stats = writer.write(rows(30))
    thread.join(10)
    assert stats.added == 30 and stats.bad_rows == 0
    assert call(node, "QLEN", "q") == 30


def test_retries_are_bounded(node: DisqProcess) -> None:
    call(node, "PAUSE", "q", "in")
    writer = PartitionWriter(options([f"127.0.0.1:{node.port}"], max_attempts=3), 0)
    with pytest.raises(WriteError, match="PAUSED"):
        writer.write(rows(5))
    assert call(node, "QLEN", "q") == 0


def test_the_back_off_is_the_clients_retry_policy() -> None:
    """Resends follow disq_client.retry's policy: max_attempts sends in all (at least
    one), from backoff_s doubling up to backoff_max_s, with jitter."""
    policy = options(["127.0.0.1:1"], max_attempts=4, backoff_s=0.1,
                     backoff_max_s=0.3).retry_policy()
    assert [policy.allows(n) for n in (3, 4)] == [True, False]
    assert [policy.delay(n, lambda: 0.5) for n in (1, 2, 3)] == [0.1, 0.2, 0.3]
    assert policy.delay(1, lambda: 0.0) == 0.05 and policy.jitter == 0.5
    assert options(["127.0.0.1:1"], max_attempts=0).retry_policy().max_attempts == 1
