"""ADDJOBS (a disq extension): a batch of jobs of one queue in one request, each added
as its own ADDJOB with the request's options would be; one array reply with each job's
ID or error in its place. Against real servers: order and options, DEDUP keys within
a batch and across nodes, the errors that refuse the whole request and those of one
job, replication per job in a cluster, a client gone while its jobs wait for copies."""

from __future__ import annotations

import signal
from collections.abc import Callable

import jobutil
import pytest
from jobutil import ID_RE, Error, RawClient, Status, assert_error
from support import DisqProcess, wait_for
from test_job_fields import show

shared_disq = jobutil.shared_disq
node = jobutil.node


@pytest.fixture
def c(node: DisqProcess):
    with RawClient(node.port) as client:
        yield client


def ids_of(reply: object) -> list[bytes]:
    assert isinstance(reply, list), reply
    for item in reply:
        assert isinstance(item, Status) and ID_RE.match(item), reply
    return [bytes(item) for item in reply]


def test_jobs_added_in_order_with_the_options(c: RawClient) -> None:
    ids = ids_of(c.call("ADDJOBS", "q", 0, "TTL", 100, "RETRY", 7, "PRIORITY", 3,
                        "JOBS", "a", "b", "JOBS", "a"))  # a body may look like a token
    assert len(set(ids)) == 4
    assert c.call("QLEN", "q") == 4
    for job_id in ids:
        job = show(c, job_id)
        assert (job["queue"], job["retry"], job["priority"]) == (b"q", 7, 3)
        assert 99 <= job["ttl"] <= 100
    got = c.call("GETJOB", "NOHANG", "COUNT", 10, "FROM", "q")
    assert [(job[1], job[2]) for job in got] == list(zip(ids, [b"a", b"b", b"JOBS", b"a"],
                                                         strict=True))


def test_dedup_keys_one_job_per_key(c: RawClient) -> None:
    ids = ids_of(c.call("ADDJOBS", "q", 0, "DEDUP-JOBS", "k1", "a", "k2", "b", "k1", "c"))
    assert ids[0] == ids[2] != ids[1]
    assert c.call("QLEN", "q") == 2
    # ADDJOB and a later ADDJOBS see the same keys
    assert c.call("ADDJOB", "q", "x", 0, "DEDUP", "k2") == ids[1]
    again = ids_of(c.call("ADDJOBS", "q", 0, "dedup-jobs", "k3", "d", "k1", "e"))
    assert again[1] == ids[0]
    assert c.call("QLEN", "q") == 3


@pytest.mark.parametrize(("args", "error"), [
    (("TTL", 10, "JOBS"), "ERR ADDJOBS needs JOBS body [body ...] or DEDUP-JOBS key "
                          "body [key body ...] after its options"),
    (("TTL", 10, "b1", "b2"), "ERR syntax error"),
    (("DEDUP-JOBS", "k1", "a", "k2"), "ERR ADDJOBS needs JOBS body [body ...] or "
                                      "DEDUP-JOBS key body [key body ...] after its options"),
    (("DEDUP", "k", "JOBS", "a"), "ERR ADDJOBS takes its DEDUP keys per job: DEDUP-JOBS key "
                                  "body [key body ...]"),
    (("DEDUP-JOBS", "k1", "a", "", "b"), "ERR DEDUP key must be 1 to 256 bytes"),
    (("DEDUP-JOBS", "k1", "a", "x" * 257, "b"), "ERR DEDUP key must be 1 to 256 bytes"),
    (("TTL", 0, "JOBS", "a"), "ERR TTL must be a number > 0"),
    (("DELAY-MS", 5, "AT", 6, "JOBS", "a"), "ERR DELAY-MS and AT are mutually exclusive"),
    (("REPLICATE", "x", "JOBS", "a"), "ERR REPLICATE must be between 1 and 65535"),
])
def test_bad_requests_add_nothing(c: RawClient, args: tuple, error: str) -> None:
    assert_error(c, error, "ADDJOBS", "q", 0, *args)
    assert_error(c, "ERR timeout is not an integer or out of range",
                 "ADDJOBS", "q", "soon", "JOBS", "a")
    assert_error(c, "ERR wrong number of arguments for 'addjobs' command",
                 "ADDJOBS", "q", 0, "JOBS")
    assert c.call("QLEN", "q") == 0
    assert int(c.info_field("registered_jobs")) == 0


def test_too_many_jobs_refused(c: RawClient) -> None:
    assert_error(c, "ERR ADDJOBS takes at most 10000 jobs",
                 "ADDJOBS", "q", 0, "JOBS", *["b"] * 10_001)
    assert int(c.info_field("registered_jobs")) == 0
    assert len(ids_of(c.call("ADDJOBS", "q", 0, "JOBS", *["b"] * 10_000))) == 10_000


def test_each_job_gets_its_own_error(c: RawClient) -> None:
    reply = c.call("ADDJOBS", "q", 0, "MAXLEN", 2, "JOBS", "a", "b", "c")
    assert isinstance(reply, list) and len(reply) == 3
    assert all(isinstance(item, Status) for item in reply[:2])
    assert reply[2] == Error(b"MAXLEN Queue is already longer than the specified MAXLEN count")
    assert c.call("QLEN", "q") == 2
    # alone, a REPLICATE above the cluster's size is each job's NOREPL
    reply = c.call("ADDJOBS", "q", 0, "REPLICATE", 2, "JOBS", "a", "b")
    assert reply == [Error(b"NOREPL Not enough reachable nodes for the requested "
                           b"replication level")] * 2
    # and the request still counts as one command
    stats = c.call("INFO", "commandstats").decode()
    assert "cmdstat_addjobs:calls=" in stats


@pytest.fixture
def three(make_cluster: Callable[..., list[DisqProcess]]) -> list[DisqProcess]:
    return make_cluster(3)


def registered(n: DisqProcess) -> str:
    with RawClient(n.port) as client:
        return client.info_field("registered_jobs")


def holders(nodes: list[DisqProcess], job_id: bytes) -> int:
    count = 0
    for n in nodes:
        with RawClient(n.port) as client:
            count += client.show(job_id) is not None
    return count


def test_cluster_each_job_replicated_and_keys_known_everywhere(
        three: list[DisqProcess]) -> None:
    a, b, _ = three
    with RawClient(a.port) as ca, RawClient(b.port) as cb:
        keys = [f"k{i}" for i in range(200)]
        pairs = [arg for i, key in enumerate(keys) for arg in (key, f"body{i}")]
        ids = ids_of(ca.call("ADDJOBS", "q", 5000, "REPLICATE", 2, "DEDUP-JOBS", *pairs))
        assert len(set(ids)) == 200
        for job_id in ids[:20]:
            assert holders(three, job_id) == 2
        # another node answers the same IDs for the keys, adding nothing
        again = ids_of(cb.call("ADDJOBS", "q", 5000, "REPLICATE", 2,
                               "DEDUP-JOBS", *pairs[:40]))
        assert again == ids[:20]
        reply = ca.call("ADDJOBS", "q", 5000, "REPLICATE", 4, "JOBS", "x")
        assert reply == [Error(b"NOREPL Not enough reachable nodes for the requested "
                               b"replication level")]
    total = 0
    for n in three:
        with RawClient(n.port) as client:
            total += client.call("QLEN", "q")
    assert total == 200


def test_cluster_client_gone_while_jobs_wait_for_copies(three: list[DisqProcess]) -> None:
    """As for ADDJOB: a job whose client went away before it was replicated is deleted
    (nobody got its ID)."""
    a, b, c = three
    assert c.proc is not None
    c.proc.send_signal(signal.SIGSTOP)  # still reachable for a while: copies wait
    try:
        client = RawClient(a.port)
        client.send("ADDJOBS", "q", 60_000, "REPLICATE", 3, "JOBS", "a", "b", "c")
        wait_for(lambda: registered(a) == "3",
                 message="the jobs to wait for their copies")
        assert client.pending(0.2) == b""  # no reply yet
        client.close()
        wait_for(lambda: registered(a) == "0",
                 message="the jobs of the gone client to be deleted")
    finally:
        c.proc.send_signal(signal.SIGCONT)


def test_appendfsync_always_answered_jobs_survive_kill_9(start_node: Callable[..., DisqProcess]
                                                         ) -> None:
    """The jobs of an ADDJOBS are logged as ADDJOB's are: every ID answered is there
    after kill -9 and a restart on the AOF."""
    always = ("--appendonly", "yes", "--appendfsync", "always")
    node = start_node(*always, name="n")
    with RawClient(node.port) as client:
        ids = ids_of(client.call("ADDJOBS", "q", 0, "DEDUP-JOBS",
                                 *[a for i in range(500) for a in (f"k{i}", f"b{i}")]))
    node.kill()
    node = start_node(*always, name="n")
    with RawClient(node.port) as client:
        for job_id in ids[::50]:
            assert show(client, job_id)["body"].startswith(b"b")  # (active until RETRY)
        assert client.info_field("registered_jobs") == "500"
