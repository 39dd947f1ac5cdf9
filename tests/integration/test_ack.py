"""ACKJOB FASTACK NACK ENQUEUE DEQUEUE DELJOB WORKING SHOW on a single node."""

from __future__ import annotations

import jobutil
import pytest
from jobutil import NULL_ARRAY, NULL_BULK, Error, RawClient, assert_error, fake_id
from support import wait_for

shared_disq = jobutil.shared_disq
node = jobutil.node
c = jobutil.c

BADID = "BADID Invalid Job ID format."
MULTI_ID_COMMANDS = ["ACKJOB", "FASTACK", "NACK", "ENQUEUE", "DEQUEUE", "DELJOB"]


def bad_ids(good: bytes) -> list[bytes]:
    """Malformed variants of a valid ID: length, and each checked character."""
    return [
        good[:39], good + b"x", b"", b"D", good[:20],
        b"E" + good[1:], good[:1] + b"x" + good[2:], good[:10] + b"x" + good[11:],
        good[:35] + b"x" + good[36:], b"d" + good[1:],
    ]


def registered(c: RawClient) -> int:
    return int(c.info_field("registered_jobs"))


# -- ACKJOB ------------------------------------------------------------------------------

def test_ack_queued_job(c: RawClient) -> None:
    job_id = c.add("q", "x")
    assert c.call("ACKJOB", job_id) == 1
    assert c.show(job_id) is None
    assert c.call("QLEN", "q") == 0
    assert c.call("GETJOB", "NOHANG", "FROM", "q") is NULL_ARRAY
    assert registered(c) == 0


def test_ack_fetched_job(c: RawClient) -> None:
    job_id = c.add("q", "x")
    c.call("GETJOB", "FROM", "q")
    assert c.call("ACKJOB", job_id) == 1
    assert c.show(job_id) is None
    assert c.call("ACKJOB", job_id) == 0


def test_ack_delayed_job(c: RawClient) -> None:
    job_id = c.add("q", "x", "DELAY", 1)
    assert c.call("ACKJOB", job_id) == 1
    assert c.show(job_id) is None
    assert registered(c) == 0


def test_ack_counts_known_not_acked(c: RawClient) -> None:
    a, b = c.add("q", "a"), c.add("q", "b")
    unknown = fake_id()
    assert c.call("ACKJOB", a, unknown, b) == 2
    assert c.call("ACKJOB", a, b, unknown) == 0
    assert c.call("QLEN", "q") == 0


def test_ack_same_id_twice_in_one_call(c: RawClient) -> None:
    job_id = c.add("q", "x")
    assert c.call("ACKJOB", job_id, job_id) == 1


def test_ack_unknown_creates_nothing_on_single_node(c: RawClient) -> None:
    for ttl in ("05a1", "05a0", "0001"):
        assert c.call("ACKJOB", fake_id(ttl_hex=ttl)) == 0
    assert registered(c) == 0
    assert c.call("JSCAN", "BUSYLOOP") == [b"0", []]


def test_ack_id_with_odd_characters_is_well_formed(c: RawClient) -> None:
    # validation only looks at the length and the separators
    weird = b"D-zzzzzzzz-!!!!!!!!!!!!!!!!!!!!!!!!-zzzz"
    assert len(weird) == 40
    assert c.call("ACKJOB", weird) == 0
    assert c.show(weird) is None


@pytest.mark.parametrize("command", MULTI_ID_COMMANDS)
def test_no_ids_replies_zero(c: RawClient, command: str) -> None:
    c.add("q", "x")
    assert c.call(command) == 0
    assert c.call("QLEN", "q") == 1


@pytest.mark.parametrize("command", MULTI_ID_COMMANDS)
def test_bad_id_rejects_whole_call(c: RawClient, command: str) -> None:
    queued = c.add("q", "queued")
    active = c.add("q", "active", "RETRY", 30)
    c.call("DEQUEUE", active)
    for bad in bad_ids(queued):
        assert_error(c, BADID, command, queued, active, bad)
        assert_error(c, BADID, command, bad, queued, active)
    assert c.show(queued)["state"] == b"queued"
    assert c.show(active)["state"] == b"active"
    assert c.show(queued)["nacks"] == 0
    assert c.call("QLEN", "q") == 1


@pytest.mark.parametrize("command", ["SHOW", "WORKING"])
def test_bad_id_single_id_commands(c: RawClient, command: str) -> None:
    good = c.add("q", "x")
    for bad in bad_ids(good):
        assert_error(c, BADID, command, bad)
    assert c.show(good)["state"] == b"queued"


# -- FASTACK -----------------------------------------------------------------------------

def test_fastack(c: RawClient) -> None:
    queued, fetched = c.add("q", "a"), c.add("q", "b")
    c.call("GETJOB", "FROM", "q")  # takes "a"
    delayed = c.add("q", "c", "DELAY", 10)
    assert c.call("FASTACK", queued, fetched, delayed, fake_id()) == 3
    assert all(c.show(i) is None for i in (queued, fetched, delayed))
    assert c.call("QLEN", "q") == 0
    assert c.call("FASTACK", queued) == 0
    assert registered(c) == 0


def test_fastack_duplicates(c: RawClient) -> None:
    job_id = c.add("q", "a")
    assert c.call("FASTACK", job_id, job_id) == 1


# -- NACK / ENQUEUE ------------------------------------------------------------------------

def test_nack_requeues_and_counts(c: RawClient) -> None:
    job_id = c.add("q", "x")
    c.call("GETJOB", "FROM", "q")
    assert c.call("NACK", job_id) == 1
    job = c.show(job_id)
    assert job["state"] == b"queued"
    assert (job["nacks"], job["additional-deliveries"]) == (1, 0)
    assert c.call("QLEN", "q") == 1
    got = c.call("GETJOB", "WITHCOUNTERS", "FROM", "q")
    assert got == [[b"q", job_id, b"x", b"nacks", 1, b"additional-deliveries", 0]]
    assert c.call("NACK", job_id) == 1
    assert c.show(job_id)["nacks"] == 2


def test_nack_only_touches_active_jobs(c: RawClient) -> None:
    queued = c.add("q", "x")
    assert c.call("NACK", queued) == 0  # already queued
    assert c.call("NACK", fake_id()) == 0
    assert c.show(queued)["nacks"] == 0


def test_nack_several(c: RawClient) -> None:
    ids = [c.add("q", str(i)) for i in range(3)]
    c.call("GETJOB", "COUNT", 3, "FROM", "q")
    assert c.call("NACK", *ids, fake_id()) == 3
    assert c.call("QLEN", "q") == 3
    # requeued in creation order
    assert [e[1] for e in c.call("QPEEK", "q", 10)] == ids


def test_nack_keeps_at_most_once(c: RawClient) -> None:
    job_id = c.add("q", "x", "RETRY", 0)
    c.call("GETJOB", "FROM", "q")
    assert c.call("NACK", job_id) == 0
    assert c.call("ENQUEUE", job_id) == 0
    assert c.show(job_id)["state"] == b"active"
    assert c.call("QLEN", "q") == 0


def test_nack_delayed_job_queues_it(c: RawClient) -> None:
    job_id = c.add("q", "x", "DELAY", 30)
    assert c.call("NACK", job_id) == 1
    job = c.show(job_id)
    assert job["state"] == b"queued" and job["nacks"] == 1


def test_enqueue_counts_additional_delivery(c: RawClient) -> None:
    job_id = c.add("q", "x")
    c.call("GETJOB", "FROM", "q")
    assert c.call("ENQUEUE", job_id) == 1
    job = c.show(job_id)
    assert job["state"] == b"queued"
    assert (job["nacks"], job["additional-deliveries"]) == (0, 1)
    assert c.call("ENQUEUE", job_id) == 0  # already queued
    c.call("GETJOB", "FROM", "q")
    assert c.call("ENQUEUE", job_id, fake_id()) == 1
    assert c.show(job_id)["additional-deliveries"] == 2


def test_enqueue_delayed_job_first_queueing_is_not_a_redelivery(c: RawClient) -> None:
    job_id = c.add("q", "x", "DELAY", 30)
    assert c.call("QLEN", "q") == 0
    assert c.call("ENQUEUE", job_id) == 1
    job = c.show(job_id)
    assert job["state"] == b"queued"
    assert job["additional-deliveries"] == 0
    assert c.call("GETJOB", "FROM", "q")[0][1] == job_id


def test_enqueue_at_most_once_delayed_not_yet_delivered(c: RawClient) -> None:
    job_id = c.add("q", "x", "DELAY", 30, "RETRY", 0)
    assert c.call("ENQUEUE", job_id) == 1
    c.call("DEQUEUE", job_id)
    # queued once with RETRY 0: it will never be queued again
    assert c.call("ENQUEUE", job_id) == 0
    assert c.show(job_id)["state"] == b"active"


def test_enqueue_after_dequeue(c: RawClient) -> None:
    job_id = c.add("q", "x")
    assert c.call("DEQUEUE", job_id) == 1
    assert c.call("ENQUEUE", job_id) == 1
    job = c.show(job_id)
    assert job["state"] == b"queued"
    assert job["additional-deliveries"] == 1


def test_enqueue_wakes_blocked_client(node, c: RawClient) -> None:
    job_id = c.add("q", "x")
    c.call("GETJOB", "FROM", "q")
    with RawClient(node.port) as consumer:
        consumer.send("GETJOB", "FROM", "q")
        wait_for(lambda: c.info_field("blocked_clients") == "1", message="blocked")
        assert c.call("NACK", job_id) == 1
        assert consumer.read() == [[b"q", job_id, b"x"]]


# -- DEQUEUE -----------------------------------------------------------------------------

def test_dequeue(c: RawClient) -> None:
    a, b = c.add("q", "a"), c.add("q", "b")
    assert c.call("DEQUEUE", a, fake_id()) == 1
    assert c.show(a)["state"] == b"active"
    assert c.call("QLEN", "q") == 1
    assert c.call("DEQUEUE", a) == 0  # already active
    assert c.call("DEQUEUE", a, b) == 1
    assert c.call("QLEN", "q") == 0
    assert c.call("GETJOB", "NOHANG", "FROM", "q") is NULL_ARRAY
    # still known, still counted, not delivered
    job = c.show(a)
    assert job["next-requeue-within"] is not NULL_BULK
    assert c.call("NACK", a) == 1 and c.call("QLEN", "q") == 1


def test_dequeue_delayed_job_is_noop(c: RawClient) -> None:
    job_id = c.add("q", "x", "DELAY", 30)
    assert c.call("DEQUEUE", job_id) == 0


# -- DELJOB ------------------------------------------------------------------------------

def test_deljob_any_state(c: RawClient) -> None:
    queued, fetched = c.add("q", "a"), c.add("q", "b")
    c.call("GETJOB", "FROM", "q")
    delayed = c.add("q", "c", "DELAY", 10)
    assert c.call("DELJOB", queued, fetched, delayed, fake_id()) == 3
    assert c.call("DELJOB", queued) == 0
    assert all(c.show(i) is None for i in (queued, fetched, delayed))
    assert c.call("QLEN", "q") == 0
    assert registered(c) == 0


def test_deljob_keeps_other_jobs(c: RawClient) -> None:
    ids = [c.add("q", str(i)) for i in range(5)]
    assert c.call("DELJOB", ids[1], ids[3], ids[1]) == 2
    assert [e[1] for e in c.call("QPEEK", "q", 10)] == [ids[0], ids[2], ids[4]]


# -- WORKING -----------------------------------------------------------------------------

def test_working_returns_retry(c: RawClient) -> None:
    assert c.call("WORKING", c.add("q", "x", "RETRY", 5)) == 5
    assert c.call("WORKING", c.add("q", "x")) == 300
    assert c.call("WORKING", c.add("q", "x", "TTL", 100)) == 10


def test_working_nojob(c: RawClient) -> None:
    assert_error(c, "NOJOB Job not known in the context of this node.", "WORKING", fake_id())
    acked = c.add("q", "x")
    c.call("ACKJOB", acked)
    assert_error(c, "NOJOB Job not known in the context of this node.", "WORKING", acked)


def test_working_arity(c: RawClient) -> None:
    job_id = c.add("q", "x")
    assert_error(c, "ERR wrong number of arguments for 'working' command",
                 "WORKING", job_id, job_id)
    assert_error(c, "ERR wrong number of arguments for 'working' command", "WORKING")


def test_working_dequeues_queued_job(c: RawClient) -> None:
    job_id = c.add("q", "x", "RETRY", 20)
    assert c.call("WORKING", job_id) == 20
    assert c.show(job_id)["state"] == b"active"
    assert c.call("QLEN", "q") == 0


def test_working_postpones_requeue_of_delayed_job(c: RawClient) -> None:
    job_id = c.add("q", "x", "DELAY", 1, "RETRY", 30)
    assert c.show(job_id)["next-requeue-within"] <= 1000
    assert c.call("WORKING", job_id) == 30
    job = c.show(job_id)
    assert 29_000 <= job["next-requeue-within"] <= 30_600
    assert job["state"] == b"active"


def test_working_postpones_requeue_of_fetched_job(c: RawClient) -> None:
    job_id = c.add("q", "x", "RETRY", 2)
    c.call("GETJOB", "FROM", "q")
    wait_for(lambda: c.show(job_id)["next-requeue-within"] < 1200, timeout=3,
             message="requeue time to come closer")
    assert c.call("WORKING", job_id) == 2
    assert c.show(job_id)["next-requeue-within"] >= 1500
    assert c.show(job_id)["state"] == b"active"


def test_working_at_most_once(c: RawClient) -> None:
    job_id = c.add("q", "x", "RETRY", 0)
    c.call("GETJOB", "FROM", "q")
    assert c.call("WORKING", job_id) == 0
    assert c.show(job_id)["next-requeue-within"] is NULL_BULK


def test_working_toolate(c: RawClient) -> None:
    job_id = c.add("q", "x", "TTL", 2, "RETRY", 1)
    assert c.call("WORKING", job_id) == 1
    reply = wait_for(lambda: (lambda r: r if isinstance(r, Error) else None)(
        c.call("WORKING", job_id)), timeout=3, interval=0.05, message="TOOLATE")
    assert reply == (b"TOOLATE Half of job TTL already elapsed, you are no longer allowed "
                     b"to postpone the next delivery.")


# -- SHOW --------------------------------------------------------------------------------

FIELDS = [b"id", b"queue", b"state", b"repl", b"ttl", b"ctime", b"delay", b"retry",
          b"nacks", b"additional-deliveries", b"nodes-delivered", b"nodes-confirmed",
          b"next-requeue-within", b"next-awake-within", b"body"]


def test_show_fields_order_and_types(c: RawClient) -> None:
    my_id = c.call("CLUSTER", "MYID")
    job_id = c.add("q", "the body", "RETRY", 60, "TTL", 600)
    reply = c.call("SHOW", job_id)
    assert isinstance(reply, list) and len(reply) == 30
    assert reply[0::2] == FIELDS
    assert all(type(k) is bytes for k in reply[0::2])
    v = dict(zip([k.decode() for k in reply[0::2]], reply[1::2], strict=True))
    assert type(v["id"]) is bytes and v["id"] == job_id  # bulk, not status
    assert type(v["queue"]) is bytes and v["queue"] == b"q"
    assert type(v["state"]) is bytes and v["state"] == b"queued"
    assert v["repl"] == 1
    assert 599 <= v["ttl"] <= 600
    assert isinstance(v["ctime"], int) and v["ctime"] > 10**18
    assert (v["delay"], v["retry"], v["nacks"], v["additional-deliveries"]) == (0, 60, 0, 0)
    assert v["nodes-delivered"] == [my_id]
    assert v["nodes-confirmed"] == []
    assert isinstance(v["next-requeue-within"], int)
    assert 59_000 <= v["next-requeue-within"] <= 60_600
    assert isinstance(v["next-awake-within"], int)
    assert v["next-awake-within"] <= v["next-requeue-within"]
    assert type(v["body"]) is bytes and v["body"] == b"the body"


def test_show_states_and_counters(c: RawClient) -> None:
    job_id = c.add("q", "x", "RETRY", 0)
    job = c.show(job_id)
    assert job["state"] == b"queued"
    assert job["next-requeue-within"] is NULL_BULK
    assert isinstance(job["next-awake-within"], int)  # the TTL
    assert job["next-awake-within"] > 86_000_000
    c.call("GETJOB", "FROM", "q")
    assert c.show(job_id)["state"] == b"active"


def test_show_delayed_job(c: RawClient) -> None:
    job = c.show(c.add("q", "x", "DELAY", 3, "RETRY", 10))
    assert job["state"] == b"active"
    assert job["delay"] == 3
    assert 2000 <= job["next-requeue-within"] <= 3000
    assert job["next-awake-within"] <= job["next-requeue-within"]


def test_show_unknown_is_null_bulk(c: RawClient) -> None:
    assert c.call("SHOW", fake_id()) is NULL_BULK


def test_show_unknown_redis_py(r) -> None:
    assert r.execute_command("SHOW", fake_id().decode()) is None


def test_show_arity(c: RawClient) -> None:
    assert_error(c, "ERR wrong number of arguments for 'show' command", "SHOW")
    job_id = c.add("q", "x")
    assert_error(c, "ERR wrong number of arguments for 'show' command", "SHOW", job_id, job_id)


def test_show_ttl_counts_down(c: RawClient) -> None:
    job_id = c.add("q", "x", "TTL", 3)
    assert c.show(job_id)["ttl"] in (2, 3)
    wait_for(lambda: (c.show(job_id) or {"ttl": 0})["ttl"] <= 1, timeout=3,
             message="ttl to decrease")
