"""The queue service's fields (disq/server/queue_service.py): QSTAT's and QPOLICY
GET's replies are these fields encoded, and the HTTP API's JSON is built from the same
ones; their RESP bytes are Disque's (QSTAT) and disq's (QPOLICY GET) layouts."""

from __future__ import annotations

from disq.policies import QueueDefaults, QueuePolicy
from disq.queue import PAUSED_OUT, Queue
from disq.server import reply
from disq.server.queue_service import policy_fields, queue_fields


def _encoded(fields: list[tuple[bytes, object]]) -> bytes:
    return reply.encode([item for pair in fields for item in pair])


def test_qstat_fields_in_disques_order() -> None:
    queue = Queue(b"q", 1_000)
    queue.flags |= PAUSED_OUT
    fields = queue_fields(queue, 4_500)
    assert [name for name, _ in fields] == [
        b"name", b"len", b"age", b"idle", b"blocked", b"import-from", b"import-rate",
        b"jobs-in", b"jobs-out", b"pause"]
    assert dict(fields)[b"age"] == 3 and dict(fields)[b"pause"] == b"out"
    assert _encoded(fields).startswith(b"*20\r\n$4\r\nname\r\n$1\r\nq\r\n$3\r\nlen\r\n:0\r\n")


def test_a_policy_without_limits_shows_nulls_and_its_dead_letter_queue() -> None:
    assert _encoded(policy_fields(QueuePolicy(b"work"))) == (
        b"*30\r\n$5\r\nqueue\r\n$4\r\nwork\r\n$13\r\nmaxdeliveries\r\n$-1\r\n"
        b"$10\r\ndeadletter\r\n$9\r\ndead:work\r\n$7\r\nbackoff\r\n$-1\r\n"
        b"$4\r\nrate\r\n$-1\r\n$11\r\nconcurrency\r\n$-1\r\n"
        b"$10\r\nresult-ttl\r\n$-1\r\n"
        # the queue's defaults for ADDJOB and its group limits
        b"$5\r\nretry\r\n$-1\r\n$3\r\nttl\r\n$-1\r\n$9\r\nreplicate\r\n$-1\r\n"
        b"$6\r\nmaxlen\r\n$-1\r\n$17\r\ngroup-concurrency\r\n$-1\r\n"
        b"$10\r\ngroup-rate\r\n$-1\r\n"
        # retention
        b"$6\r\nretain\r\n$-1\r\n$12\r\nretain-bytes\r\n$-1\r\n")


def test_a_policy_with_every_field() -> None:
    policy = QueuePolicy(b"work", max_deliveries=3, deadletter=b"graveyard",
                         backoff_base=100, backoff_max=1000, rate=2.5, result_ttl=60,
                         concurrency=4, defaults=QueueDefaults(30, 600, 2, 1000),
                         group_concurrency=2, group_rate=0.5, retain=3600,
                         retain_bytes=10**9)
    assert dict(policy_fields(policy)) == {
        b"queue": b"work", b"maxdeliveries": 3, b"deadletter": b"graveyard",
        b"backoff": [100, 1000], b"rate": b"2.5", b"concurrency": 4,
        b"result-ttl": 60, b"retry": 30, b"ttl": 600, b"replicate": 2,
        b"maxlen": 1000, b"group-concurrency": 2, b"group-rate": b"0.5", b"retain": 3600,
        b"retain-bytes": 10**9}
    assert b"$7\r\nbackoff\r\n*2\r\n:100\r\n:1000\r\n" in _encoded(policy_fields(policy))
