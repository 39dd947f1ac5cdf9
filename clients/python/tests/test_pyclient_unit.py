"""The client's pieces without a server: RESP encoding, error mapping, reply parsing,
and the cluster view's choices."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import hiredis
import pytest
from disq_client import commands as cmds
from disq_client.cluster import ClusterView
from disq_client.durations import job_durations
from disq_client.errors import (
    AuthenticationError,
    NoReplicationError,
    PausedError,
    QueueFullError,
    ResponseError,
    from_reply,
)
from disq_client.protocol import encode, parse_address
from disq_client.types import Hello, HelloNode, Job, QueuePolicy, is_at_most_once
from disq_client.worker import _Task, ordinal

A, B, C = "a" * 40, "b" * 40, "c" * 40


def job_from(node_id: str, n: int = 0) -> Job:
    return Job(f"D-{node_id[:8]}-{'x' * 20}{n:04d}-05a1", "q", b"")


def hello(me: str, *nodes: tuple[str, int, int]) -> Hello:
    return Hello(1, me, [HelloNode(i, "127.0.0.1", port, prio) for i, port, prio in nodes])


def test_encode() -> None:
    assert encode(("ADDJOB", "q", b"\x00\r\n", 5)) == (
        b"*4\r\n$6\r\nADDJOB\r\n$1\r\nq\r\n$3\r\n\x00\r\n\r\n$1\r\n5\r\n")
    options = cmds.addjob_options(100, 2, None, 0, None, 10, True)
    assert options == (100, "REPLICATE", 2, "RETRY", 0, "MAXLEN", 10, "ASYNC")
    bodies: list[bytes | str] = [b"a", "é", b""]
    assert cmds.encode_addjobs("q", bodies, options) == [
        encode(("ADDJOB", "q", body, *options)) for body in bodies]


def test_unix_ms_rounds_up_never_early() -> None:
    assert cmds.unix_ms(1_700_000_000_123) == 1_700_000_000_123
    utc = datetime(2030, 1, 1, 0, 0, 0, 1500, tzinfo=UTC)  # 1.5 ms after the second
    assert cmds.unix_ms(utc) == int(utc.replace(microsecond=0).timestamp()) * 1000 + 2
    assert cmds.unix_ms(utc.replace(microsecond=0)) % 1000 == 0
    plus_two = utc.astimezone(timezone(timedelta(hours=2)))
    assert cmds.unix_ms(plus_two) == cmds.unix_ms(utc)
    naive = datetime(2030, 1, 1, 12, 0)  # local time
    assert cmds.unix_ms(naive) == int(naive.timestamp() * 1000)
    args = cmds.add_job("q", b"b", 0, None, job_durations(delay_ms=5), None, False, None,
                        priority=0, group="g").args
    assert args[3:] == (0, "DELAY-MS", 5, "PRIORITY", 0, "GROUP", "g")


def test_get_jobs_arguments() -> None:
    cmd = cmds.get_jobs(["a", "b"], 3, 0, True, True)
    assert cmd.args == ("GETJOB", "NOHANG", "COUNT", 3, "WITHCOUNTERS", "FROM", "a", "b")
    assert cmd.wait == 0.0  # NOHANG never blocks
    assert cmds.get_jobs(["a"], 1, 0, False, False).wait is None  # blocks for ever
    assert cmds.get_jobs(["a"], 1, 250, False, False).args == ("GETJOB", "TIMEOUT", 250,
                                                               "FROM", "a")
    assert cmds.get_jobs(["a"], 1, 250, False, False).wait == 0.25


def test_reply_parsing() -> None:
    reader = hiredis.Reader()
    reader.feed(b"*1\r\n*7\r\n$1\r\nq\r\n$2\r\nid\r\n$1\r\nb\r\n$5\r\nnacks\r\n:2\r\n"
                b"$21\r\nadditional-deliveries\r\n:1\r\n")
    assert cmds.get_jobs(["q"], 1, 0, False, True).parse(reader.gets()) == [
        Job("id", "q", b"b", 2, 1)]
    assert cmds.get_jobs(["q"], 1, 0, True, False).parse(None) == []
    # a job using disq's extensions: its fields after Disque's (QPEEK, WITHCOUNTERS)
    assert cmds.qpeek("q", 1).parse([[b"q", b"id", b"b", b"priority", 3, b"group", b"g",
                                      b"due-ms", 5]]) == [
        Job("id", "q", b"b", priority=3, group="g", due_ms=5)]
    assert cmds.get_jobs(["q"], 1, 0, False, True).parse([[
        b"q", b"id", b"b", b"nacks", 2, b"additional-deliveries", 1, b"priority", 3,
        b"group", None, b"due-ms", 0]]) == [Job("id", "q", b"b", 2, 1, 3, None, 0)]
    # MAXDELIVERIES, or a dead letter: three more fields after those
    assert cmds.qpeek("q", 1).parse([[b"dead:q", b"id", b"b", b"priority", 128, b"group",
                                      None, b"due-ms", 0, b"max-deliveries", 0,
                                      b"dead-from", b"q", b"dead-reason",
                                      b"max-deliveries"]]) == [
        Job("id", "dead:q", b"b", priority=128, due_ms=0, max_deliveries=0, dead_from="q",
            dead_reason="max-deliveries")]
    parsed = cmds.hello().parse([1, A.encode(), [A.encode(), b"127.0.0.1", b"7711", b"1"]])
    assert parsed == hello(A, (A, 7711, 1))


def test_error_mapping() -> None:
    assert type(from_reply("NOREPL Timeout reached")) is NoReplicationError
    assert type(from_reply("MAXLEN Queue is already longer")) is QueueFullError
    assert type(from_reply("PAUSED Queue paused in input")) is PausedError
    assert type(from_reply("ERR invalid password")) is AuthenticationError
    assert type(from_reply("WRONGPASS invalid")) is AuthenticationError
    other = from_reply("WEIRD thing")
    assert type(other) is ResponseError and other.code == "WEIRD"
    assert str(other) == "WEIRD thing"


def test_addresses_and_ids() -> None:
    assert parse_address("h:1") == ("h", 1)
    assert parse_address("[::1]:7711") == ("::1", 7711)
    assert parse_address(("h", 2)) == ("h", 2)
    with pytest.raises(ValueError):
        parse_address("nohost")
    assert is_at_most_once("D-5026f6fb-3OMkS++xHKMptD/8lK8xnd3t-05a0")
    assert not is_at_most_once("D-5026f6fb-3OMkS++xHKMptD/8lK8xnd3t-05a1")


def test_view_learns_nodes_from_hello() -> None:
    view = ClusterView(["localhost:1"])
    view.connected(("localhost", 1), hello(A, (A, 1, 1), (B, 2, 1), (C, 3, 10)))
    # the seed keeps the address it was reached at; the others come from HELLO
    assert {a: (e.id, e.priority) for a, e in view.nodes.items()} == {
        ("localhost", 1): (A, 1), ("127.0.0.1", 2): (B, 1), ("127.0.0.1", 3): (C, 10)}
    assert view.current_id == A
    # a node the cluster forgot is dropped
    view.learn(("localhost", 1), hello(A, (A, 1, 1), (B, 2, 1)))
    assert set(view.nodes) == {("localhost", 1), ("127.0.0.1", 2)}


def test_view_prefers_priority_then_health() -> None:
    view = ClusterView(["127.0.0.1:1"])
    view.connected(("127.0.0.1", 1), hello(A, (A, 1, 100), (B, 2, 5), (C, 3, 1)))
    assert view.candidates() == [("127.0.0.1", 3), ("127.0.0.1", 2), ("127.0.0.1", 1)]
    assert view.better_than(("127.0.0.1", 1)) == [("127.0.0.1", 3), ("127.0.0.1", 2)]
    view.failed(("127.0.0.1", 3))
    assert view.current == ("127.0.0.1", 1)  # not the one that failed
    assert view.candidates() == [("127.0.0.1", 2), ("127.0.0.1", 1), ("127.0.0.1", 3)]
    view.failed(("127.0.0.1", 1))
    assert view.current is None


def test_view_follows_the_producing_node() -> None:
    view = ClusterView(["127.0.0.1:1"], switch_after_jobs=10)
    view.connected(("127.0.0.1", 1), hello(A, (A, 1, 1), (B, 2, 1), (C, 3, 1)))
    # half from B is not most of them: stay
    assert view.note_jobs([job_from(B)] * 5 + [job_from(C)] * 5) is None
    # a window not yet full: no decision
    assert view.note_jobs([job_from(B)] * 9) is None
    assert view.note_jobs([job_from(B)]) == ("127.0.0.1", 2)
    # most from the current node: stay
    assert view.note_jobs([job_from(A)] * 8 + [job_from(B)] * 2) is None
    # a node not known, or known as failing, is not followed
    assert view.note_jobs([job_from("d" * 40)] * 10) is None
    view.nodes[("127.0.0.1", 3)].priority = 100
    assert view.note_jobs([job_from(C)] * 10) is None
    assert ClusterView(["h:1"], switch_after_jobs=0).note_jobs([job_from(B)] * 99) is None


def test_encode_addjobs_with_dedup_keys() -> None:
    options = cmds.addjob_options(100, None, None, None, None, None, False)
    assert cmds.encode_addjobs("q", [b"a"], options, [b"k1"]) == [
        b"*6\r\n$6\r\nADDJOB\r\n$1\r\nq\r\n$1\r\na\r\n$3\r\n100\r\n$5\r\nDEDUP\r\n$2\r\nk1\r\n"]
    plan = cmds.add_jobs("q", [b"a", b"b", b"c"], 100, None, job_durations(), None, False,
                         2, ["x", "y", "z"])
    chunks = list(plan.chunks)
    assert chunks == [([b"a", b"b"], ["x", "y"]), ([b"c"], ["z"])]
    assert plan.pipelined(*chunks[1])[0].endswith(b"$5\r\nDEDUP\r\n$1\r\nz\r\n")
    assert plan.bulk(*chunks[0]) == [
        b"*8\r\n$7\r\nADDJOBS\r\n$1\r\nq\r\n$3\r\n100\r\n$10\r\nDEDUP-JOBS\r\n"
        b"$1\r\nx\r\n$1\r\na\r\n$1\r\ny\r\n$1\r\nb\r\n"]
    assert cmds.addjobs_request("q", [b"a", "é"], (0, "TTL", 5)) == (
        b"*8\r\n$7\r\nADDJOBS\r\n$1\r\nq\r\n$1\r\n0\r\n$3\r\nTTL\r\n$1\r\n5\r\n"
        b"$4\r\nJOBS\r\n$1\r\na\r\n$2\r\n\xc3\xa9\r\n")
    assert cmds.addjob_options(0, None, None, None, None, None, False, "k") == (0, "DEDUP", "k")


def test_queue_command_arguments() -> None:
    assert cmds.qscan(0, None, None, None, None).args == ("QSCAN", 0)
    assert cmds.qscan(7, 10, 1, 5, 2).args == (
        "QSCAN", 7, "COUNT", 10, "MINLEN", 1, "MAXLEN", 5, "IMPORTRATE", 2)
    assert cmds.qscan(0, None, 0, None, None).args == ("QSCAN", 0, "MINLEN", 0)
    assert cmds.jscan(0, None, None, (), False).args == ("JSCAN", 0, "REPLY", "id")
    assert cmds.jscan(3, 50, "q", ["queued", "active"], True).args == (
        "JSCAN", 3, "COUNT", 50, "QUEUE", "q", "STATE", "queued", "STATE", "active",
        "REPLY", "all")
    assert cmds.pause("q", (), False).args == ("PAUSE", "q", "state")
    assert cmds.pause("q", (), True).args == ("PAUSE", "q", "state", "bcast")
    assert cmds.pause("q", ("in", "none", "out"), True).args == (
        "PAUSE", "q", "in", "none", "out", "bcast")


def test_job_command_arguments() -> None:
    assert cmds.addjob_options(5000, None, None, None, None, None, False) == (5000,)
    assert cmds.addjob_options(0, 1, 2, 3, 4, 5, True, b"k") == (
        0, "REPLICATE", 1, "DELAY", 2, "RETRY", 3, "TTL", 4, "MAXLEN", 5, "DEDUP", b"k",
        "ASYNC")
    assert cmds.addjob_options(0, 0, 0, 0, 0, 0, False) == (
        0, "REPLICATE", 0, "DELAY", 0, "RETRY", 0, "TTL", 0, "MAXLEN", 0)
    assert cmds.set_job("id", 3, None, 250).args == (
        "JOBSET", "id", "PRIORITY", 3, "DELAY-MS", 250)
    assert cmds.set_job("id", None, 1_700_000_000_000, None).args == (
        "JOBSET", "id", "AT", 1_700_000_000_000)
    assert cmds.get_jobs(["q"], 2, 10, False, False).args == (
        "GETJOB", "TIMEOUT", 10, "COUNT", 2, "FROM", "q")
    assert cmds.get_jobs(["q"], 0, 0, False, False).args == ("GETJOB", "COUNT", 0, "FROM", "q")


def test_failure_command_arguments() -> None:
    """The failure commands through the spec: NACK's DELAY-MS before the IDs, QPOLICY
    SET's BACKOFF as two values and RATE as a decimal, DEADLETTER REQUEUE's COUNT."""
    assert cmds.nack(["a", "b"], None).args == ("NACK", "a", "b")
    assert cmds.nack(["a"], 250).args == ("NACK", "DELAY-MS", 250, "a")
    assert cmds.qpolicy_set("q", 5, "dlq", (100, 2000), 2.5).args == (
        "QPOLICY", "q", "SET", "MAXDELIVERIES", 5, "DEADLETTER", "dlq", "BACKOFF", 100, 2000,
        "RATE", "2.5")
    assert cmds.qpolicy_set("q", None, None, None, 10).args == (
        "QPOLICY", "q", "SET", "RATE", 10)
    assert cmds.qpolicy_set("q", None, None, None, 1e-05).args[-1] == "1e-05"
    assert cmds.qpolicy_set("q", None, None, None, None).args == ("QPOLICY", "q", "SET")
    assert cmds.qpolicy_get("q").args == ("QPOLICY", "q", "GET")
    assert cmds.qpolicy_del("q").parse(1) is True and cmds.qpolicy_del("q").parse(0) is False
    assert cmds.requeue_dead("dead:q", None).args == ("DEADLETTER", "REQUEUE", "dead:q")
    assert cmds.requeue_dead("dead:q", 3).args == (
        "DEADLETTER", "REQUEUE", "dead:q", "COUNT", 3)
    with pytest.raises(ValueError):  # not a (base, max) pair: never sent
        cmds.qpolicy_set("q", None, None, (1, 2, 3), None)  # type: ignore[arg-type]


def test_queue_policy_parsing() -> None:
    parse = cmds.qpolicy_get("q").parse
    assert parse(None) is None
    assert parse([b"queue", b"q", b"maxdeliveries", 5, b"deadletter", b"dead:q",
                  b"backoff", [100, 2000], b"rate", b"2.5"]) == QueuePolicy(
        "q", 5, "dead:q", (100, 2000), 2.5)
    assert parse([b"queue", b"q", b"maxdeliveries", None, b"deadletter", b"g",
                  b"backoff", None, b"rate", b"10"]) == QueuePolicy("q", None, "g", None, 10.0)
    # QPOLICY GET's seconds, in ms as every duration the client gives
    policy = parse([b"queue", b"q", b"maxdeliveries", None, b"deadletter", b"g",
                    b"backoff", None, b"rate", None, b"result-ttl", 3600, b"retry", 0,
                    b"ttl", 60, b"retain", None])
    assert (policy.result_ttl_ms, policy.retry_ms, policy.ttl_ms, policy.retain_ms) == (
        3_600_000, 0, 60_000, None)


def test_worker_tells_the_last_delivery() -> None:
    assert [ordinal(n) for n in (1, 2, 3, 4, 11, 12, 13, 21, 22, 101, 111)] == [
        "1st", "2nd", "3rd", "4th", "11th", "12th", "13th", "21st", "22nd", "101st", "111th"]
    task = _Task("q", print, False, max_deliveries=3)
    assert task.last_delivery(Job("id", "q", b"", 2, 0)) == 3
    assert task.last_delivery(Job("id", "q", b"", 1, 0)) is None
    assert task.last_delivery(Job("id", "q", b"", 1, 1)) == 3  # a requeue counts
    assert task.last_delivery(Job("id", "q", b"")) is None  # no counters: cannot tell
    # the job's own MAXDELIVERIES wins over the task's; 0: the queue policy's (the task's)
    assert task.last_delivery(Job("id", "q", b"", 0, 0, max_deliveries=1)) == 1
    assert task.last_delivery(Job("id", "q", b"", 2, 0, max_deliveries=0)) == 3
    unknown = _Task("q", print, False, backoff=(1, 2))
    assert unknown.last_delivery(Job("id", "q", b"", 9, 0)) is None
    assert unknown.last_delivery(Job("id", "q", b"", 0, 0, max_deliveries=1)) == 1
