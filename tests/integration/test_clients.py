"""Third-party Disque clients used as a new user would, unchanged, against a real node.

pydisque (PyPI `pydisque`, the client most Python Disque users have) drives every
command it wraps, through its own API and its own reply handling; redis-py's
`execute_command` (redis-py 8 negotiates RESP3 with `HELLO 3` on connect) covers the
main commands in both protocol versions, blocking GETJOB included.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Iterator

import jobutil
import pytest
import redis
from pydisque.client import Client as PyDisque
from support import DisqProcess, wait_for

ID_RE = re.compile(rb"^D-[0-9a-f]{8}-[A-Za-z0-9+/]{24}-[0-9a-f]{4}$")


shared_disq = jobutil.shared_disq  # one node for the module


@pytest.fixture
def node(shared_disq: DisqProcess) -> Iterator[DisqProcess]:
    """The module's node, emptied before each test."""
    assert shared_disq.alive(), shared_disq.log()
    admin = shared_disq.client()
    wait_for(lambda: admin.info("clients")["blocked_clients"] == 0,
             message="earlier blocked clients to go")
    assert admin.execute_command("DEBUG", "FLUSHALL") in (b"OK", True)
    admin.close()
    yield shared_disq


@pytest.fixture
def pyd(node: DisqProcess) -> Iterator[PyDisque]:
    client = PyDisque([f"127.0.0.1:{node.port}"])
    client.connect()
    yield client
    client.get_connection().close()


def blocked_clients(node: DisqProcess) -> int:
    with node.client() as admin:
        return admin.info("clients")["blocked_clients"]


def in_thread(fn) -> tuple[threading.Thread, dict]:
    """Run `fn` in a thread; its result (or exception) lands in the returned dict."""
    out: dict = {}

    def run() -> None:
        try:
            out["value"] = fn()
        except Exception as exc:  # reported by the test
            out["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, out


# -- pydisque ------------------------------------------------------------------------


def test_pydisque_connect_runs_hello(node: DisqProcess) -> None:
    client = PyDisque([f"127.0.0.1:{node.port}"])
    client.connect()  # sends HELLO and keeps the node's ID from it
    myid = client.execute_command("CLUSTER", "MYID")
    assert client.connected_node.port == node.port
    assert client.connected_node.node_id == myid
    version, hello_id, *nodes = client.hello()
    assert (version, hello_id) == (1, myid)
    assert nodes == [[myid, b"127.0.0.1", str(node.port).encode(), b"1"]]
    client.get_connection().close()
    # (A dead address in the list is skipped too, but only after redis-py's own
    # connection retries with backoff, several seconds: not worth the suite's time.)


def test_pydisque_reconnects_after_its_connection_is_killed(pyd: PyDisque,
                                                            node: DisqProcess) -> None:
    pyd.add_job("rq", "x")
    with node.client() as admin:
        assert admin.execute_command("CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes") >= 1
    assert pyd.qlen("rq") == 1


def test_pydisque_add_job_options(pyd: PyDisque) -> None:
    job_id = pyd.add_job("q", "payload", timeout=100, replicate=1, retry=5, ttl=60,
                         maxlen=10)
    assert ID_RE.match(job_id)
    info = pyd.show(job_id, return_dict=True)
    assert info[b"queue"] == b"q" and info[b"body"] == b"payload"
    assert info[b"state"] == b"queued"
    assert (info[b"repl"], info[b"retry"], info[b"delay"]) == (1, 5, 0)
    assert 58 <= info[b"ttl"] <= 60

    async_id = pyd.add_job("q", "async", asynchronous=True)
    assert ID_RE.match(async_id) and pyd.qlen("q") == 2

    at_most_once = pyd.add_job("q", "once", replicate=1, retry=0)
    assert pyd.show(at_most_once, return_dict=True)[b"retry"] == 0

    with pytest.raises(redis.exceptions.ResponseError, match="^MAXLEN "):
        pyd.add_job("q", "too many", maxlen=3)
    with pytest.raises(redis.exceptions.ResponseError, match="^NOREPL "):
        pyd.add_job("q", "two copies", replicate=2)

    delayed = pyd.add_job("later", "d", delay=1, replicate=1, retry=0)
    info = pyd.show(delayed, return_dict=True)
    assert info[b"state"] == b"active" and info[b"delay"] == 1
    assert pyd.qlen("later") == 0
    wait_for(lambda: pyd.qlen("later") == 1, timeout=5, message="delayed job queued")
    assert pyd.get_job(["later"], nohang=True) == [(b"later", delayed, b"d")]


def test_pydisque_get_job(pyd: PyDisque) -> None:
    ids = [pyd.add_job("g1", f"job{i}") for i in range(3)]
    other = pyd.add_job("g2", "other")
    # pydisque labels the tuple (job_id, queue_name, job) but passes the server's
    # [queue, id, body] through in order.
    assert pyd.get_job(["g1"], count=2) == [(b"g1", ids[0], b"job0"), (b"g1", ids[1], b"job1")]
    assert pyd.get_job(["g2", "g1"], count=5, timeout=100) == [
        (b"g2", other, b"other"), (b"g1", ids[2], b"job2")]
    assert pyd.get_job(["g1", "g2"], nohang=True) == []

    start = time.monotonic()
    assert pyd.get_job(["g1"], timeout=200) == []
    assert time.monotonic() - start >= 0.15

    pyd.nack_job(ids[0])
    assert pyd.get_job(["g1"], withcounters=True) == [(b"g1", ids[0], b"job0", 1, 0)]


def test_pydisque_blocking_get_job_is_served_by_add_job(pyd: PyDisque,
                                                        node: DisqProcess) -> None:
    consumer = PyDisque([f"127.0.0.1:{node.port}"])
    consumer.connect()
    thread, out = in_thread(lambda: consumer.get_job(["bq"], timeout=10_000))
    wait_for(lambda: blocked_clients(node) == 1, message="consumer blocked in GETJOB")
    job_id = pyd.add_job("bq", "wake up")
    thread.join(10)
    assert out == {"value": [(b"bq", job_id, b"wake up")]}
    consumer.get_connection().close()


def test_pydisque_ack_nack_working_fastack_deljob(pyd: PyDisque) -> None:
    job_id = pyd.add_job("w", "work", retry=30)
    [(_, got, _)] = pyd.get_job(["w"])
    assert got == job_id and pyd.qlen("w") == 0
    assert pyd.working(job_id) == 30
    assert pyd.nack_job(job_id) is None  # pydisque drops the count
    assert pyd.qlen("w") == 1
    assert pyd.show(job_id, return_dict=True)[b"nacks"] == 1
    pyd.ack_job(job_id)
    assert pyd.show(job_id) is None
    assert pyd.qlen("w") == 0

    fast = pyd.add_job("w", "fast")
    pyd.fast_ack(fast)
    assert pyd.show(fast) is None

    gone = pyd.add_job("w", "delete me")
    assert pyd.del_job(gone) == 1
    assert pyd.del_job(gone) == 0
    assert pyd.show(gone) is None and pyd.qlen("w") == 0

    with pytest.raises(redis.exceptions.ResponseError, match="^NOJOB "):
        pyd.working(gone)
    with pytest.raises(redis.exceptions.ResponseError, match="^BADID "):
        pyd.ack_job("not-a-job-id")


def test_pydisque_enqueue_dequeue(pyd: PyDisque) -> None:
    job_id = pyd.add_job("e", "body")
    assert pyd.dequeue(job_id) == 1
    assert pyd.show(job_id, return_dict=True)[b"state"] == b"active"
    assert pyd.qlen("e") == 0 and pyd.dequeue(job_id) == 0
    assert pyd.enqueue(job_id) == 1
    assert pyd.enqueue(job_id) == 0  # already queued
    assert pyd.qlen("e") == 1
    assert pyd.show(job_id, return_dict=True)[b"state"] == b"queued"


def test_pydisque_queue_inspection(pyd: PyDisque) -> None:
    ids = [pyd.add_job("insp", f"b{i}") for i in range(3)]
    pyd.add_job("small", "x")
    assert pyd.qlen("insp") == 3 and pyd.qlen("nosuchqueue") == 0
    assert pyd.qpeek("insp", 2) == [[b"insp", ids[0], b"b0"], [b"insp", ids[1], b"b1"]]
    assert pyd.qpeek("insp", -1) == [[b"insp", ids[2], b"b2"]]
    assert pyd.qpeek("nosuchqueue", 1) == []

    stat = pyd.qstat("insp", return_dict=True)
    assert stat[b"name"] == b"insp" and stat[b"len"] == 3
    assert stat[b"jobs-in"] == 3 and stat[b"jobs-out"] == 0
    assert stat[b"pause"] == b"none" and stat[b"import-from"] == []
    assert pyd.qstat("nosuchqueue") is None

    cursor, seen = 0, set()
    while True:
        cursor, names = pyd.qscan(cursor, count=1)
        seen.update(names)
        if cursor == b"0":
            break
    assert seen == {b"insp", b"small"}
    assert pyd.qscan(busyloop=True, minlen=2) == [b"0", [b"insp"]]

    cursor, jobs = pyd.jscan(busyloop=True, queue="insp")
    assert cursor == b"0" and sorted(jobs) == sorted(ids)
    pyd.get_job(["insp"])
    assert pyd.jscan(busyloop=True, state=["active"]) == [b"0", [ids[0]]]
    [entry] = pyd.jscan(busyloop=True, state=["active"], reply="all")[1]
    shown = dict(zip(entry[::2], entry[1::2], strict=True))
    assert shown[b"id"] == ids[0] and shown[b"state"] == b"active" and shown[b"body"] == b"b0"


def test_pydisque_pause(pyd: PyDisque) -> None:
    assert pyd.pause("p", kw_in=True) == b"in"
    assert pyd.pause("p", kw_state=True) == b"in"
    with pytest.raises(redis.exceptions.ResponseError, match="^PAUSED "):
        pyd.add_job("p", "refused")
    assert pyd.pause("p", kw_none=True) == b"none"
    job_id = pyd.add_job("p", "accepted")
    assert pyd.pause("p", kw_out=True) == b"out"
    assert pyd.get_job(["p"], nohang=True) == [] and pyd.qlen("p") == 1
    assert pyd.qstat("p", return_dict=True)[b"pause"] == b"out"
    assert pyd.pause("p", kw_all=True, kw_bcast=True) == b"all"
    assert pyd.pause("p", kw_none=True) == b"none"
    assert pyd.get_job(["p"], nohang=True) == [(b"p", job_id, b"accepted")]


def test_pydisque_info(pyd: PyDisque) -> None:
    pyd.add_job("i", "x")
    info = pyd.info()  # redis-py parses the INFO text into a dict
    assert info["disque_version"] == "1.0-rc1"
    assert info["registered_jobs"] == 1 and info["registered_queues"] == 1
    assert info["tcp_port"] == pyd.connected_node.port


# -- redis-py execute_command ----------------------------------------------------------


@pytest.mark.parametrize("protocol", [3, 2])
def test_redis_py_execute_command(node: DisqProcess, protocol: int) -> None:
    r = node.client(protocol=protocol)
    assert r.ping() is True
    conn = r.connection_pool.get_connection()
    assert conn.protocol == protocol  # redis-py 8 defaults to 3: HELLO 3 was accepted
    r.connection_pool.release(conn)

    myid = r.execute_command("CLUSTER", "MYID")
    assert r.execute_command("HELLO") == [
        1, myid, [myid, b"127.0.0.1", str(node.port).encode(), b"1"]]

    job_id = r.execute_command("ADDJOB", "rq", "hello", 0, "RETRY", 7)
    assert ID_RE.match(job_id)
    assert r.execute_command("QLEN", "rq") == 1
    assert r.execute_command("QPEEK", "rq", 1) == [[b"rq", job_id, b"hello"]]
    show = r.execute_command("SHOW", job_id)
    assert dict(zip(show[::2], show[1::2], strict=True))[b"state"] == b"queued"
    assert r.execute_command("GETJOB", "COUNT", 1, "WITHCOUNTERS", "FROM", "rq") == [
        [b"rq", job_id, b"hello", b"nacks", 0, b"additional-deliveries", 0]]
    assert r.execute_command("WORKING", job_id) == 7
    assert r.execute_command("NACK", job_id) == 1
    assert r.execute_command("GETJOB", "NOHANG", "FROM", "rq") == [[b"rq", job_id, b"hello"]]
    assert r.execute_command("ACKJOB", job_id) == 1
    assert r.execute_command("SHOW", job_id) is None
    assert r.execute_command("GETJOB", "NOHANG", "FROM", "rq") is None
    assert r.execute_command("QSTAT", "nosuchqueue") is None
    assert r.execute_command("QSCAN", "BUSYLOOP") == [b"0", [b"rq"]]
    assert r.execute_command("JSCAN", "BUSYLOOP") == [b"0", []]

    start = time.monotonic()
    assert r.execute_command("GETJOB", "TIMEOUT", 200, "FROM", "rq") is None
    assert time.monotonic() - start >= 0.15

    with pytest.raises(redis.exceptions.ResponseError,
                       match="^COUNT must be a number greater than zero$"):
        r.execute_command("GETJOB", "COUNT", 0, "FROM", "rq")
    with pytest.raises(redis.exceptions.ResponseError, match="^BADID Invalid Job ID format.$"):
        r.execute_command("SHOW", "nope")

    # Redis commands redis-py parses itself, whose RESP3 shapes differ from RESP2.
    assert r.info()["disque_version"] == "1.0-rc1"
    assert r.config_get("maxmemory") == {"maxmemory": "1073741824"}
    assert r.command()["getjob"]["arity"] == -2
    assert r.client_setname("me") is True and r.client_getname() in ("me", b"me")
    r.close()


@pytest.mark.parametrize("protocol", [3, 2])
def test_redis_py_blocking_getjob_served_by_addjob(node: DisqProcess, protocol: int) -> None:
    consumer = node.client(protocol=protocol)
    producer = node.client(protocol=protocol)
    thread, out = in_thread(lambda: consumer.execute_command(
        "GETJOB", "TIMEOUT", 10_000, "FROM", "empty", "bq"))
    wait_for(lambda: blocked_clients(node) == 1, message="consumer blocked in GETJOB")
    job_id = producer.execute_command("ADDJOB", "bq", "wake up", 0)
    thread.join(10)
    assert out == {"value": [[b"bq", job_id, b"wake up"]]}
    assert producer.execute_command("QLEN", "bq") == 0
    consumer.close()
    producer.close()


def test_redis_py_client_pause(node: DisqProcess) -> None:
    """CLIENT PAUSE (redis-py's and ryansb's disq client's `client_pause`): every
    client's next request, the caller's own included, waits for the end of the pause."""
    pauser = node.client()
    other = node.client()
    assert other.ping() is True
    start = time.monotonic()
    assert pauser.client_pause(200) is True
    assert other.execute_command("QLEN", "q") == 0
    assert time.monotonic() - start >= 0.19
    start = time.monotonic()
    pipe = pauser.pipeline(transaction=False)
    pipe.client_pause(150).execute_command("QLEN", "q")
    assert pipe.execute() == [True, 0]
    assert time.monotonic() - start >= 0.14
    with pytest.raises(redis.exceptions.ResponseError,
                       match="^timeout is not an integer or out of range$"):
        pauser.execute_command("CLIENT", "PAUSE", "soon")
    with pytest.raises(redis.exceptions.ResponseError, match="^timeout is negative$"):
        pauser.execute_command("CLIENT", "PAUSE", -1)
    pauser.close()
    other.close()
