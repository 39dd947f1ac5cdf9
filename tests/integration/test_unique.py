"""ADDJOB ... UNIQUE key (a disq extension): at most one job with the key in its queue
while one is queued or running; the key is free again once that job is acked, is a
dead letter, is deleted or expires. One node: each way a job ends; three nodes:
producers on every node at once, round after round (one job a round), a key held by
one node only, a stale claim of a node that does not hold the job; bad input."""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest
import redis
from disq_client import Client
from jobutil import RawClient
from support import DisqProcess, call, wait_for

TIMEOUT = "5000"


def add(target: DisqProcess, key: str, *opts: str, queue: str = "q") -> str:
    reply = call(target, "ADDJOB", queue, "body", TIMEOUT, *opts, "UNIQUE", key)
    assert isinstance(reply, bytes), reply
    return reply.decode()


def state(target: DisqProcess, job_id: str) -> str | None:
    """The job's state on `target` (None: not held there)."""
    reply = call(target, "SHOW", job_id)
    if reply is None:
        return None
    assert isinstance(reply, list)
    fields = dict(zip(reply[::2], reply[1::2], strict=True))
    value = fields[b"state"]
    assert isinstance(value, bytes)
    return value.decode()


def total_qlen(nodes: list[DisqProcess], queue: str = "q") -> int:
    return sum(int(call(n, "QLEN", queue)) for n in nodes)  # type: ignore[arg-type]


# -- one node ---------------------------------------------------------------------------------

def test_held_while_queued_or_running_released_on_ack(node: DisqProcess) -> None:
    first = add(node, "k")
    assert add(node, "k") == first
    assert call(node, "QLEN", "q") == 1
    assert add(node, "other") != first  # another key, another job
    assert add(node, "k", queue="q2") != first  # the same key in another queue
    taken = call(node, "GETJOB", "NOHANG", "FROM", "q")
    assert isinstance(taken, list) and taken[0][1].decode() == first
    assert add(node, "k") == first  # running (delivered, not acked): still held
    assert call(node, "QLEN", "q") == 1  # (the other key's job)
    assert call(node, "ACKJOB", first) == 1
    second = add(node, "k")
    assert second != first  # acked: the key is free, a new job
    assert add(node, "k") == second
    # DEDUP keeps its own meaning: a DEDUP key named as the UNIQUE one is another key
    deduped = call(node, "ADDJOB", "q", "b", "0", "DEDUP", "k")
    assert isinstance(deduped, bytes) and deduped.decode() not in (first, second)
    assert call(node, "ACKJOB", deduped) == 1
    assert call(node, "ADDJOB", "q", "b", "0", "DEDUP", "k") == deduped  # DEDUP: acked, same


def test_released_when_the_job_becomes_a_dead_letter(node: DisqProcess) -> None:
    first = add(node, "k", "MAXDELIVERIES", "1")
    taken = call(node, "GETJOB", "NOHANG", "FROM", "q")
    assert isinstance(taken, list) and taken[0][1].decode() == first
    assert call(node, "NACK", first) == 1
    assert call(node, "QLEN", "dead:q") == 1  # the dead letter, with its ID
    second = add(node, "k")
    assert second != first
    assert call(node, "QLEN", "q") == 1


def test_released_when_the_job_is_deleted_or_expires(node: DisqProcess) -> None:
    first = add(node, "k")
    assert call(node, "DELJOB", first) == 1
    second = add(node, "k", "TTL", "1")
    assert second != first
    assert add(node, "k") == second
    wait_for(lambda: state(node, second) is None, timeout=5, message="the job's expiry")
    third = add(node, "k")
    assert third not in (first, second)
    assert call(node, "QLEN", "q") == 1


def test_pipelined_same_key_adds_once(node: DisqProcess) -> None:
    client = node.client()
    try:
        pipe = client.pipeline(transaction=False)
        for i in range(40):
            pipe.execute_command("ADDJOB", "q", f"b{i}", "0", "UNIQUE", f"k{i % 4}")
        ids = pipe.execute()
    finally:
        client.close()
    assert len(set(ids)) == 4 and all(ids[i] == ids[i % 4] for i in range(40))
    assert call(node, "QLEN", "q") == 4


@pytest.mark.parametrize(("args", "error"), [
    (("ADDJOB", "q", "b", 0, "UNIQUE", ""), "ERR UNIQUE key must be 1 to 256 bytes"),
    (("ADDJOB", "q", "b", 0, "UNIQUE", "x" * 257), "ERR UNIQUE key must be 1 to 256 bytes"),
    (("ADDJOB", "q", "b", 0, "UNIQUE"), "ERR syntax error"),
    (("ADDJOB", "q", "b", 0, "UNIQUE", "k", "DEDUP", "k"),
     "ERR DEDUP and UNIQUE cannot be combined: give one key"),
    (("ADDJOB", "q", "b", 0, "DEDUP", "d", "PRIORITY", 3, "UNIQUE", "u"),
     "ERR DEDUP and UNIQUE cannot be combined: give one key"),
    (("ADDJOB", "q", "b", "nan", "UNIQUE", "k", "DEDUP", "k"),  # the options' error first
     "ERR DEDUP and UNIQUE cannot be combined: give one key"),
    (("ADDJOBS", "q", 0, "UNIQUE", "k", "JOBS", "a", "b"),
     "ERR ADDJOBS takes no UNIQUE key (one key would name one job of the batch): add such "
     "jobs with ADDJOB ... UNIQUE key"),
])
def test_bad_input_is_refused_and_adds_nothing(node: DisqProcess, args: tuple[object, ...], error: str) -> None:
    with RawClient(node.port) as client:
        assert client.call(*args) == error.encode()
        assert client.call("QLEN", "q") == 0
        # (a UNIQUE key 256 bytes long is taken, with the other options)
        assert client.call("ADDJOB", "q", "b", 0, "UNIQUE", "x" * 256, "PRIORITY", 1,
                           "DELAY-MS", 0).startswith(b"D-")


def test_the_python_client_sends_unique(node: DisqProcess) -> None:
    with Client(f"127.0.0.1:{node.port}") as client:
        first = client.add_job("q", "a", unique="k")
        assert client.add_job("q", "b", unique="k") == first
        assert client.ack(first) == 1
        assert client.add_job("q", "c", unique="k") != first


# -- three nodes ------------------------------------------------------------------------------

@pytest.fixture
def three(make_cluster: Callable[..., list[DisqProcess]]) -> list[DisqProcess]:
    return make_cluster(3)


def acked_everywhere(nodes: list[DisqProcess], job_id: str) -> None:
    """Wait until no node holds `job_id` unacked: the ack reaches the job's other
    holders (SETACK) a bus hop after the ACKJOB's node."""
    wait_for(lambda: all(state(n, job_id) in (None, "acked") for n in nodes),
             timeout=10, message="the ack on every holder")


def produce(client: redis.Redis, round_: int, adds: int, barrier: threading.Barrier,
            answers: list[list[bytes]], i: int) -> None:
    """`adds` ADDJOBs of the key in one pipeline, sent once every producer is ready."""
    pipe = client.pipeline(transaction=False)
    for j in range(adds):
        pipe.execute_command("ADDJOB", "q", f"r{round_}n{i}j{j}", TIMEOUT, "UNIQUE", "key")
    barrier.wait(timeout=30)
    answers[i] = pipe.execute()


def test_cluster_producers_on_every_node_get_one_job_a_round(three: list[DisqProcess]) -> None:
    """Each round, producers on the three nodes add the key at the same moment (three
    ADDJOBs each, pipelined): one job, every producer answered its ID, one queued job
    in the cluster. Acked, the next round adds a new job."""
    rounds, adds = 25, 3
    seen: set[bytes] = set()
    clients = [n.client() for n in three]
    try:
        for r in range(rounds):
            barrier = threading.Barrier(len(three))
            answers: list[list[bytes]] = [[] for _ in three]
            threads = [threading.Thread(target=produce, args=(
                client, r, adds, barrier, answers, i)) for i, client in enumerate(clients)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(timeout=60)
            ids = {job_id for answer in answers for job_id in answer}
            assert len(ids) == 1 and sum(map(len, answers)) == adds * len(three), (r, answers)
            job_id = ids.pop()
            assert job_id not in seen, (r, job_id)  # acked last round: a new job
            seen.add(job_id)
            assert total_qlen(three) == 1, r
            assert call(three[r % len(three)], "ACKJOB", job_id) == 1
            acked_everywhere(three, job_id.decode())
    finally:
        for client in clients:
            client.close()


def test_cluster_ack_then_add_on_the_same_node_adds_at_once(three: list[DisqProcess]) -> None:
    """The node that took the ACKJOB adds a new job with the key at once: its SETACKs
    leave before the new job's copies (or its questions) on the same links."""
    a = three[0]
    for _ in range(10):
        first = add(a, "key")
        assert all(add(n, "key") == first for n in three)
        assert call(a, "ACKJOB", first) == 1
        assert add(a, "key") != first
        second = add(a, "key")
        assert call(a, "ACKJOB", second) == 1
        acked_everywhere(three, second)


def test_cluster_key_held_by_one_node_and_a_stale_claim(three: list[DisqProcess]) -> None:
    """REPLICATE 1: the job (and its key) on `a` only. `b` asks every node and gets its
    ID, which `b` then remembers without holding the job: a stale claim once the job
    is acked on `a`, which `b` must not answer: it asks again and adds a new job."""
    a, b, c = three
    first = add(a, "solo", "REPLICATE", "1")
    assert state(b, first) is None and state(c, first) is None
    assert add(b, "solo", "REPLICATE", "1") == first
    assert add(c, "solo", "REPLICATE", "1") == first
    assert total_qlen(three) == 1
    assert call(a, "ACKJOB", first) == 1  # the one holder: nothing else to tell
    second = add(b, "solo", "REPLICATE", "1")
    assert second != first
    assert add(a, "solo", "REPLICATE", "1") == second
    assert add(c, "solo", "REPLICATE", "1") == second
    assert total_qlen(three) == 1


def test_cluster_dead_letter_frees_the_key_everywhere(three: list[DisqProcess]) -> None:
    """A dead letter's holders learn it moved: the key is free on every node."""
    a, b, c = three
    first = add(a, "dl", "MAXDELIVERIES", "1")
    taken = call(a, "GETJOB", "NOHANG", "FROM", "q")
    assert isinstance(taken, list) and taken[0][1].decode() == first
    assert call(a, "NACK", first) == 1
    wait_for(lambda: total_qlen(three, "dead:q") == 1, timeout=5, message="the dead letter")
    # (the move reaches b a bus hop later: b answers the job till then)
    wait_for(lambda: add(b, "dl") != first, timeout=10, message="a new job on b")
    second = add(b, "dl")
    assert add(c, "dl") == second and add(a, "dl") == second
