"""QPOLICY ... GROUP-CONCURRENCY n / GROUP-RATE r (disq extensions) against real servers:
each GROUP of a queue limited as CONCURRENCY and RATE limit a queue, a group held back
not holding back the others; on one node and across two."""

from __future__ import annotations

import time
from collections.abc import Callable

import jobutil
from jobutil import NULL_ARRAY, NULL_BULK, BlockedGetjob, RawClient, fields_of, ids_of
from support import DisqProcess, form_cluster, wait_for

shared_disq = jobutil.shared_disq
node = jobutil.node
c = jobutil.c


def qstat(c: RawClient, queue: str) -> dict[str, object]:
    return fields_of(c.call("QSTAT", queue))


def add_groups(c: RawClient, queue: str, groups: dict[str, int]) -> dict[bytes, str]:
    """The jobs added, by ID -> their group."""
    return {c.add(queue, f"{group}{i}", "GROUP", group, "REPLICATE", 1, "RETRY", 300): group
            for group, count in groups.items() for i in range(count)}


def test_a_group_at_its_cap_does_not_hold_back_the_others(node: DisqProcess,
                                                          c: RawClient) -> None:
    assert c.call("QPOLICY", "gq", "SET", "GROUP-CONCURRENCY", 1) == b"OK"
    fields = c.call("QPOLICY", "gq", "GET")
    assert fields[fields.index(b"group-concurrency") + 1] == 1
    groups = add_groups(c, "gq", {"a": 3, "b": 3})
    plain = c.add("gq", "no group")
    running = ids_of(c.call("GETJOB", "NOHANG", "COUNT", 10, "FROM", "gq"))
    assert sorted(groups.get(i, "-") for i in running) == ["-", "a", "b"]  # one each
    assert plain in running
    assert c.call("GETJOB", "NOHANG", "FROM", "gq") is NULL_ARRAY
    stat = qstat(c, "gq")
    assert (stat["len"], stat["groups-held"], stat["group-jobs-running"]) == (4, 2, 2)
    a_running = next(i for i in running if groups.get(i) == "a")
    assert c.call("ACKJOB", a_running) == 1  # a ended: a's next, not b's
    got = ids_of(c.call("GETJOB", "NOHANG", "COUNT", 10, "FROM", "gq"))
    assert [groups[i] for i in got] == ["a"]
    b_running = next(i for i in running if groups.get(i) == "b")
    waiting = BlockedGetjob(node.port, c, "gq")
    assert c.call("NACK", b_running) == 1  # a requeue ends a run too: b's next comes
    assert [groups[i] for i in ids_of(waiting.reply())] == ["b"]
    assert c.call("QPOLICY", "gq", "DEL") == 1  # no limit: the rest at once
    assert len(ids_of(c.call("GETJOB", "NOHANG", "COUNT", 10, "FROM", "gq"))) == 3


def test_group_rate_spaces_each_groups_jobs(c: RawClient) -> None:
    assert c.call("QPOLICY", "gr", "SET", "GROUP-RATE", 4) == b"OK"
    groups = add_groups(c, "gr", {"a": 8, "b": 8})
    start = time.monotonic()
    got: list[str] = []
    while time.monotonic() - start < 1.0:
        got += [groups[i] for i in ids_of(c.call("GETJOB", "TIMEOUT", 500, "COUNT", 10,
                                                  "FROM", "gr"))]
    elapsed = time.monotonic() - start
    for group in ("a", "b"):  # one token at first, then 4 a second, each group its own
        assert 3 <= got.count(group) <= 2 + 4 * elapsed, (group, got, elapsed)


def test_the_nodes_count_each_others_runs_of_a_group(
        start_node: Callable[..., DisqProcess]) -> None:
    """GROUP-CONCURRENCY 1 on two nodes: a job of a running on the first holds back a's
    jobs on the second (once its report came) and not b's; its end lets them go."""
    nodes = form_cluster([start_node("--cluster-node-timeout", "2000") for _ in range(2)])
    with RawClient(nodes[0].port) as first, RawClient(nodes[1].port) as second:
        assert first.call("QPOLICY", "gx", "SET", "GROUP-CONCURRENCY", 1) == b"OK"
        wait_for(lambda: second.call("QPOLICY", "gx", "GET") is not NULL_BULK, 5)
        there = add_groups(first, "gx", {"a": 1})
        here = add_groups(second, "gx", {"a": 2, "b": 2})
        (running,) = ids_of(first.call("GETJOB", "NOHANG", "FROM", "gx"))
        assert there[running] == "a"
        wait_for(lambda: qstat(second, "gx")["group-jobs-running-elsewhere"] == 1, 5, 0.02,
                 "the first node's report of a's run")
        got = ids_of(second.call("GETJOB", "NOHANG", "COUNT", 10, "FROM", "gx"))
        assert [here[i] for i in got] == ["b"]
        assert second.call("GETJOB", "NOHANG", "COUNT", 10, "FROM", "gx") is NULL_ARRAY
        assert first.call("ACKJOB", running) == 1
        a_next = second.call("GETJOB", "TIMEOUT", 5000, "FROM", "gx")  # a's turn, at the report
        assert [here[i] for i in ids_of(a_next)] == ["a"]
        # and now the first node holds back its own a jobs
        first.add("gx", "a-again", "GROUP", "a", "REPLICATE", 1)
        wait_for(lambda: qstat(first, "gx")["group-jobs-running-elsewhere"] == 2, 5, 0.02,
                 "the second node's report of its runs of a and b")
        assert first.call("GETJOB", "NOHANG", "FROM", "gx") is NULL_ARRAY
