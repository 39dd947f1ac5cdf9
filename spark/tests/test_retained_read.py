"""spark.read.format("disq") with from/to: a queue's retained jobs (QPOLICY ...
RETAIN) as a batch DataFrame, one partition per node's shard of the job IDs: every job
once, though each is kept by two holders."""

from __future__ import annotations

import time
from typing import Any

import pytest
from disq_client import Client
from support import DisqProcess, call, wait_for

from .jobs import addrs


@pytest.fixture(autouse=True)
def registered(spark: Any) -> None:
    from disq_spark import register

    register(spark)


def test_batch_read_of_retained_jobs(spark: Any, trio: list[DisqProcess]) -> None:
    assert call(trio[0], "QPOLICY", "kept", "SET", "RETAIN", 3600) == b"OK"
    for node in trio:
        wait_for(lambda n=node: call(n, "QPOLICY", "kept", "GET") is not None)
    t0 = int(time.time() * 1000)
    with Client(addrs(trio)) as client:
        for i in range(300):
            client.add_job("kept", f"j{i}", replicate=2, attrs={"n": str(i)})

    def take_all() -> bool:
        for node in trio:
            with Client(f"127.0.0.1:{node.port}") as one:
                jobs = one.get_jobs("kept", count=1000, nohang=True)
                if jobs:
                    one.ack(*[job.id for job in jobs])
        return sum(int(call(n, "QLEN", "kept")) for n in trio) == 0  # type: ignore[arg-type]

    wait_for(take_all, timeout=30)
    t1 = int(time.time() * 1000)

    def retained_everywhere() -> int:
        found = set()
        for node in trio:
            with Client(f"127.0.0.1:{node.port}") as one:
                found |= {job.id for job in one.retained("kept", t0, count=10_000)[1]}
        return len(found) == 300

    wait_for(retained_everywhere, timeout=30)
    df = (spark.read.format("disq").option("nodes", ",".join(addrs(trio)))
          .option("queue", "kept").option("from", t0).option("to", t1).load())
    assert df.rdd.getNumPartitions() == 3
    rows = df.collect()
    assert len(rows) == 300 and len({r.id for r in rows}) == 300
    assert sorted(r.body for r in rows) == sorted(f"j{i}".encode() for i in range(300))
    assert all(r.attrs["n"] == r.body.decode()[1:] and t0 <= r.created_ms <= t1
               for r in rows)
    with pytest.raises(Exception, match="after to"):
        (spark.read.format("disq").option("nodes", ",".join(addrs(trio)))
         .option("queue", "kept").option("from", t1).option("to", t0).load().collect())
