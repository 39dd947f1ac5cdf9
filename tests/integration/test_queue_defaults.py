"""QPOLICY queue SET RETRY/TTL/REPLICATE/MAXLEN (a disq extension) against real servers:
the defaults of an ADDJOB to the queue that does not give the option, checked as
ADDJOB checks its own; the ADDJOB's option wins."""

from __future__ import annotations

from collections.abc import Callable

import jobutil
import pytest
from jobutil import NULL_BULK, RawClient, assert_error, fields_of
from support import DisqProcess, form_cluster, wait_for

shared_disq = jobutil.shared_disq
node = jobutil.node
c = jobutil.c


def show(c: RawClient, job_id: bytes) -> dict[str, object]:
    return fields_of(c.call("SHOW", job_id))


def policy(c: RawClient, queue: str) -> dict[str, object] | None:
    reply = c.call("QPOLICY", queue, "GET")
    return None if reply is NULL_BULK else fields_of(reply)


def wait_for_policy(c: RawClient, queue: str) -> None:
    wait_for(lambda: policy(c, queue) is not None, 5, 0.02, f"the policy of {queue}")


def test_defaults_apply_and_the_addjob_option_wins(c: RawClient) -> None:
    assert c.call("QPOLICY", "dq", "SET", "RETRY", 7, "TTL", 600, "REPLICATE", 1) == b"OK"
    assert {k: v for k, v in (policy(c, "dq") or {}).items()
            if k in ("retry", "ttl", "replicate", "maxlen")} == {
        "retry": 7, "ttl": 600, "replicate": 1, "maxlen": NULL_BULK}
    plain = show(c, c.add("dq", "a"))
    assert (plain["retry"], plain["ttl"] <= 600, plain["ttl"] > 590, plain["repl"]) == (
        7, True, True, 1)
    own = show(c, c.add("dq", "b", "RETRY", 3, "TTL", 100))
    assert (own["retry"], own["ttl"] <= 100) == (3, True)
    # another queue is untouched: ADDJOB's own defaults (a day, a tenth of it capped)
    other = show(c, c.add("elsewhere", "c"))
    assert (other["retry"], other["ttl"] > 86_000) == (300, True)
    # and so is this one once the policy is gone
    assert c.call("QPOLICY", "dq", "DEL") == 1
    assert show(c, c.add("dq", "d"))["retry"] == 300


def test_an_explicit_day_long_ttl_wins_over_the_default(c: RawClient) -> None:
    """TTL 86400 is ADDJOB's own default, given: the queue's TTL does not replace it."""
    assert c.call("QPOLICY", "dday", "SET", "TTL", 60) == b"OK"
    assert show(c, c.add("dday", "x", "TTL", 86400))["ttl"] > 86_000
    assert show(c, c.add("dday", "y"))["ttl"] <= 60


def test_maxlen_refuses_as_addjob_maxlen(c: RawClient) -> None:
    assert c.call("QPOLICY", "ml", "SET", "MAXLEN", 2) == b"OK"
    c.add("ml", "1")
    c.add("ml", "2")
    assert_error(c, "MAXLEN Queue is already longer than the specified MAXLEN count",
                 "ADDJOB", "ml", "3", 0)
    c.add("ml", "3", "MAXLEN", 5)  # the ADDJOB's MAXLEN wins
    assert c.call("QLEN", "ml") == 3
    got = c.call("ADDJOBS", "ml", 0, "JOBS", "a", "b")  # each job of a batch, the same
    assert isinstance(got[0], jobutil.Error) and isinstance(got[1], jobutil.Error)


def test_retry_zero_default_and_ttl_default_checked_as_addjob(c: RawClient) -> None:
    assert c.call("QPOLICY", "amo", "SET", "RETRY", 0, "REPLICATE", 1) == b"OK"
    job = show(c, c.add("amo", "x"))
    assert job["retry"] == 0  # at most once
    assert c.call("QPOLICY", "short", "SET", "TTL", 5) == b"OK"
    assert_error(c, "ERR The specified DELAY is greater than TTL. Job refused since would "
                 "never be delivered", "ADDJOB", "short", "x", 0, "DELAY", 10)


@pytest.mark.parametrize(("args", "error"), [
    (("RETRY", -1), "ERR RETRY must be between 0 and 1000000000 seconds"),
    (("RETRY", "1.5"), "ERR RETRY must be between 0 and 1000000000 seconds"),
    (("TTL", 0), "ERR TTL must be between 1 and 1000000000 seconds"),
    (("TTL", 1_000_000_001), "ERR TTL must be between 1 and 1000000000 seconds"),
    (("REPLICATE", 0), "ERR REPLICATE must be between 1 and 65535"),
    (("REPLICATE", 65536), "ERR REPLICATE must be between 1 and 65535"),
    (("MAXLEN", 0), "ERR MAXLEN must be between 1 and 4294967295"),
    (("MAXLEN", "x"), "ERR MAXLEN must be between 1 and 4294967295"),
    (("GROUP-CONCURRENCY", 0), "ERR GROUP-CONCURRENCY must be between 1 and 1000000"),
    (("GROUP-RATE", -1),
     "ERR GROUP-RATE must be a number of jobs per second, > 0 and <= 1000000000"),
    (("RETRY", 0), "ERR With RETRY set to 0 please explicitly set  REPLICATE to 1 "
                   "(at-most-once delivery)"),
    (("RETRY", 100, "TTL", 50), "ERR The specified RETRY is greater than TTL: the job "
                                "would expire before it is queued again"),
    (("TTL", 5), "ERR The specified RETRY is greater than TTL: the job would expire before "
                 "it is queued again"),
])
def test_bad_defaults_are_refused_and_nothing_changes(c: RawClient, args: tuple,
                                                      error: str) -> None:
    c.call("QPOLICY", "bad", "SET", "RETRY", 10)
    before = policy(c, "bad")
    assert_error(c, error, "QPOLICY", "bad", "SET", *args)
    assert policy(c, "bad") == before
    c.call("QPOLICY", "bad", "DEL")


def test_replicate_default_bigger_than_the_cluster_is_addjob_noreplicas(
        start_node: Callable[..., DisqProcess]) -> None:
    """Two nodes, every policy on both: a REPLICATE 3 default is ADDJOB's NOREPL at add
    time, on either node; an ADDJOB's own REPLICATE 1 is taken."""
    nodes = form_cluster([start_node() for _ in range(2)])
    with RawClient(nodes[0].port) as first, RawClient(nodes[1].port) as second:
        assert first.call("QPOLICY", "r3", "SET", "REPLICATE", 3) == b"OK"
        wait_for_policy(second, "r3")
        for client in (first, second):
            assert_error(client, "NOREPL Not enough reachable nodes for the requested "
                         "replication level", "ADDJOB", "r3", "x", 0)
            assert show(client, client.add("r3", "y", "REPLICATE", 1))["repl"] == 1
        assert first.call("QPOLICY", "r2", "SET", "REPLICATE", 2, "RETRY", 30) == b"OK"
        wait_for_policy(second, "r2")
        job = show(second, second.add("r2", "z"))
        assert (job["repl"], job["retry"]) == (2, 30)


def test_the_python_clients_set_and_read_the_new_fields(node: DisqProcess) -> None:
    import asyncio

    from disq_client import AsyncClient, Client
    with Client(f"127.0.0.1:{node.port}") as client:
        assert client.qpolicy_set("pyq", retry_ms=5000, ttl_ms=50_000, replicate=1, maxlen=3,
                                  group_concurrency=2, group_rate=0.5) == "OK"
        got = client.qpolicy_get("pyq")
        assert got is not None
        assert (got.retry_ms, got.ttl_ms, got.replicate, got.maxlen, got.group_concurrency,
                got.group_rate, got.concurrency) == (5000, 50_000, 1, 3, 2, 0.5, None)

    async def change() -> None:
        async with AsyncClient(f"127.0.0.1:{node.port}") as aclient:
            assert await aclient.qpolicy_set("pyq", maxlen=9) == "OK"

    asyncio.run(change())
    with RawClient(node.port) as c:
        assert (policy(c, "pyq") or {})["maxlen"] == 9
