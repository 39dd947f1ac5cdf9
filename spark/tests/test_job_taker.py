"""The streaming read's driver side (disq_spark.JobTaker) and the data source's options,
without Spark: micro-batches taken from every node, held until acknowledged, extended
with WORKING while held; the options typed and checked."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from disq_client import Client
from disq_client.errors import DisqConnectionError
from disq_spark import JobTaker, ReadOptions
from disq_spark.options import options_table, read_options, write_settings
from disq_spark.reader import arrow_batches
from support import DisqProcess, call, wait_for

from .jobs import addrs


def add(node: DisqProcess, queue: str, n: int, **options: int) -> list[str]:
    with Client(f"127.0.0.1:{node.port}") as client:
        return client.add_jobs(queue, [f"{queue}-{i}".encode() for i in range(n)],
                               **options)  # type: ignore[arg-type]


def test_batches_from_every_node_held_until_acknowledged(trio: list[DisqProcess]) -> None:
    ids = {node.port: add(node, "t1", 30, replicate=2) for node in trio}
    taker = JobTaker(ReadOptions(addrs(trio), queue="t1", fetch_count=7, poll_ms=50))
    try:
        first = taker.take(50)
        assert first is not None and first.seq == 1 and len(first) == 50
        assert len(first.ids) == 3  # every node gave some (7 at a time, in turn)
        assert all(job_id.decode() in ids[int(node.split(":")[1])]
                   for node, job_ids in first.ids.items() for job_id in job_ids)
        second = taker.take(1000, after=first.seq)
        assert second is not None and second.seq == 2 and len(second) == 40
        assert taker.take(10, block=False) is None  # drained
        assert sum(int(call(n, "QLEN", "t1")) for n in trio) == 0  # type: ignore[arg-type]
        assert [t.seq for t in taker.batches(0, 2)] == [1, 2]
        assert taker.ack_through(1) == 50 and [t.seq for t in taker.batches(0, 9)] == [2]
        states = set()  # delivered, not acknowledged: active where it is held
        for node in trio:
            with Client(f"127.0.0.1:{node.port}", switch_after_jobs=0) as client:
                assert second.rows is not None
                info = client.show(second.rows.id[0].decode())
                states |= {info.state} if info is not None else set()
        assert states == {"active"}
        assert taker.ack_through(2) == 40 and taker.acked == 90
        assert first.rows is not None and second.rows is not None
        for job_id in first.rows.id[:3] + second.rows.id[:3]:  # acknowledged everywhere
            wait_for(lambda j=job_id: all(  # type: ignore[misc]
                call(n, "SHOW", j) is None for n in trio), timeout=10,
                message="acknowledged jobs to go")
    finally:
        taker.close()


def test_a_reply_lost_in_a_take_and_its_jobs_back_after_retry(
        trio: list[DisqProcess]) -> None:
    """A take's GETJOBs leave for every node before a reply is read. One reply is lost
    (its connection breaks): the take has jobs of the other nodes, and the lost reply's
    jobs, delivered but held by nobody, come back after their RETRY to a later take.
    (REPLICATE 1: a job's other copies would queue it again on their own node once
    its RETRY passed, so that on a slow machine a job could move to the node whose
    reply is lost before the first take.)"""
    for node in trio:
        add(node, "t9", 5, retry_ms=1000, replicate=1)
    taker = JobTaker(ReadOptions(addrs(trio), queue="t9", fetch_count=100, poll_ms=50))
    try:
        conn = taker.client(addrs(trio)[0]).connection()
        real_read = conn.read

        def broken_read(extra_wait: float | None = 0.0) -> object:
            conn.read = real_read  # type: ignore[method-assign]  # (once)
            conn.close()
            raise DisqConnectionError("a lost reply")

        conn.read = broken_read  # type: ignore[method-assign]
        first = taker.take(100, block=False)
        # The other nodes' jobs, as far as they are still there: a GETJOB NOHANG asks its
        # node's peers for jobs (NEEDJOBS), so on a loaded machine a peer may push some of
        # its jobs to a node whose reply already left, before its own GETJOB arrives
        # (seen: 8 of 10). They are queued there and come to a later take.
        assert first is not None and len(first) >= 1
        got = set(first.rows.id if first.rows is not None else [])
        deadline = time.monotonic() + 20
        while len(got) < 15 and time.monotonic() < deadline:
            more = taker.take(100)  # waits up to poll_ms when nothing is queued
            if more is not None and more.rows is not None:
                got |= set(more.rows.id)
        assert len(got) == 15
    finally:
        taker.close()


def test_acknowledgements_in_the_background(trio: list[DisqProcess]) -> None:
    """ack_through(wait=False): sent by a thread, one batch at a time; close() waits
    for the last one."""
    add(trio[1], "t5", 20, replicate=2)
    taker = JobTaker(ReadOptions(addrs(trio), queue="t5", fetch_count=5))
    try:
        first = taker.take(10)
        second = taker.take(10, after=first.seq if first else 0)
        assert first is not None and second is not None
        assert taker.ack_through(first.seq, wait=False) == 10
        assert taker.ack_through(second.seq, wait=False) == 10  # after the first's
    finally:
        taker.close()
    assert taker.acked == 20

    def left_on(node: DisqProcess) -> list[bytes]:
        with Client(f"127.0.0.1:{node.port}", switch_after_jobs=0) as client:
            return list(client.jscan(queue="t5", states=("queued", "active")))

    # The node that took an ACKJOB tells the job's other holders over the bus (SETACK):
    # they drop their copies a moment after the reply, not before it.
    for node in trio:
        wait_for(lambda node=node: not left_on(node), timeout=10,
                 message=f"the acknowledged jobs leave node {node.port}")


def test_the_last_batch_is_acknowledged_before_the_source_says_no_more(
        trio: list[DisqProcess]) -> None:
    """The source's latestOffset with no batch to follow (here Trigger.AvailableNow,
    its budget spent) answers only once the batch before is acknowledged: Spark may end
    the query there and kill the source's process without calling `stop`."""
    from disq_spark.source import DisqStreamReader
    from pyspark.sql.streaming.datasource import ReadMaxRows

    add(trio[0], "t6", 3000, replicate=2, retry_ms=300_000)
    reader = DisqStreamReader(ReadOptions(addrs(trio), queue="t6", fetch_count=500))
    try:
        reader.prepareForTriggerAvailableNow()
        start = reader.initialOffset()
        end = reader.latestOffset(start, ReadMaxRows(5000))
        assert end["seq"] == 1 and reader.taker.taken == 3000
        assert reader.latestOffset(end, ReadMaxRows(5000)) == end  # nothing more
        assert reader.taker.acked == 3000  # acknowledged: ACKJOB answered
    finally:
        reader.stop()
    for node in trio:
        assert int(call(node, "QLEN", "t6")) == 0  # type: ignore[arg-type]


def test_an_idle_take_waits_then_a_job_comes(trio: list[DisqProcess]) -> None:
    taker = JobTaker(ReadOptions(addrs(trio), queue="t2", poll_ms=300))
    try:
        started = time.monotonic()
        assert taker.take(10) is None and time.monotonic() - started >= 0.25
        add(trio[2], "t2", 1)
        taken = taker.take(10)
        assert taken is not None and len(taken) == 1
        taker.budget = 0  # Trigger.AvailableNow with nothing left: no wait, no job
        add(trio[0], "t2", 1)
        started = time.monotonic()
        assert taker.take(10) is None and time.monotonic() - started < 0.25
        taker.budget = None
        assert taker.queued() == 1
    finally:
        taker.close()


def test_keepalive_keeps_held_jobs_from_coming_back(trio: list[DisqProcess]) -> None:
    """RETRY 1 s: held 2.5 s with WORKING every 300 ms, the jobs are not queued again;
    without it they are."""
    add(trio[0], "t3", 5, replicate=2, retry_ms=1000)
    kept = JobTaker(ReadOptions(addrs(trio), queue="t3", keepalive_ms=300))
    try:
        taken = kept.take(10)
        assert taken is not None and len(taken) == 5
        time.sleep(2.5)
        assert sum(int(call(n, "QLEN", "t3")) for n in trio) == 0  # type: ignore[arg-type]
        kept.ack_through(taken.seq)
    finally:
        kept.close()
    add(trio[0], "t3", 5, replicate=2, retry_ms=1000)
    plain = JobTaker(ReadOptions(addrs(trio), queue="t3"))
    try:
        taken = plain.take(10)
        assert taken is not None and len(taken) == 5
        wait_for(lambda: sum(int(call(n, "QLEN", "t3")) for n in trio) == 5,  # type: ignore[arg-type]
                 timeout=10, message="the jobs back after their RETRY")
    finally:
        plain.close()


def test_rows_as_arrow_batches(trio: list[DisqProcess]) -> None:
    with Client(addrs(trio)) as client:
        client.add_job("t4", b"x", priority=3, group="g")
        client.add_job("t4", b"y")
    taker = JobTaker(ReadOptions(addrs(trio), queue="t4"))
    try:
        taken = taker.take(10)
        assert taken is not None
        assert taken.rows is not None
        batches = arrow_batches(taken.rows, 3)
        assert len(batches) == 2  # no more batches than jobs
        assert taken.partitions(3) == batches and taken.rows is None  # kept as Arrow
        rows = {r["body"]: r for b in batches for r in b.to_pylist()}
        assert rows[b"x"]["priority"] == 3 and rows[b"x"]["group"] == "g"
        assert rows[b"y"]["priority"] is None and rows[b"y"]["nacks"] == 0
        assert set(rows[b"x"]) == {"queue", "id", "body", "nacks", "additional_deliveries",
                                   "priority", "group"}
        taker.ack_through(taken.seq)
    finally:
        taker.close()


def test_a_taker_subscribes_its_queue_to_a_topic(trio: list[DisqProcess]) -> None:
    taker = JobTaker(ReadOptions(addrs(trio), queue="t-sub", topic="t-feed"))
    try:
        with Client(addrs(trio)) as client:
            assert client.topic_list("t-feed") == {"t-feed": ["t-sub"]}
            published = client.topic_publish("t-feed", b"news", msgid="n-1")
        taken = taker.take(10)
        assert taken is not None and taken.count == 1
        assert list(published) == ["t-sub"]
    finally:
        taker.close()


def test_options_are_typed_and_checked() -> None:
    s = write_settings({"NODES": "a:1, b:2", "queue": "q", "replicate": "2", "async": "true",
                        "key": "ID", "at": "when", "checkpointLocation": "/x"},
                       ["body", "id", "when"])
    o = s.options
    assert (o.nodes, o.replicate, o.async_, o.key, o.at, o.body) == (
        ["a:1", "b:2"], 2, True, 1, 2, 0)
    assert s.bad_rows == "fail" and not s.job_name_given
    r = read_options({"nodes": "a:1", "queue": "q", "max_jobs_per_batch": "5",
                      "ack": "FASTACK"})
    assert (r.max_jobs_per_batch, r.ack, r.num_partitions) == (5, "fastack", 0)
    for bad, message in [({"queue": "q"}, "nodes is required"),
                         ({"nodes": "a:1", "queue": "q", "replicat": "2"}, "unknown option"),
                         ({"nodes": "a:1", "queue": "q", "replicate": "two"}, "a number"),
                         ({"nodes": "a:1", "queue": "q", "max_jobs_per_batch": "1"},
                          "for reads"),
                         ({"nodes": "a:1", "queue": "q", "key": "nope"}, "column 'nope'"),
                         ({"nodes": "a:1", "queue": "q", "at": "id", "delay_ms": "5"},
                          "mutually exclusive"),
                         ({"nodes": "a:1", "queue": "q", "bad_rows": "drop"}, "one of")]:
        with pytest.raises(ValueError, match=message):
            write_settings(bad, ["body", "id"])
    with pytest.raises(ValueError, match="ack must be one of|one of"):
        read_options({"nodes": "a:1", "queue": "q", "ack": "later"})


def test_the_readme_lists_every_option() -> None:
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    for side in ("both", "write", "read"):
        assert options_table(side) in readme, f"spark/README.md: the {side} options' table"
