"""When jobs fail (disq extensions) on one real node: QPOLICY and its
errors, MAXDELIVERIES and dead letters, DEADLETTER REQUEUE, NACK DELAY-MS and BACKOFF,
RATE, the counters in INFO and /metrics, and policies and dead letters across a
restart (AOF, and nodes.conf without it)."""

from __future__ import annotations

import time
import urllib.request
from collections.abc import Callable
from typing import Any

import jobutil
import pytest
from jobutil import NULL_ARRAY, NULL_BULK, Error, RawClient, Status, assert_error
from support import DisqProcess, assert_stays, free_port, wait_for

from disq.clock import TIME_ERROR_MS

shared_disq = jobutil.shared_disq
node = jobutil.node
c = jobutil.c

OK = Status(b"OK")
# QPOLICY GET's ADDJOB defaults and group limits, none set (test_queue_defaults.py)
NO_DEFAULTS_OR_GROUPS = {"retry": NULL_BULK, "ttl": NULL_BULK, "replicate": NULL_BULK,
                         "maxlen": NULL_BULK, "group-concurrency": NULL_BULK,
                         "group-rate": NULL_BULK, "retain": NULL_BULK,
                         "retain-bytes": NULL_BULK}
BASE_FIELDS = 30  # SHOW: Disque's 15 pairs


def show(c: RawClient, job_id: bytes) -> dict[str, Any]:
    reply = c.call("SHOW", job_id)
    assert isinstance(reply, list), reply
    return {k.decode(): v for k, v in zip(reply[::2], reply[1::2], strict=True)}


def policy(c: RawClient, queue: str) -> dict[str, Any] | None:
    reply = c.call("QPOLICY", queue, "GET")
    if reply is NULL_BULK:
        return None
    return {k.decode(): v for k, v in zip(reply[::2], reply[1::2], strict=True)}


def deliver(c: RawClient, queue: str, timeout: int = 3000) -> list[Any]:
    """One job from `queue` (blocking up to `timeout` ms), with its counters."""
    reply = c.call("GETJOB", "TIMEOUT", timeout, "WITHCOUNTERS", "FROM", queue)
    assert isinstance(reply, list), f"no job from {queue}: {reply!r}"
    return reply[0]


# -- QPOLICY ---------------------------------------------------------------------------------

def test_a_policy_is_set_merged_shown_and_deleted(c: RawClient) -> None:
    assert policy(c, "pq") is None
    assert c.call("QPOLICY", "pq", "SET", "MAXDELIVERIES", 5, "BACKOFF", 100, 2000) == OK
    assert policy(c, "pq") == {"queue": b"pq", "maxdeliveries": 5, "deadletter": b"dead:pq",
                               "backoff": [100, 2000], "rate": NULL_BULK,
                               "concurrency": NULL_BULK, "result-ttl": NULL_BULK, **NO_DEFAULTS_OR_GROUPS}
    # SET changes the fields it names, the others stay
    assert c.call("QPOLICY", "pq", "SET", "rate", "2.5", "DEADLETTER", "graveyard") == OK
    assert policy(c, "pq") == {"queue": b"pq", "maxdeliveries": 5,
                               "deadletter": b"graveyard", "backoff": [100, 2000],
                               "rate": b"2.5", "concurrency": NULL_BULK, "result-ttl": NULL_BULK, **NO_DEFAULTS_OR_GROUPS}
    assert c.call("QPOLICY", "pq", "DEL") == 1
    assert c.call("QPOLICY", "pq", "DEL") == 0
    assert policy(c, "pq") is None


@pytest.mark.parametrize(("args", "error"), [
    (("SET",), "ERR QPOLICY SET needs at least one of MAXDELIVERIES, DEADLETTER, BACKOFF, "
               "RATE, CONCURRENCY, RESULT-TTL, RETRY, TTL, REPLICATE, MAXLEN, "
               "GROUP-CONCURRENCY, GROUP-RATE, RETAIN, RETAIN-BYTES"),
    (("SET", "COLOR", "red"), "ERR unknown QPOLICY field 'COLOR', try MAXDELIVERIES, "
                              "DEADLETTER, BACKOFF, RATE, CONCURRENCY, RESULT-TTL, RETRY, "
                              "TTL, REPLICATE, MAXLEN, GROUP-CONCURRENCY, GROUP-RATE, "
                              "RETAIN or RETAIN-BYTES"),
    (("SET", "RETAIN", 0), "ERR RETAIN must be between 1 and 315360000 seconds"),
    (("SET", "RETAIN-BYTES", 100), "ERR RETAIN-BYTES needs RETAIN seconds in the same "
                                   "QPOLICY SET"),
    (("SET", "MAXDELIVERIES", 0), "ERR MAXDELIVERIES must be between 1 and 65535"),
    (("SET", "MAXDELIVERIES", 65536), "ERR MAXDELIVERIES must be between 1 and 65535"),
    (("SET", "BACKOFF", -1, 100),
     "ERR BACKOFF needs base-ms and max-ms, 1 <= base-ms <= max-ms <= 4294967295"),
    (("SET", "BACKOFF", 500, 100),
     "ERR BACKOFF needs base-ms and max-ms, 1 <= base-ms <= max-ms <= 4294967295"),
    (("SET", "BACKOFF", 100), "ERR syntax error"),
    (("SET", "RATE", 0), "ERR RATE must be a number of jobs per second, > 0 and <= 1000000000"),
    (("SET", "RATE", "-2"),
     "ERR RATE must be a number of jobs per second, > 0 and <= 1000000000"),
    (("SET", "RATE", "fast"),
     "ERR RATE must be a number of jobs per second, > 0 and <= 1000000000"),
    (("SET", "DEADLETTER", "bq"), "ERR DEADLETTER must be another queue than the queue itself"),
    (("GET", "extra"), "ERR wrong number of arguments for 'qpolicy get'"),
    (("FROB",), "ERR unknown QPOLICY subcommand, try SET, GET or DEL"),
])
def test_bad_policies_are_refused_and_nothing_changes(c: RawClient, args: tuple,
                                                      error: str) -> None:
    c.call("QPOLICY", "bq", "SET", "MAXDELIVERIES", 3)
    assert_error(c, error, "QPOLICY", "bq", *args)
    assert policy(c, "bq") == {"queue": b"bq", "maxdeliveries": 3, "deadletter": b"dead:bq",
                               "backoff": NULL_BULK, "rate": NULL_BULK,
                               "concurrency": NULL_BULK, "result-ttl": NULL_BULK, **NO_DEFAULTS_OR_GROUPS}
    assert c.call("PING") == Status(b"PONG")
    c.call("QPOLICY", "bq", "DEL")


@pytest.mark.parametrize(("args", "error"), [
    (("ADDJOB", "q", "x", 0, "MAXDELIVERIES", 0), "ERR MAXDELIVERIES must be between 1 and "
                                                  "65535"),
    (("NACK", "DELAY-MS", -5, "D-00000000-AAAAAAAAAAAAAAAAAAAAAAAA-05a1"),
     "ERR DELAY-MS time must be a non negative number"),
    (("NACK", "DELAY-MS"), "ERR syntax error"),
    (("DEADLETTER", "REQUEUE", "plain"),
     "ERR 'plain' is not a dead-letter queue (no QPOLICY names it DEADLETTER, no dead: "
     "prefix, no dead letters in it)"),
    (("DEADLETTER", "REQUEUE", "dead:q", "COUNT", 0),
     "ERR COUNT must be a number greater than zero"),
    (("DEADLETTER", "BURY", "dead:q"), "ERR unknown DEADLETTER subcommand, try REQUEUE or "
                                       "REQUEUE-JOB"),
    (("DEADLETTER", "REQUEUE-JOB", "not-an-id"), "BADID Invalid Job ID format."),
])
def test_bad_commands_get_clear_errors(c: RawClient, args: tuple, error: str) -> None:
    assert_error(c, error, *args)
    assert c.call("QLEN", "q") == 0


# -- dead letters ----------------------------------------------------------------------------

def test_a_job_delivered_maxdeliveries_times_becomes_one_dead_letter(c: RawClient) -> None:
    job = c.add("work", "payload", "MAXDELIVERIES", 3, "RETRY", 60)
    counts = []
    for _ in range(3):
        entry = deliver(c, "work")
        assert entry[1] == job
        counts.append((entry[4], entry[6]))
        assert c.call("NACK", job) == 1
    assert counts == [(0, 0), (1, 0), (2, 0)]  # three deliveries, the third NACK ends it
    assert c.call("QLEN", "work") == 0
    assert c.call("QLEN", "dead:work") == 1
    fields = show(c, job)
    assert (fields["queue"], fields["state"], fields["body"]) == (b"dead:work", b"queued",
                                                                   b"payload")
    assert (fields["nacks"], fields["additional-deliveries"]) == (2, 0)
    assert (fields["dead-from"], fields["dead-reason"], fields["max-deliveries"]) == (
        b"work", b"max-deliveries", 3)
    # an ordinary job there: QPEEK, JSCAN, GETJOB, ACKJOB
    assert c.call("QPEEK", "dead:work", 1)[0][1] == job
    assert c.call("JSCAN", "0", "QUEUE", "dead:work")[1] == [job]
    assert deliver(c, "dead:work")[1] == job
    assert c.call("ACKJOB", job) == 1
    assert c.call("QLEN", "dead:work") == 0


def test_the_queue_policy_applies_and_a_jobs_own_option_wins(c: RawClient) -> None:
    c.call("QPOLICY", "pol", "SET", "MAXDELIVERIES", 1, "DEADLETTER", "graveyard")
    by_policy = c.add("pol", "a")
    own = c.add("pol", "b", "MAXDELIVERIES", 2)
    for _ in range(2):
        entry = deliver(c, "pol")
        c.call("NACK", entry[1])
    assert c.call("QLEN", "graveyard") == 1 and show(c, by_policy)["queue"] == b"graveyard"
    assert show(c, own)["queue"] == b"pol"  # its own limit is 2: queued again
    entry = deliver(c, "pol")
    assert entry[1] == own
    c.call("NACK", own)
    assert show(c, own)["queue"] == b"graveyard"
    c.call("QPOLICY", "pol", "DEL")


def test_a_job_nobody_acknowledges_becomes_a_dead_letter_after_its_retries(
        c: RawClient) -> None:
    job = c.add("slow", "x", "RETRY", 1, "MAXDELIVERIES", 2)
    assert deliver(c, "slow")[1] == job  # delivery 1, never acknowledged
    entry = deliver(c, "slow", 5000)  # requeued after RETRY: delivery 2
    assert entry[1] == job and entry[6] == 1
    wait_for(lambda: c.call("QLEN", "dead:slow") == 1, 5,
             message="the second RETRY to make it a dead letter")
    assert show(c, job)["dead-from"] == b"slow"


def test_deadletter_requeue_puts_them_back_with_counters_reset(c: RawClient) -> None:
    jobs = [c.add("rq", f"j{i}", "MAXDELIVERIES", 1) for i in range(5)]
    for _ in jobs:
        c.call("NACK", deliver(c, "rq")[1])
    assert c.call("QLEN", "dead:rq") == 5
    assert c.call("DEADLETTER", "REQUEUE", "dead:rq", "COUNT", 2) == 2
    assert c.call("QLEN", "rq") == 2 and c.call("QLEN", "dead:rq") == 3
    assert c.call("DEADLETTER", "REQUEUE", "dead:rq") == 3
    assert c.call("QLEN", "rq") == 5 and c.call("QLEN", "dead:rq") == 0
    fields = show(c, jobs[0])
    assert (fields["queue"], fields["nacks"], fields["additional-deliveries"]) == (b"rq", 0, 0)
    assert fields["dead-from"] is NULL_BULK
    # and they may fail again: one more NACK each makes them dead letters once more
    c.call("NACK", deliver(c, "rq")[1])
    assert c.call("QLEN", "dead:rq") == 1
    assert c.call("DEADLETTER", "REQUEUE", "dead:rq") == 1


def test_deadletter_requeue_job_puts_the_named_ones_back(c: RawClient) -> None:
    jobs = [c.add("rj", f"j{i}", "MAXDELIVERIES", 1) for i in range(3)]
    for _ in jobs:
        c.call("NACK", deliver(c, "rj")[1])
    plain = c.add("rj-other", "x")
    assert c.call("QLEN", "dead:rj") == 3
    assert c.call("DEADLETTER", "REQUEUE-JOB", jobs[0], jobs[2], plain,
                  "D-00000000-AAAAAAAAAAAAAAAAAAAAAAAA-05a1") == 2  # (no dead letter, unknown)
    assert c.call("QLEN", "rj") == 2 and c.call("QLEN", "dead:rj") == 1
    fields = show(c, jobs[0])
    assert (fields["queue"], fields["nacks"], fields["dead-from"]) == (b"rj", 0, NULL_BULK)
    assert show(c, plain)["queue"] == b"rj-other"


# -- back-off --------------------------------------------------------------------------------

def test_nack_delay_ms_queues_the_job_again_after_the_delay(c: RawClient) -> None:
    job = c.add("later", "x")
    deliver(c, "later")
    nacked = time.monotonic()
    assert c.call("NACK", "DELAY-MS", 700, job) == 1
    assert c.call("QLEN", "later") == 0
    assert show(c, job)["nacks"] == 1  # counted when NACKed
    entry = deliver(c, "later", 5000)
    assert time.monotonic() - nacked >= 0.7  # never before its delay
    assert entry[1] == job and entry[4] == 1


def failures_field(c: RawClient, name: str) -> int:
    for line in c.call("INFO", "failures").decode().splitlines():
        if line.startswith(name + ":"):
            return int(line.split(":", 1)[1])
    raise KeyError(name)


def test_a_backoff_policy_spaces_the_redeliveries(c: RawClient) -> None:
    backoffs = failures_field(c, "backoff_requeues")
    c.call("QPOLICY", "bo", "SET", "BACKOFF", 400, 1000)
    job = c.add("bo", "x")
    waits = []
    for _ in range(3):
        deliver(c, "bo", 5000)
        nacked = time.monotonic()
        c.call("NACK", job)
        assert c.call("QLEN", "bo") == 0
        deliver(c, "bo", 5000)
        waits.append(time.monotonic() - nacked)
        c.call("ENQUEUE", job)  # an ENQUEUE is no failure: queued at once, no back-off
        assert c.call("QLEN", "bo") == 1
    # min(max, base * 2^(nacks-1)) -20%: 320 ms, 640 ms, then the 1000 ms cap (800)
    assert waits[0] >= 0.32 and waits[1] >= 0.64 and waits[2] >= 0.8, waits
    assert failures_field(c, "backoff_requeues") == backoffs + 3
    c.call("QPOLICY", "bo", "DEL")


def test_the_requeue_of_an_unacknowledged_job_waits_for_the_backoff(c: RawClient) -> None:
    c.call("QPOLICY", "ra", "SET", "BACKOFF", 1500, 1500)
    job = c.add("ra", "x", "RETRY", 1)
    deliver(c, "ra")
    delivered = time.monotonic()
    # its RETRY (1 s, spread +-TIME_ERROR_MS as in Disque), then the back-off (1.2 to 1.8 s)
    entry = deliver(c, "ra", 8000)
    assert entry[1] == job and entry[6] == 1  # one more delivery, counted
    assert time.monotonic() - delivered >= 1.0 - TIME_ERROR_MS / 1000 + 1.2
    c.call("QPOLICY", "ra", "DEL")


# -- rate ------------------------------------------------------------------------------------

def test_rate_limits_deliveries(c: RawClient) -> None:
    limited = failures_field(c, "rate_limited_getjobs")
    c.call("QPOLICY", "rl", "SET", "RATE", 10)
    for i in range(40):
        c.add("rl", f"j{i}")
    started = time.monotonic()
    got = []
    while len(got) < 15:
        reply = c.call("GETJOB", "TIMEOUT", 3000, "COUNT", 10, "FROM", "rl")
        assert isinstance(reply, list), "a blocked GETJOB is served as tokens come"
        got += reply
    # at most the first token plus 10 a second: 15 jobs take at least 1.3 s
    assert time.monotonic() - started >= 1.3
    # NOHANG without a token: nothing, though jobs are queued
    c.call("GETJOB", "NOHANG", "COUNT", 100, "FROM", "rl")
    assert c.call("GETJOB", "NOHANG", "FROM", "rl") is NULL_ARRAY
    assert c.call("QLEN", "rl") > 0
    assert failures_field(c, "rate_limited_getjobs") > limited
    c.call("QPOLICY", "rl", "DEL")  # no limit any more: all at once
    reply = c.call("GETJOB", "NOHANG", "COUNT", 100, "FROM", "rl")
    assert isinstance(reply, list) and c.call("QLEN", "rl") == 0


# -- INFO and /metrics -----------------------------------------------------------------------

def test_info_and_metrics_count_dead_letters(start_node: Callable[..., DisqProcess]) -> None:
    port = free_port()
    node = start_node("--metrics-port", str(port))
    with RawClient(node.port) as c:
        for _ in range(2):
            c.add("m", "x", "MAXDELIVERIES", 1)
            c.call("NACK", deliver(c, "m")[1])
        info = c.call("INFO", "failures").decode()
        assert "dead_lettered_jobs:2" in info
        assert "qdl0:queue=m,dead_lettered=2" in info
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    assert 'disq_dead_lettered_jobs_total{queue="m"} 2.0' in text
    assert "disq_backoff_requeues_total 0.0" in text
    assert "disq_rate_limited_getjobs_total 0.0" in text


# -- across restarts -------------------------------------------------------------------------

@pytest.mark.parametrize("aof", [True, False], ids=["aof", "nodes.conf"])
def test_policies_and_dead_letters_survive_a_restart(
        start_node: Callable[..., DisqProcess], aof: bool) -> None:
    node = start_node(*(("--appendonly", "yes") if aof else ()))
    with RawClient(node.port) as c:
        c.call("QPOLICY", "keep", "SET", "MAXDELIVERIES", 2, "BACKOFF", 10, 20, "RATE", 500)
        c.call("QPOLICY", "more", "SET", "RETRY", 9, "TTL", 99, "REPLICATE", 1, "MAXLEN", 4,
               "GROUP-CONCURRENCY", 2, "GROUP-RATE", "1.5")
        c.call("QPOLICY", "gone", "SET", "RATE", 1)
        c.call("QPOLICY", "gone", "DEL")
        job = c.add("keep", "x") if aof else b""
        if aof:
            for _ in range(2):
                c.call("NACK", deliver(c, "keep")[1])
            wait_for(lambda: c.call("QLEN", "dead:keep") == 1, 3, message="a dead letter")
    if not aof:  # written within a second
        wait_for(lambda: "qpolicy " in (node.dir / "nodes.conf").read_text(), 5,
                 message="the policies in nodes.conf")
        time.sleep(1.2)  # the deletion too, at most a second later
    node.kill()  # no shutdown: what was saved on the way
    node.start()
    with RawClient(node.port) as c:
        assert policy(c, "keep") == {"queue": b"keep", "maxdeliveries": 2,
                                     "deadletter": b"dead:keep", "backoff": [10, 20],
                                     "rate": b"500", "concurrency": NULL_BULK,
                                     "result-ttl": NULL_BULK, **NO_DEFAULTS_OR_GROUPS}
        assert {k: v for k, v in policy(c, "more").items() if k in NO_DEFAULTS_OR_GROUPS} == {
            "retry": 9, "ttl": 99, "replicate": 1, "maxlen": 4, "group-concurrency": 2,
            "group-rate": b"1.5", "retain": NULL_BULK, "retain-bytes": NULL_BULK}
        assert policy(c, "gone") is None
        if aof:
            fields = show(c, job)
            assert (fields["queue"], fields["dead-from"], fields["nacks"]) == (
                b"dead:keep", b"keep", 1)
            # loaded active, to be queued after its RETRY, as Disque loads jobs
            assert c.call("ENQUEUE", job) == 1 and c.call("QLEN", "dead:keep") == 1
            assert c.call("DEADLETTER", "REQUEUE", "dead:keep") == 1
            assert c.call("QLEN", "keep") == 1


def test_plain_jobs_show_nothing_new(c: RawClient) -> None:
    job = c.add("plain", "x")
    assert len(c.call("SHOW", job)) == BASE_FIELDS
    entry = deliver(c, "plain")
    assert len(entry) == 7
    c.call("NACK", job)
    # Disque's fields, then only the job's history (begun by the failed delivery)
    shown = c.call("SHOW", job)
    assert len(shown) == BASE_FIELDS + 2 and shown[BASE_FIELDS] == b"history"
    assert not isinstance(c.call("QLEN", "dead:plain"), Error)
    assert_stays(lambda: c.call("QLEN", "plain") == 1, 0.2, "a plain NACK queues it again")
