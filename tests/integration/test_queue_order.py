"""The order of a queue with ADDJOB PRIORITY and GROUP (disq extensions): the most
urgent ready job first, groups in turn within a priority, Disque's order otherwise."""

from __future__ import annotations

from collections import Counter

import jobutil
from jobutil import NULL_ARRAY, RawClient

shared_disq = jobutil.shared_disq
node = jobutil.node
c = jobutil.c


def add(c: RawClient, queue: str, body: str, *options: object) -> bytes:
    return bytes(c.call("ADDJOB", queue, body, 0, *options))


def drain(c: RawClient, queue: str) -> list[bytes]:
    bodies = []
    while True:
        reply = c.call("GETJOB", "NOHANG", "COUNT", 1, "FROM", queue)
        if reply is NULL_ARRAY:
            return bodies
        bodies.append(reply[0][2])
        c.call("ACKJOB", reply[0][1])


def test_the_most_urgent_job_first_then_creation_order(c: RawClient) -> None:
    queue = "order-priorities"
    add(c, queue, "plain-1")
    add(c, queue, "low", "PRIORITY", 200)
    add(c, queue, "urgent-1", "PRIORITY", 0)
    add(c, queue, "plain-2")
    add(c, queue, "urgent-2", "PRIORITY", 0)
    add(c, queue, "mid", "PRIORITY", 50)
    peeked = [entry[2] for entry in c.call("QPEEK", queue, 10)]
    expected = [b"urgent-1", b"urgent-2", b"mid", b"plain-1", b"plain-2", b"low"]
    assert peeked == expected  # QPEEK shows the delivery order
    assert drain(c, queue) == expected


def test_groups_take_turns_so_a_big_backlog_does_not_starve_a_small_one(
        c: RawClient) -> None:
    queue = "order-groups"
    c.send_raw(b"".join(RawClient.encode("ADDJOB", queue, "big", 0, "GROUP", "big")
                        for _ in range(300)))
    for _ in range(300):
        c.read()
    for tenant in ("t1", "t2", "t3"):
        add(c, queue, tenant, "GROUP", tenant)
    first = drain(c, queue)[:8]
    # the three small groups are served within the first rounds, not after 300 jobs
    assert Counter(first[:4]) == Counter([b"big", b"t1", b"t2", b"t3"])
    assert first[4:] == [b"big"] * 4


def test_priority_wins_over_fairness(c: RawClient) -> None:
    queue = "order-both"
    for i in range(3):
        add(c, queue, f"a{i}", "GROUP", "a")
    add(c, queue, "b-urgent", "GROUP", "b", "PRIORITY", 10)
    add(c, queue, "b0", "GROUP", "b")
    assert drain(c, queue) == [b"b-urgent", b"a0", b"b0", b"a1", b"a2"]


def test_plain_queues_keep_disques_order(c: RawClient) -> None:
    queue = "order-plain"
    for i in range(20):
        add(c, queue, f"j{i}")
    assert drain(c, queue) == [f"j{i}".encode() for i in range(20)]
