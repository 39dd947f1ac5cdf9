"""QLEN QPEEK QSTAT QSCAN JSCAN PAUSE on a single node."""

from __future__ import annotations

import time

import jobutil
import pytest
from jobutil import NULL_ARRAY, RawClient, Status, assert_error
from support import wait_for

shared_disq = jobutil.shared_disq
node = jobutil.node
c = jobutil.c

NOT_INT = "ERR value is not an integer or out of range"
BAD_STATE = "ERR Invalid job state name"
BAD_REPLY = "ERR Invalid REPLY type, try ID or ALL"


def add_many(c: RawClient, queue: str, n: int, *options: object) -> list[bytes]:
    c.send_raw(b"".join(RawClient.encode("ADDJOB", queue, f"b{i}", 0, *options)
                        for i in range(n)))
    ids = [c.read() for _ in range(n)]
    assert all(isinstance(i, Status) for i in ids)
    return [bytes(i) for i in ids]


def scan_all(c: RawClient, command: str, *options: object) -> tuple[list[bytes], int]:
    """Iterate a SCAN until the cursor is 0; returns every item and the call count."""
    cursor = b"0"
    items: list = []
    calls = 0
    while True:
        reply = c.call(command, cursor, *options)
        calls += 1
        assert isinstance(reply, list) and len(reply) == 2, reply
        cursor, batch = reply
        assert type(cursor) is bytes and cursor.isdigit()  # bulk string
        assert isinstance(batch, list)
        items.extend(batch)
        if cursor == b"0":
            return items, calls
        assert calls < 100_000


# -- QLEN --------------------------------------------------------------------------------

def test_qlen(c: RawClient) -> None:
    assert c.call("QLEN", "q") == 0
    assert c.qstat("q") is None  # QLEN does not create the queue
    add_many(c, "q", 3)
    assert c.call("QLEN", "q") == 3
    c.call("GETJOB", "FROM", "q")
    assert c.call("QLEN", "q") == 2
    assert c.call("QLEN", "other") == 0
    assert_error(c, "ERR wrong number of arguments for 'qlen' command", "QLEN")
    assert_error(c, "ERR wrong number of arguments for 'qlen' command", "QLEN", "a", "b")


# -- QPEEK -------------------------------------------------------------------------------

def test_qpeek_order_and_count(c: RawClient) -> None:
    ids = add_many(c, "q", 5)
    got = c.call("QPEEK", "q", 2)
    assert got == [[b"q", ids[0], b"b0"], [b"q", ids[1], b"b1"]]
    assert all(type(x) is bytes for e in got for x in e)
    assert [e[1] for e in c.call("QPEEK", "q", 100)] == ids
    assert [e[1] for e in c.call("QPEEK", "q", -2)] == [ids[4], ids[3]]
    assert [e[1] for e in c.call("QPEEK", "q", -100)] == ids[::-1]
    assert c.call("QPEEK", "q", 0) == []
    # nothing was taken
    assert c.call("QLEN", "q") == 5
    stat = c.qstat("q")
    assert (stat["jobs-in"], stat["jobs-out"]) == (5, 0)
    assert all(c.show(i)["state"] == b"queued" for i in ids)


def test_qpeek_unknown_queue_is_empty_array(c: RawClient) -> None:
    assert c.call("QPEEK", "nope", 10) == []
    assert c.call("QPEEK", "nope", -10) == []
    assert c.qstat("nope") is None


def test_qpeek_skips_fetched_jobs(c: RawClient) -> None:
    ids = add_many(c, "q", 3)
    c.call("GETJOB", "FROM", "q")
    assert [e[1] for e in c.call("QPEEK", "q", 10)] == ids[1:]
    c.call("NACK", ids[0])  # back in its place: the queue is ordered by creation time
    assert [e[1] for e in c.call("QPEEK", "q", 10)] == ids


def test_qpeek_large_queue(c: RawClient) -> None:
    ids = add_many(c, "q", 2600)
    assert [e[1] for e in c.call("QPEEK", "q", 2600)] == ids
    assert [e[1] for e in c.call("QPEEK", "q", -3000)] == ids[::-1]
    assert [e[1] for e in c.call("QPEEK", "q", 1500)] == ids[:1500]
    assert [e[1] for e in c.call("QPEEK", "q", -1500)] == ids[::-1][:1500]
    # take some from the middle: order stays right
    assert c.call("DEQUEUE", *ids[1000:1100]) == 100
    assert [e[1] for e in c.call("QPEEK", "q", 5000)] == ids[:1000] + ids[1100:]


@pytest.mark.parametrize("count", ["abc", "1.5", "1x", " 1", "-"])
def test_qpeek_count_not_integer(c: RawClient, count: str) -> None:
    c.add("q", "x")
    assert_error(c, NOT_INT, "QPEEK", "q", count)


def test_qpeek_arity(c: RawClient) -> None:
    assert_error(c, "ERR wrong number of arguments for 'qpeek' command", "QPEEK", "q")


# -- QSTAT -------------------------------------------------------------------------------

QSTAT_FIELDS = [b"name", b"len", b"age", b"idle", b"blocked", b"import-from",
                b"import-rate", b"jobs-in", b"jobs-out", b"pause"]


def test_qstat_unknown_is_null_array(c: RawClient) -> None:
    assert c.call("QSTAT", "nope") is NULL_ARRAY


def test_qstat_unknown_redis_py(r) -> None:
    assert r.execute_command("QSTAT", "nope") is None


def test_qstat_fields(c: RawClient) -> None:
    add_many(c, "q", 3)
    c.call("GETJOB", "FROM", "q")
    reply = c.call("QSTAT", "q")
    assert isinstance(reply, list) and len(reply) == 20
    assert reply[0::2] == QSTAT_FIELDS
    v = dict(zip([k.decode() for k in reply[0::2]], reply[1::2], strict=True))
    assert type(v["name"]) is bytes and v["name"] == b"q"
    assert v["len"] == 2
    assert isinstance(v["age"], int) and 0 <= v["age"] <= 1
    assert isinstance(v["idle"], int) and 0 <= v["idle"] <= 1
    assert v["blocked"] == 0
    assert v["import-from"] == []
    assert v["import-rate"] == 0
    assert (v["jobs-in"], v["jobs-out"]) == (3, 1)
    assert type(v["pause"]) is bytes and v["pause"] == b"none"  # bulk, not status


def test_qstat_counters(c: RawClient) -> None:
    ids = add_many(c, "q", 4)
    c.call("GETJOB", "COUNT", 3, "FROM", "q")
    c.call("NACK", ids[0])  # queued again: one more in
    c.call("GETJOB", "FROM", "q")  # one more out
    c.call("DEQUEUE", ids[3])  # not counted either way
    c.call("ENQUEUE", ids[3])  # in
    stat = c.qstat("q")
    assert (stat["jobs-in"], stat["jobs-out"], stat["len"]) == (6, 4, 1)
    c.call("QPEEK", "q", 10)
    c.call("QLEN", "q")
    assert c.qstat("q")["jobs-out"] == 4


def test_qstat_queue_survives_when_empty(c: RawClient) -> None:
    job_id = c.add("q", "x")
    c.call("ACKJOB", job_id)
    stat = c.qstat("q")
    assert stat is not None and stat["len"] == 0 and stat["jobs-in"] == 1


def test_qstat_blocked(node, c: RawClient) -> None:
    consumers = [RawClient(node.port) for _ in range(3)]
    try:
        for i, consumer in enumerate(consumers):
            consumer.send("GETJOB", "FROM", "q", "q2")
            wait_for(lambda i=i: c.info_field("blocked_clients") == str(i + 1),
                     message="blocked")
        assert c.qstat("q")["blocked"] == 3
        assert c.qstat("q2")["blocked"] == 3
        c.add("q2", "x")
        assert consumers[0].read()[0][0] == b"q2"
        assert c.qstat("q")["blocked"] == 2
        consumers[1].close()
        wait_for(lambda: c.qstat("q")["blocked"] == 1, message="disconnect seen")
    finally:
        for consumer in consumers:
            consumer.close()


def test_qstat_idle_and_age(c: RawClient) -> None:
    c.add("q", "x")
    start = time.monotonic()
    wait_for(lambda: c.qstat("q")["age"] >= 1, timeout=2.5, message="age to grow")
    assert time.monotonic() - start <= 2.5
    stat = c.qstat("q")
    assert stat["idle"] >= 1  # nothing queued or fetched since the job was queued
    c.call("GETJOB", "FROM", "q")
    stat = c.qstat("q")
    assert stat["idle"] == 0 and stat["age"] >= 1


def test_qstat_idle_reset_by_enqueue(c: RawClient) -> None:
    c.add("q", "x")
    wait_for(lambda: c.qstat("q")["idle"] >= 1, timeout=2.5, message="idle to grow")
    c.add("q", "y")  # Disque's enqueueJob updates the access time
    assert c.qstat("q")["idle"] == 0


def test_qstat_pause_states(c: RawClient) -> None:
    for option, expected in [("in", b"in"), ("out", b"out"), ("all", b"all"),
                             ("none", b"none")]:
        c.call("PAUSE", "q", option)
        assert c.qstat("q")["pause"] == expected


# -- QSCAN -------------------------------------------------------------------------------

def test_qscan_empty(c: RawClient) -> None:
    assert c.call("QSCAN") == [b"0", []]
    assert c.call("QSCAN", "BUSYLOOP") == [b"0", []]


def test_qscan_busyloop_returns_all(c: RawClient) -> None:
    names = {f"queue-{i}".encode() for i in range(300)}
    c.send_raw(b"".join(RawClient.encode("ADDJOB", n, "x", 0) for n in names))
    for _ in names:
        c.read()
    cursor, found = c.call("QSCAN", "BUSYLOOP")
    assert cursor == b"0"
    assert sorted(found) == sorted(names)


def test_qscan_cursor_iteration_exactly_once(c: RawClient) -> None:
    names = [f"queue-{i}".encode() for i in range(2000)]
    c.send_raw(b"".join(RawClient.encode("ADDJOB", n, "x", 0) for n in names))
    for _ in names:
        c.read()
    found, calls = scan_all(c, "QSCAN", "COUNT", 20)
    assert len(found) == len(names)
    assert set(found) == set(names)
    assert calls > 10  # it really iterated
    # default COUNT
    found, _ = scan_all(c, "QSCAN")
    assert sorted(found) == sorted(names)


def test_qscan_count_bounds_reply(c: RawClient) -> None:
    for i in range(500):
        c.add(f"q{i}", "x")
    cursor, found = c.call("QSCAN", "COUNT", 10)
    assert cursor != b"0"
    assert 1 <= len(found) < 500


def test_qscan_minlen_maxlen(c: RawClient) -> None:
    for name, n in [("len1", 1), ("len2", 2), ("len5", 5)]:
        add_many(c, name, n)
    c.add("len0", "x")
    c.call("GETJOB", "FROM", "len0")

    def names(*options: object) -> set[bytes]:
        cursor, found = c.call("QSCAN", "BUSYLOOP", *options)
        assert cursor == b"0"
        return set(found)

    assert names() == {b"len0", b"len1", b"len2", b"len5"}
    assert names("MINLEN", 2) == {b"len2", b"len5"}
    assert names("MAXLEN", 1) == {b"len0", b"len1"}
    assert names("MINLEN", 1, "MAXLEN", 2) == {b"len1", b"len2"}
    assert names("MINLEN", 6) == set()
    assert names("maxlen", 0) == {b"len0"}
    assert names("IMPORTRATE", 1) == set()  # nothing imported on a lone node
    assert names("IMPORTRATE", 0) == {b"len0", b"len1", b"len2", b"len5"}
    assert names("MINLEN", 1, "IMPORTRATE", 0) == {b"len1", b"len2", b"len5"}
    found, _ = scan_all(c, "QSCAN", "COUNT", 1, "MINLEN", 2)
    assert sorted(found) == [b"len2", b"len5"]


def test_qscan_cursor_position_and_case(c: RawClient) -> None:
    c.add("q", "x")
    assert c.call("QSCAN", "count", 10, "0", "busyloop") == [b"0", [b"q"]]


@pytest.mark.parametrize(("args", "message"), [
    (("abc",), "ERR invalid cursor or option name"),
    (("COUNT",), "ERR invalid cursor or option name"),
    (("1x",), "ERR invalid cursor or option name"),
    (("0", "0"), "ERR syntax error"),
    (("0", "COUNT", 10, "5"), "ERR syntax error"),
    (("COUNT", "abc"), NOT_INT),
    (("MINLEN", "x"), NOT_INT),
    (("MAXLEN", "1.5"), NOT_INT),
    (("IMPORTRATE", "fast"), NOT_INT),
])
def test_qscan_errors(c: RawClient, args: tuple, message: str) -> None:
    assert_error(c, message, "QSCAN", *args)


BAD_CURSOR = "ERR invalid cursor or option name"
SYNTAX = "ERR syntax error"


@pytest.mark.parametrize(("args", "message"), [
    # an option whose value is missing is taken for the cursor
    (("MINLEN",), BAD_CURSOR),
    (("BUSYLOOP", "COUNT"), BAD_CURSOR),
    (("0", "MINLEN"), SYNTAX),
    (("-1",), BAD_CURSOR),
    (("99999999999999999999",), BAD_CURSOR),
    (("QUEUE", "q"), BAD_CURSOR),  # JSCAN's option, not QSCAN's
    # COUNT's value is checked as it is read, the filters' once the cursor is known
    (("COUNT", "x", "bogus"), NOT_INT),
    (("bogus", "COUNT", "x"), BAD_CURSOR),
    (("MINLEN", "x", "bogus"), BAD_CURSOR),
    (("MINLEN", "x", "0", "1"), SYNTAX),
    (("MINLEN", "x", "COUNT", "y"), NOT_INT),
    (("MINLEN", "x", "MINLEN", "1"), NOT_INT),  # every value is checked, the last kept
    (("MINLEN", "1", "MAXLEN", "y", "IMPORTRATE", "z"), NOT_INT),
    (("COUNT", "BUSYLOOP"), NOT_INT),  # an option's value, even if it names an option
    (("MINLEN", "COUNT", "5"), NOT_INT),
    (("MAXLEN", "9223372036854775808"), NOT_INT),
])
def test_qscan_error_order(c: RawClient, args: tuple, message: str) -> None:
    c.add("q", "x")
    assert_error(c, message, "QSCAN", *args)


def test_qscan_option_values(c: RawClient) -> None:
    add_many(c, "two", 2)
    c.add("one", "x")

    def names(*options: object) -> list[bytes]:
        cursor, found = c.call("QSCAN", "BUSYLOOP", *options)
        assert cursor == b"0"
        return sorted(found)

    assert names("MINLEN", 2, "MINLEN", 1) == [b"one", b"two"]  # the last one counts
    assert names("MINLEN", 1, "MINLEN", 2) == [b"two"]
    assert names("MINLEN", -3) == [b"one", b"two"]  # negative: no filter
    assert names("MAXLEN", -1) == [b"one", b"two"]
    assert names("MAXLEN", "") == []  # an empty number is 0
    assert names("MINLEN", "+2") == [b"two"]
    assert names("Busyloop", "minLen", 2) == [b"two"]
    assert c.call("QSCAN", "+0", "BUSYLOOP")[1] != []
    cursor, found = c.call("QSCAN", "COUNT", -1)  # negative COUNT: to the end
    assert cursor == b"0" and sorted(found) == [b"one", b"two"]
    cursor, found = c.call("QSCAN", "COUNT", 0, "BUSYLOOP")
    assert cursor == b"0" and sorted(found) == [b"one", b"two"]


# -- JSCAN -------------------------------------------------------------------------------

def test_jscan_empty(c: RawClient) -> None:
    assert c.call("JSCAN") == [b"0", []]


def test_jscan_ids_are_status_replies(c: RawClient) -> None:
    job_id = c.add("q", "x")
    cursor, found = c.call("JSCAN", "BUSYLOOP")
    assert cursor == b"0" and found == [job_id]
    assert isinstance(found[0], Status)
    cursor, found = c.call("JSCAN", "BUSYLOOP", "REPLY", "id")
    assert found == [job_id] and isinstance(found[0], Status)


def test_jscan_cursor_iteration_exactly_once(c: RawClient) -> None:
    ids = add_many(c, "q", 1000) + add_many(c, "other", 1000, "RETRY", 0)
    found, calls = scan_all(c, "JSCAN", "COUNT", 50)
    assert len(found) == 2000
    assert set(found) == set(ids)
    assert calls >= 10
    found, _ = scan_all(c, "JSCAN")  # default COUNT 100
    assert sorted(found) == sorted(ids)
    cursor, found = c.call("JSCAN", "BUSYLOOP", "COUNT", 5)
    assert cursor == b"0" and sorted(found) == sorted(ids)


def test_jscan_queue_and_state_filters(c: RawClient) -> None:
    q1 = add_many(c, "q1", 10)
    q2 = add_many(c, "q2", 10)
    got = c.call("GETJOB", "COUNT", 4, "FROM", "q1")
    active = [e[1] for e in got]
    delayed = c.add("q2", "later", "DELAY", 30)

    def ids(*options: object) -> set[bytes]:
        found, _ = scan_all(c, "JSCAN", "COUNT", 3, *options)
        assert len(found) == len(set(found))
        return set(found)

    assert ids("QUEUE", "q1") == set(q1)
    assert ids("QUEUE", "q2") == set(q2) | {delayed}
    assert ids("QUEUE", "nope") == set()
    assert ids("STATE", "active") == set(active) | {delayed}
    assert ids("STATE", "queued") == set(q1[4:]) | set(q2)
    assert ids("STATE", "queued", "STATE", "active") == set(q1) | set(q2) | {delayed}
    assert ids("STATE", "QUEUED", "QUEUE", "q1") == set(q1[4:])
    assert ids("queue", "q2", "state", "active") == {delayed}
    assert ids("STATE", "acked") == set()
    assert ids("STATE", "wait-repl") == set()


def test_jscan_reply_all(c: RawClient) -> None:
    job_id = c.add("q", "body\r\n", "RETRY", 7)
    cursor, found = c.call("JSCAN", "BUSYLOOP", "REPLY", "all")
    assert cursor == b"0" and len(found) == 1
    entry = found[0]
    assert isinstance(entry, list) and len(entry) == 30
    show = c.call("SHOW", job_id)
    assert entry[0::2] == show[0::2]  # the same fields as SHOW, in the same order
    v = {entry[i].decode(): entry[i + 1] for i in range(0, 30, 2)}
    shown = {show[i].decode(): show[i + 1] for i in range(0, 30, 2)}
    for key in ("id", "queue", "state", "repl", "ctime", "delay", "retry", "nacks",
                "additional-deliveries", "nodes-delivered", "nodes-confirmed", "body"):
        assert v[key] == shown[key], key
    assert (v["id"], v["queue"], v["state"], v["retry"], v["body"]) == (
        job_id, b"q", b"queued", 7, b"body\r\n")
    cursor, found = c.call("JSCAN", "BUSYLOOP", "REPLY", "ALL")
    assert len(found[0]) == 30


def test_jscan_errors(c: RawClient) -> None:
    c.add("q", "x")
    assert_error(c, "ERR Invalid job state name", "JSCAN", "STATE", "done")
    assert_error(c, "ERR Invalid job state name", "JSCAN", "STATE", "queued", "STATE", "x")
    assert_error(c, "ERR Invalid REPLY type, try ID or ALL", "JSCAN", "REPLY", "json")
    assert_error(c, "ERR invalid cursor or option name", "JSCAN", "bogus")
    assert_error(c, "ERR invalid cursor or option name", "JSCAN", "STATE")
    assert_error(c, "ERR syntax error", "JSCAN", "0", "1")
    assert_error(c, NOT_INT, "JSCAN", "COUNT", "many")


@pytest.mark.parametrize(("args", "message"), [
    (("REPLY",), BAD_CURSOR),
    (("0", "QUEUE"), SYNTAX),
    (("MINLEN", "1"), BAD_CURSOR),  # QSCAN's option, not JSCAN's
    (("-5",), BAD_CURSOR),
    # STATE and REPLY are checked once the cursor is known, in the order given
    (("STATE", "x", "bogus"), BAD_CURSOR),
    (("REPLY", "json", "0", "1"), SYNTAX),
    (("STATE", "x", "REPLY", "json"), BAD_STATE),
    (("REPLY", "json", "STATE", "x"), BAD_REPLY),
    (("STATE", "x", "COUNT", "y"), NOT_INT),
    (("REPLY", "json", "REPLY", "id"), BAD_REPLY),  # every value is checked
    (("STATE", "queued", "STATE", ""), BAD_STATE),
    (("STATE", b"QUEUED\xc0"), BAD_STATE),
    (("STATE", "deleted"), BAD_STATE),  # disq's internal state is not a name
    (("REPLY", "ids"), BAD_REPLY),
])
def test_jscan_error_order(c: RawClient, args: tuple, message: str) -> None:
    c.add("q", "x")
    assert_error(c, message, "JSCAN", *args)


def test_jscan_option_values(c: RawClient) -> None:
    a = c.add("a", "x")
    b = c.add("b", "x")
    weird = c.add("COUNT", "x")  # a queue named like an option

    def found(*options: object) -> list:
        cursor, items = c.call("JSCAN", "BUSYLOOP", *options)
        assert cursor == b"0"
        return items

    assert found("QUEUE", "a", "QUEUE", "b") == [b]  # the last one counts
    assert found("QUEUE", "COUNT") == [weird]
    assert sorted(found("STATE", "queued", "STATE", "Queued")) == sorted([a, b, weird])
    assert found("STATE", "ACTIVE") == []
    assert found("QUEUE", "a", "REPLY", "all", "REPLY", "ID") == [a]
    assert found("QUEUE", "a", "REPLY", "id", "reply", "All")[0][:2] == [b"id", a]
    assert sorted(found("COUNT", "-1")) == sorted([a, b, weird])


# -- PAUSE -------------------------------------------------------------------------------

def test_pause_replies_resulting_state(c: RawClient) -> None:
    c.add("q", "x")
    for options, expected in [
        (("in",), b"in"), (("state",), b"in"), (("out",), b"out"), (("in", "out"), b"all"),
        (("all",), b"all"), (("none",), b"none"), (("IN",), b"in"), (("none", "out"), b"out"),
        (("in", "none"), b"none"), (("out", "state"), b"out"), (("all", "none", "in"), b"in"),
        (("in", "bcast"), b"in"), (("bcast",), b"in"), (("state",), b"in"),
    ]:
        reply = c.call("PAUSE", "q", *options)
        assert isinstance(reply, Status), (options, reply)
        assert reply == expected, options
        assert c.qstat("q")["pause"] == expected


def test_pause_options_replace_previous_state(c: RawClient) -> None:
    assert c.call("PAUSE", "q", "in") == b"in"
    assert c.call("PAUSE", "q", "out") == b"out"  # not "all"
    assert c.call("PAUSE", "q", "in") == b"in"


def test_pause_missing_queue(c: RawClient) -> None:
    assert c.call("PAUSE", "q", "state") == b"none"
    assert c.call("PAUSE", "q", "none") == b"none"
    assert c.qstat("q") is None  # no change asked: no queue created
    assert c.call("PAUSE", "q", "out") == b"out"
    assert c.qstat("q")["pause"] == b"out"  # created to hold the flag


def test_pause_syntax_error_changes_nothing(c: RawClient) -> None:
    c.call("PAUSE", "q", "in")
    assert_error(c, "ERR syntax error", "PAUSE", "q", "out", "sideways")
    assert c.call("PAUSE", "q", "state") == b"in"
    assert_error(c, "ERR syntax error", "PAUSE", "new", "all", "bogus")
    assert c.qstat("new") is None


def test_pause_words_in_order(c: RawClient) -> None:
    c.add("q", "x")
    assert_error(c, SYNTAX, "PAUSE", "q", "bogus", "in")  # anywhere: nothing changes
    assert_error(c, SYNTAX, "PAUSE", "q", "in", "in-out")
    assert c.call("PAUSE", "q", "STATE") == b"none"
    for options, expected in [
        (("in", "in", "none", "none"), b"none"), (("state", "in"), b"in"),
        (("None", "OUT", "BCAST"), b"out"), (("out", "none", "state", "in"), b"in"),
        (("in", "out", "none", "all", "none", "out", "in"), b"all"),
    ]:
        assert c.call("PAUSE", "q", *options) == expected, options


def test_pause_bcast_alone_on_missing_queue(c: RawClient) -> None:
    assert c.call("PAUSE", "q", "bcast") == b"none"
    assert c.call("PAUSE", "q", "bcast", "none") == b"none"
    assert c.qstat("q") is None


def test_pause_arity(c: RawClient) -> None:
    assert_error(c, "ERR wrong number of arguments for 'pause' command", "PAUSE", "q")


def test_pause_in_refuses_addjob_not_getjob(c: RawClient) -> None:
    job_id = c.add("q", "x")
    c.call("PAUSE", "q", "in")
    assert_error(c, "PAUSED Queue paused in input, try later", "ADDJOB", "q", "y", 0)
    assert c.call("GETJOB", "NOHANG", "FROM", "q") == [[b"q", job_id, b"x"]]
    # NACK is not ADDJOB: it still puts the job back
    assert c.call("NACK", job_id) == 1


def test_pause_out_blocks_getjob(c: RawClient) -> None:
    c.add("q", "x")
    c.call("PAUSE", "q", "out")
    assert c.call("GETJOB", "NOHANG", "FROM", "q") is NULL_ARRAY
    start = time.monotonic()
    assert c.call("GETJOB", "TIMEOUT", 200, "FROM", "q") is NULL_ARRAY
    assert time.monotonic() - start >= 0.15
    assert c.call("QLEN", "q") == 1
    c.call("PAUSE", "q", "none")
    assert len(c.call("GETJOB", "TIMEOUT", 200, "FROM", "q")) == 1


def test_pause_out_unpause_wakes_all_blocked(node, c: RawClient) -> None:
    add_many(c, "q", 2)
    c.call("PAUSE", "q", "all")
    consumers = [RawClient(node.port) for _ in range(3)]
    try:
        for i, consumer in enumerate(consumers):
            consumer.send("GETJOB", "FROM", "q")
            wait_for(lambda i=i: c.info_field("blocked_clients") == str(i + 1),
                     message="blocked")
        assert c.call("PAUSE", "q", "in") == b"in"  # OUT cleared
        assert [len(consumer.read()) for consumer in consumers[:2]] == [1, 1]
        assert consumers[2].pending(0.05) == b""
        assert c.info_field("blocked_clients") == "1"
    finally:
        for consumer in consumers:
            consumer.close()
