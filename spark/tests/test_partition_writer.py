"""disq_spark's PartitionWriter without Spark, against real disq nodes: batches in
flight, bad rows, a node that cannot be reached, transient refusals retried with
back-off, and the bound on retries."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from disq_client import Client
from disq_spark import PartitionWriter, WriteError, WriteOptions
from support import DisqProcess, call, free_port, wait_for


def options(nodes: list[str], **kwargs: Any) -> WriteOptions:
    kwargs.setdefault("backoff_ms", 10)
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
    """Partition 0 starts on the first node (the client's preferred one), which is
    down: the client connects to the next one, and marks the first as failed."""
    dead = f"127.0.0.1:{free_port()}"
    writer = PartitionWriter(options([dead, f"127.0.0.1:{node.port}"], batch_size=10), 0)
    assert writer.client.view.preferred == ("127.0.0.1", int(dead.split(":")[1]))
    stats = writer.write(rows(50))
    assert stats.added == 50 and stats.bad_rows == 0
    assert writer.client.view.nodes[writer.client.view.preferred].failed_at is not None
    assert call(node, "QLEN", "q") == 50


def test_a_node_killed_with_batches_in_flight(own_trio: list[DisqProcess]) -> None:
    """The partition's node dies between two batches, two batches in flight: they go
    to another node the client picks, and the DEDUP keys add none of them twice."""
    victim, survivors = own_trio[0], own_trio[1:]
    writer = PartitionWriter(options([f"127.0.0.1:{n.port}" for n in own_trio],
                                     batch_size=100, pipeline=2, replicate=2), 0)

    def rows_killing_the_node() -> Any:
        for i, row in enumerate(rows(1000)):
            if i == 450:
                victim.kill()
            yield row

    stats = writer.write(rows_killing_the_node())
    assert stats.added == 1000 and stats.bad_rows == 0 and stats.retries >= 1
    bodies: dict[str, bytes] = {}
    for node in survivors:
        with Client(f"127.0.0.1:{node.port}", switch_after_jobs=0) as client:
            bodies.update((i.id, i.body or b"") for i in client.jscan_info(queue="q"))
    assert sorted(bodies.values()) == sorted({r["body"].encode() for r in rows(1000)})


def test_options_of_each_row(node: DisqProcess) -> None:
    """AT, PRIORITY and GROUP from a row's columns (a null: the option's value, or
    none); a value the server refuses makes that row bad."""
    at = int(time.time() * 1000) + 3_600_000
    data = [{"body": "a", "at": at, "p": 3, "g": "x"},
            {"body": "b", "at": None, "p": None, "g": None},
            {"body": "c", "at": None, "p": 999, "g": "y"}]
    writer = PartitionWriter(options([f"127.0.0.1:{node.port}"], at="at",
                                     priority_field="p", group_field="g", priority=7,
                                     group="dflt"), 0)
    stats = writer.write(data)
    assert (stats.added, stats.bad_rows) == (2, 1) and "PRIORITY" in stats.bad_examples[0][1]
    with Client(f"127.0.0.1:{node.port}") as client:
        jobs = {i.body: i for i in client.jscan_info(queue="q")}
    assert (jobs[b"a"].priority, jobs[b"a"].group) == (3, "x")
    assert jobs[b"a"].due_ms is not None and abs(jobs[b"a"].due_ms - at) < 2
    assert (jobs[b"b"].priority, jobs[b"b"].group, jobs[b"b"].due_ms) == (7, "dflt", 0)
    assert call(node, "QLEN", "q") == 1  # "a" waits for its AT


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
    one), from backoff_ms doubling up to backoff_max_ms, with jitter."""
    policy = options(["127.0.0.1:1"], max_attempts=4, backoff_ms=100,
                     backoff_max_ms=300).retry_policy()
    assert [policy.allows(n) for n in (3, 4)] == [True, False]
    assert [policy.delay(n, lambda: 0.5) for n in (1, 2, 3)] == [0.1, 0.2, 0.3]
    assert policy.delay(1, lambda: 0.0) == 0.05 and policy.jitter == 0.5
    assert options(["127.0.0.1:1"], max_attempts=0).retry_policy().max_attempts == 1
