"""How jobs end (disq extensions), against real servers: ACKJOB id RESULT blob kept on
the job's holders, WAITJOB on the node of the job and on nodes that do not hold it,
ANY and TIMEOUT, dead letters, RESULT-TTL, and bad input."""

from __future__ import annotations

import base64
import threading
import time
from collections.abc import Callable

import jobutil
import pytest
from jobutil import NULL_BULK, RawClient, assert_error, fake_id
from support import DisqProcess, form_cluster, free_port, wait_for
from test_jobset import holders

shared_disq = jobutil.shared_disq
node = jobutil.node
c = jobutil.c


def watched(c: RawClient) -> int:
    info = c.call("INFO", "results").decode()
    return int(info.split("jobs_watched:")[1].split()[0])


def waitjob_in_thread(node: DisqProcess, *args: object
                      ) -> tuple[threading.Thread, list[object]]:
    """A WAITJOB on its own connection, blocked in a thread: the thread, and the list
    its answer goes to."""
    answers: list[object] = []

    def wait() -> None:
        with RawClient(node.port) as waiter:
            answers.append(waiter.call("WAITJOB", *args))

    waiting = threading.Thread(target=wait)
    waiting.start()
    return waiting, answers


def taken(c: RawClient, queue: str = "q") -> bytes:
    entry = c.call("GETJOB", "NOHANG", "FROM", queue)
    assert entry is not NULL_BULK, f"no job in {queue}"
    return entry[0][1]


# -- one node ------------------------------------------------------------------------------------

def test_a_result_is_kept_and_waitjob_answers_it(c: RawClient) -> None:
    job_id = c.add("q", "work")
    assert taken(c) == job_id
    assert c.call("ACKJOB", job_id, "RESULT", b"42\x00\xff") == 1
    assert c.call("WAITJOB", job_id) == [[job_id, b"acked", b"42\x00\xff"]]
    # the first result stays; a second ACK of the job changes nothing
    assert c.call("ACKJOB", job_id, "result", "other") == 0
    assert c.call("WAITJOB", job_id) == [[job_id, b"acked", b"42\x00\xff"]]


def test_a_plain_ack_ends_without_a_result(node: DisqProcess, c: RawClient) -> None:
    job_id = c.add("q", "work")
    waiting, answers = waitjob_in_thread(node, "TIMEOUT", 10_000, job_id)
    wait_for(lambda: watched(c) == 1, 5)
    assert c.call("ACKJOB", job_id) == 1
    waiting.join(10)
    assert answers == [[[job_id, b"acked", NULL_BULK]]]
    assert c.call("WAITJOB", job_id) == [[job_id, b"acked", NULL_BULK]]  # kept for it
    # A plain ACK nobody waited for keeps no record: once its job is gone, nothing
    # says how it ended.
    other = c.add("q", "work")
    assert c.call("ACKJOB", other) == 1
    assert c.call("WAITJOB", other) == [[other, b"unknown", NULL_BULK]]


def test_waitjob_states_at_the_timeout_and_unknown_jobs(c: RawClient) -> None:
    queued = c.add("q", "a")
    active = c.add("q", "b", "DELAY", 60)
    unknown = fake_id()
    start = time.monotonic()
    assert c.call("WAITJOB", "TIMEOUT", 200, queued, active) == [
        [queued, b"queued", NULL_BULK], [active, b"active", NULL_BULK]]
    assert time.monotonic() - start >= 0.19
    # a job nobody knows has ended as far as WAITJOB goes: no wait for it
    assert c.call("WAITJOB", unknown) == [[unknown, b"unknown", NULL_BULK]]
    # ANY waits for a job that ends: an unknown one is not one
    assert c.call("WAITJOB", "TIMEOUT", 200, "ANY", queued, unknown) == [
        [queued, b"queued", NULL_BULK], [unknown, b"unknown", NULL_BULK]]


def test_a_blocked_waitjob_is_woken_by_the_ack(node: DisqProcess, c: RawClient) -> None:
    first = c.add("q", "one")
    second = c.add("q", "two")
    both, all_ended = waitjob_in_thread(node, first, second)
    any_, one_ended = waitjob_in_thread(node, "ANY", first, second)
    wait_for(lambda: watched(c) == 2, 5)  # both waiters watch both jobs
    assert not all_ended and not one_ended
    assert c.call("ACKJOB", second, "RESULT", "2") == 1
    any_.join(5)
    assert one_ended == [[[first, b"queued", NULL_BULK], [second, b"acked", b"2"]]]
    assert both.is_alive() and not all_ended
    assert c.call("ACKJOB", first, "RESULT", "1") == 1
    both.join(5)
    assert all_ended == [[[first, b"acked", b"1"], [second, b"acked", b"2"]]]


def test_a_dead_letter_ends_the_wait_with_its_reason(c: RawClient) -> None:
    job_id = c.add("q", "fails", "MAXDELIVERIES", 1)
    assert taken(c) == job_id
    assert c.call("NACK", job_id) == 1
    assert c.call("WAITJOB", job_id) == [[job_id, b"dead", b"max-deliveries"]]


def test_result_ttl_zero_keeps_no_result(c: RawClient) -> None:
    assert c.call("QPOLICY", "nores", "SET", "RESULT-TTL", 0) == b"OK"
    assert b"result-ttl" in c.call("QPOLICY", "nores", "GET")
    job_id = c.add("nores", "x")
    assert c.call("ACKJOB", job_id, "RESULT", "r") == 1
    assert c.call("WAITJOB", job_id) == [[job_id, b"unknown", NULL_BULK]]  # gone with it
    c.call("QPOLICY", "nores", "DEL")


@pytest.mark.parametrize(("args", "error"), [
    (("ACKJOB", "{id}", "RESULT"), "BADID Invalid Job ID format."),
    (("ACKJOB", "{id}", "{id}", "RESULT", "x"), "BADID Invalid Job ID format."),
    (("WAITJOB",), "ERR wrong number of arguments for 'waitjob' command"),
    (("WAITJOB", "TIMEOUT", 10), "ERR WAITJOB needs at least one job ID"),
    (("WAITJOB", "TIMEOUT", -1, "{id}"), "ERR timeout is negative"),
    (("WAITJOB", "TIMEOUT", "x", "{id}"), "ERR timeout is not an integer or out of range"),
    (("WAITJOB", "nope"), "BADID Invalid Job ID format."),
    (("QPOLICY", "q", "SET", "RESULT-TTL", -1),
     "ERR RESULT-TTL must be between 0 and 2592000 seconds"),
])
def test_bad_input(c: RawClient, args: tuple, error: str) -> None:
    job_id = c.add("q", "kept")
    assert_error(c, error, *[job_id if a == "{id}" else a for a in args])
    assert c.call("QLEN", "q") == 1  # nothing acked


def test_a_result_over_job_max_body_is_refused(c: RawClient) -> None:
    job_id = c.add("q", "kept")
    c.call("CONFIG", "SET", "job-max-body", 1000)
    try:
        assert_error(c, "ERR result of 1001 bytes is over job-max-body (1000 bytes)",
                     "ACKJOB", job_id, "RESULT", b"x" * 1001)
    finally:
        c.call("CONFIG", "SET", "job-max-body", 100 * 1024 * 1024)
    assert c.call("QLEN", "q") == 1


def test_results_count_in_used_memory(c: RawClient) -> None:
    before = int(c.info_field("used_memory"))
    job_id = c.add("q", "x")
    assert c.call("ACKJOB", job_id, "RESULT", b"r" * 100_000) == 1
    wait_for(lambda: c.call("SHOW", job_id) is NULL_BULK, 5)  # the job is gone...
    assert int(c.info_field("used_memory")) >= before + 100_000  # ...its result is not
    assert c.call("WAITJOB", job_id)[0][2] == b"r" * 100_000


# -- a cluster -----------------------------------------------------------------------------------

def test_waitjob_on_a_node_that_does_not_hold_the_job(
        start_node: Callable[..., DisqProcess]) -> None:
    nodes = form_cluster([start_node("--cluster-node-timeout", "1000") for _ in range(3)])
    with RawClient(nodes[0].port) as c:
        job_id = c.add("q", "work", "REPLICATE", 2, "RETRY", 60)
    owners = holders(nodes, job_id)
    [elsewhere] = [n for n in nodes if n not in owners]
    waiting, answers = waitjob_in_thread(elsewhere, "TIMEOUT", 20_000, job_id)
    with RawClient(elsewhere.port) as c:  # asked, not ended: it still waits
        [[_, state, data]] = c.call("WAITJOB", "TIMEOUT", 300, job_id)
        assert (state, data) in ((b"queued", NULL_BULK), (b"active", NULL_BULK))
    assert waiting.is_alive()
    with RawClient(owners[-1].port) as c:
        got = c.call("GETJOB", "FROM", "q")
        assert got[0][1] == job_id
        assert c.call("ACKJOB", job_id, "RESULT", "done") == 1
    waiting.join(10)
    assert answers == [[[job_id, b"acked", b"done"]]]
    # the result is on every holder, after the ACK's garbage collection too
    for n in owners:
        with RawClient(n.port) as c:
            wait_for(lambda c=c: c.call("SHOW", job_id) is NULL_BULK, 10)
            assert c.call("WAITJOB", job_id) == [[job_id, b"acked", b"done"]]
    # and still readable from anywhere once one holder is killed
    owners[-1].kill()
    with RawClient(elsewhere.port) as c:
        assert c.call("WAITJOB", "TIMEOUT", 5000, job_id) == [[job_id, b"acked", b"done"]]


# -- over HTTP ------------------------------------------------------------------------------------

def test_results_over_http(start_node: Callable[..., DisqProcess]) -> None:
    from test_http import Http

    port = free_port()
    node = start_node("--http-port", str(port))
    http = Http(port)
    with RawClient(node.port) as c:
        text_job, binary_job, waited = (c.add("q", body).decode() for body in "abc")
    assert http.post(f"/api/v1/jobs/{text_job}/ack", {"result": "fine"}) == (200, {"acked": 1})
    assert http.get(f"/api/v1/jobs/{text_job}/result") == (200, {
        "id": text_job, "state": "acked", "result": "fine"})
    assert http.post(f"/api/v1/jobs/{binary_job}/ack",
                     {"result_base64": base64.b64encode(b"\xff").decode()}) == (200, {"acked": 1})
    status, end = http.get(f"/api/v1/jobs/{binary_job}/result")
    assert (status, end["result"], end["result_base64"]) == (200, None, "/w==")
    # not ended: its state now, or once it ends within wait_ms
    assert http.get(f"/api/v1/jobs/{waited}/result")[1]["state"] == "queued"
    answers: list[object] = []
    waiting = threading.Thread(target=lambda: answers.append(
        http.get(f"/api/v1/jobs/{waited}/result?wait_ms=20000")))
    waiting.start()
    with RawClient(node.port) as c:
        wait_for(lambda: watched(c) == 1, 5)
        assert c.call("ACKJOB", waited, "RESULT", "late") == 1
    waiting.join(10)
    assert answers == [(200, {"id": waited, "state": "acked", "result": "late"})]
    status, problem = http.post(f"/api/v1/jobs/{waited}/ack", {"result": 1})
    assert status == 400 and "'result' must be a string" in problem["detail"]
    status, problem = http.post(f"/api/v1/jobs/{waited}/ack", {"other": 1})
    assert status == 400


def test_a_user_of_one_queue_reads_only_its_queue_s_results(
        start_node: Callable[..., DisqProcess]) -> None:
    node = start_node()
    with RawClient(node.port) as admin:
        mine, theirs = admin.add("mine", "a"), admin.add("theirs", "b")
        assert admin.call("ACKJOB", mine, "RESULT", "1") == 1
        assert admin.call("ACKJOB", theirs, "RESULT", "2") == 1
        admin.call("ACL", "SETUSER", "alice", "on", ">pw", "~mine", "+@read", "+@consume")
    with RawClient(node.port) as alice:
        assert alice.call("AUTH", "alice", "pw") == b"OK"
        assert alice.call("WAITJOB", mine, theirs) == [
            [mine, b"acked", b"1"], [theirs, b"unknown", NULL_BULK]]


def test_results_give_way_to_jobs_under_maxmemory(
        start_node: Callable[..., DisqProcess]) -> None:
    """Results count in the memory marks; above 95% the oldest go, before any job and
    before an ADDJOB is refused."""
    node = start_node("--maxmemory", "4mb", "--maxmemory-policy", "noeviction")
    with RawClient(node.port) as c:
        first = c.add("q", "x")
        assert c.call("ACKJOB", first, "RESULT", b"r" * 100_000) == 1
        for _ in range(60):  # 6 MB of results in all
            job_id = c.add("q", "x")
            assert c.call("ACKJOB", job_id, "RESULT", b"r" * 100_000) == 1
        info = c.call("INFO", "results").decode()
        assert "results_evicted:0" not in info
        assert c.call("WAITJOB", first) == [[first, b"unknown", NULL_BULK]]  # the oldest
        assert c.call("WAITJOB", job_id)[0][1] == b"acked"  # the newest stays
        assert int(c.info_field("used_memory")) <= 4 * 1024 * 1024
        kept = c.add("q", b"y" * 100_000)  # a job still fits: results make room
        assert c.call("SHOW", kept) is not NULL_BULK


def test_ten_thousand_jobs_waited_for_on_another_node(
        start_node: Callable[..., DisqProcess]) -> None:
    """10,000 jobs on three nodes (REPLICATE 2, added on the first), waited for on the
    third in WAITJOBs of 100 IDs each, taken and acknowledged with a RESULT by consumers
    on the first two: every waiter answered, every job with its own result."""
    nodes = form_cluster([start_node("--cluster-node-timeout", "3000") for _ in range(3)])
    producer = nodes[0].client(socket_timeout=60)
    pipe = producer.pipeline(transaction=False)
    for i in range(10_000):
        pipe.execute_command("ADDJOB", "bulk", b"%d" % i, 0, "REPLICATE", 2, "RETRY", 300)
    ids: list[bytes] = pipe.execute()
    answers: dict[int, object] = {}

    def wait(batch: int) -> None:
        waiter = nodes[2].client(socket_timeout=120)
        try:
            answers[batch] = waiter.execute_command(
                "WAITJOB", "TIMEOUT", 100_000, *ids[batch * 100:(batch + 1) * 100])
        finally:
            waiter.close()

    waiters = [threading.Thread(target=wait, args=(b,)) for b in range(100)]
    for thread in waiters:
        thread.start()

    def consume(node: DisqProcess) -> None:
        client = node.client(socket_timeout=60)
        try:
            while True:
                got = client.execute_command("GETJOB", "TIMEOUT", 2000, "COUNT", 100,
                                             "FROM", "bulk")
                if not got:
                    return
                acks = client.pipeline(transaction=False)
                for _, job_id, body in got:
                    acks.execute_command("ACKJOB", job_id, "RESULT", b"r" + body)
                acks.execute()
        finally:
            client.close()

    consumers = [threading.Thread(target=consume, args=(n,)) for n in nodes[:2]]
    for thread in consumers:
        thread.start()
    for thread in consumers + waiters:
        thread.join(180)
    producer.close()
    assert len(answers) == 100, f"{100 - len(answers)} WAITJOBs not answered"
    for batch, answer in answers.items():
        for i, (job_id, state, data) in enumerate(answer):  # type: ignore[attr-defined]
            n = batch * 100 + i
            assert (job_id, state, data) == (ids[n], b"acked", b"r%d" % n)


def test_a_result_outlives_all_its_holders_but_one(
        start_node: Callable[..., DisqProcess]) -> None:
    """REPLICATE 3 on four nodes, acknowledged with a RESULT; two of its three holders
    killed (kill -9): the node that never held it reads the result from the last one."""
    nodes = form_cluster([start_node("--cluster-node-timeout", "1000") for _ in range(4)])
    with RawClient(nodes[0].port) as c:
        job_id = c.add("q", "work", "REPLICATE", 3, "RETRY", 60)
    owners = holders(nodes, job_id)
    [elsewhere] = [n for n in nodes if n not in owners]
    with RawClient(owners[0].port) as c:
        assert c.call("ACKJOB", job_id, "RESULT", "kept") == 1
    for n in owners:  # the result on every holder before any dies
        with RawClient(n.port) as c:
            wait_for(lambda c=c: c.call("WAITJOB", "TIMEOUT", 100, job_id)
                     == [[job_id, b"acked", b"kept"]], 10)
    owners[0].kill()
    owners[1].kill()
    with RawClient(elsewhere.port) as c:
        assert c.call("WAITJOB", "TIMEOUT", 5000, job_id) == [[job_id, b"acked", b"kept"]]
