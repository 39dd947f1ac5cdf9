"""ADDJOB on a single node: options, defaults, errors, the job ID format, bodies."""

from __future__ import annotations

import jobutil
import pytest
from jobutil import ID_RE, NULL_BULK, Error, RawClient, Status, assert_error

shared_disq = jobutil.shared_disq
node = jobutil.node
c = jobutil.c


# -- the reply and the ID --------------------------------------------------------------

def test_reply_is_status_with_disque_id(c: RawClient) -> None:
    reply = c.call("ADDJOB", "q", "hello", 0)
    assert isinstance(reply, Status)
    assert len(reply) == 40
    assert ID_RE.match(reply), reply
    my_id = c.call("CLUSTER", "MYID").decode()
    assert len(my_id) == 40
    assert reply[2:10] == my_id[:8].encode()
    # default TTL 1 day = 1440 minutes = 0x5a0, odd because RETRY > 0
    assert reply.endswith(b"-05a1")


def test_reply_on_the_wire(node) -> None:
    with node.connect() as sock:
        sock.sendall(b"ADDJOB q body 0\r\n")
        data = b""
        while not data.endswith(b"\r\n"):
            data += sock.recv(4096)
    assert data.startswith(b"+D-") and len(data) == 1 + 40 + 2


@pytest.mark.parametrize(
    ("options", "suffix"),
    [
        ((), b"05a1"),
        (("RETRY", 0), b"05a0"),
        (("TTL", 60), b"0001"),
        (("TTL", 60, "RETRY", 0), b"0000"),
        (("TTL", 59), b"0001"),  # 0 minutes, forced odd
        (("TTL", 120), b"0003"),  # 2 minutes, forced odd
        (("TTL", 120, "RETRY", 0), b"0002"),
        (("TTL", 180, "RETRY", 0), b"0002"),  # 3 minutes, forced even
        (("TTL", 3600), b"003d"),  # 60 = 0x3c -> odd
        (("TTL", 100 * 86400), b"ffff"),  # 144000 minutes, capped at 65535
        (("TTL", 100 * 86400, "RETRY", 0), b"fffe"),
        (("TTL", 65535 * 60, "RETRY", 5), b"ffff"),
    ],
)
def test_id_ttl_suffix(c: RawClient, options: tuple, suffix: bytes) -> None:
    job_id = c.add("q", "x", *options)
    assert ID_RE.match(job_id)
    assert job_id[35:36] == b"-"
    assert job_id[36:] == suffix


def test_ids_are_unique_and_random_part_is_base64(c: RawClient) -> None:
    c.send_raw(b"".join(RawClient.encode("ADDJOB", "q", "x", 0) for _ in range(500)))
    ids = [c.read() for _ in range(500)]
    assert all(isinstance(i, Status) and ID_RE.match(i) for i in ids)
    assert len(set(ids)) == 500
    assert len({i[11:35] for i in ids}) == 500
    assert c.call("QLEN", "q") == 500


def test_ctime_strictly_increasing(c: RawClient) -> None:
    ids = [c.add("q", str(i)) for i in range(50)]
    ctimes = [c.show(i)["ctime"] for i in ids]
    assert all(a < b for a, b in zip(ctimes, ctimes[1:], strict=False))
    # ms * 1_000_000 (+ a counter): close to the wall clock in milliseconds
    assert abs(ctimes[0] // 1_000_000 - int(c.call("TIME")[0]) * 1000) < 10_000


# -- defaults ----------------------------------------------------------------------------

def test_defaults_on_single_node(c: RawClient) -> None:
    job_id = c.add("q", "body")
    job = c.show(job_id)
    assert job["repl"] == 1
    assert job["retry"] == 300
    assert job["delay"] == 0
    assert 86399 <= job["ttl"] <= 86400
    assert job["state"] == b"queued"
    assert job["queue"] == b"q"
    assert c.call("QLEN", "q") == 1


@pytest.mark.parametrize(("ttl", "retry"), [(50, 5), (5, 1), (1, 1), (9, 1), (3000, 300),
                                            (10_000, 300), (2999, 299)])
def test_default_retry_is_tenth_of_ttl(c: RawClient, ttl: int, retry: int) -> None:
    job = c.show(c.add("q", "x", "TTL", ttl))
    assert job["retry"] == retry
    assert ttl - 1 <= job["ttl"] <= ttl


# -- each option -------------------------------------------------------------------------

def test_replicate_one(c: RawClient) -> None:
    assert c.show(c.add("q", "x", "REPLICATE", 1))["repl"] == 1


def test_retry_option(c: RawClient) -> None:
    job = c.show(c.add("q", "x", "RETRY", 7))
    assert job["retry"] == 7
    assert 6000 <= job["next-requeue-within"] <= 7500


def test_retry_zero_never_requeues(c: RawClient) -> None:
    job = c.show(c.add("q", "x", "RETRY", 0))
    assert job["retry"] == 0
    assert job["next-requeue-within"] is NULL_BULK


def test_ttl_option(c: RawClient) -> None:
    job = c.show(c.add("q", "x", "TTL", 100))
    assert 99 <= job["ttl"] <= 100
    assert job["retry"] == 10


def test_delay_option(c: RawClient) -> None:
    job_id = c.add("q", "x", "DELAY", 5)
    job = c.show(job_id)
    assert job["delay"] == 5
    assert job["state"] == b"active"
    assert 4000 <= job["next-requeue-within"] <= 5000
    assert c.call("QLEN", "q") == 0
    assert c.call("GETJOB", "NOHANG", "FROM", "q") is jobutil.NULL_ARRAY


def test_delay_zero_is_immediate(c: RawClient) -> None:
    job_id = c.add("q", "x", "DELAY", 0)
    assert c.show(job_id)["state"] == b"queued"


def test_async_single_node(c: RawClient) -> None:
    job_id = c.add("q", "x", "ASYNC")
    assert c.show(job_id)["state"] == b"queued"
    assert c.call("QLEN", "q") == 1


def test_all_options_together(c: RawClient) -> None:
    job_id = c.add("q", "x", "REPLICATE", 1, "DELAY", 1, "RETRY", 3, "TTL", 30,
                   "MAXLEN", 10, "ASYNC")
    job = c.show(job_id)
    assert (job["repl"], job["delay"], job["retry"]) == (1, 1, 3)
    assert 29 <= job["ttl"] <= 30
    assert job_id.endswith(b"-0001")


def test_options_case_insensitive(c: RawClient) -> None:
    job = c.show(c.add("q", "x", "ttl", 100, "Retry", 4, "delay", 2, "rEpLiCaTe", 1,
                       "maxlen", 5, "async"))
    assert (job["retry"], job["delay"], job["repl"]) == (4, 2, 1)


def test_later_option_wins(c: RawClient) -> None:
    job = c.show(c.add("q", "x", "RETRY", 3, "RETRY", 9))
    assert job["retry"] == 9


@pytest.mark.parametrize("timeout", [0, 1, 1000, 999_999_999])
def test_ms_timeout_values_accepted(c: RawClient, timeout: int) -> None:
    assert isinstance(c.call("ADDJOB", "q", "x", timeout), Status)


# -- MAXLEN and PAUSED ------------------------------------------------------------------

def test_maxlen(c: RawClient) -> None:
    for i in range(3):
        c.add("q", str(i), "MAXLEN", 3)
    assert_error(c, "MAXLEN Queue is already longer than the specified MAXLEN count",
                 "ADDJOB", "q", "x", 0, "MAXLEN", 3)
    assert_error(c, "MAXLEN Queue is already longer than the specified MAXLEN count",
                 "ADDJOB", "q", "x", 0, "MAXLEN", 1)
    assert c.call("QLEN", "q") == 3
    c.add("q", "4", "MAXLEN", 4)
    assert c.call("QLEN", "q") == 4
    c.add("q", "5")  # no MAXLEN: no limit
    assert c.call("QLEN", "q") == 5


def test_maxlen_counts_only_queued_jobs(c: RawClient) -> None:
    c.add("q", "a")
    c.add("q", "b")
    assert len(c.call("GETJOB", "FROM", "q")) == 1
    c.add("q", "c", "MAXLEN", 2)  # one queued + one active: length 1 < 2
    assert c.call("QLEN", "q") == 2


def test_maxlen_on_new_queue(c: RawClient) -> None:
    c.add("fresh", "x", "MAXLEN", 1)
    assert c.call("QLEN", "fresh") == 1


def test_paused_in(c: RawClient) -> None:
    assert c.call("PAUSE", "q", "in") == b"in"
    assert_error(c, "PAUSED Queue paused in input, try later", "ADDJOB", "q", "x", 0)
    assert c.call("QLEN", "q") == 0
    assert c.call("PAUSE", "q", "all") == b"all"
    assert_error(c, "PAUSED Queue paused in input, try later", "ADDJOB", "q", "x", 0)
    assert c.call("PAUSE", "q", "out") == b"out"
    c.add("q", "x")  # paused out only: producers are welcome
    assert c.call("PAUSE", "q", "none") == b"none"
    c.add("q", "y")
    assert c.call("QLEN", "q") == 2


def test_maxlen_checked_before_paused(c: RawClient) -> None:
    c.add("q", "x")
    c.call("PAUSE", "q", "in")
    assert_error(c, "MAXLEN Queue is already longer than the specified MAXLEN count",
                 "ADDJOB", "q", "x", 0, "MAXLEN", 1)
    assert_error(c, "PAUSED Queue paused in input, try later",
                 "ADDJOB", "q", "x", 0, "MAXLEN", 2)


# -- errors ------------------------------------------------------------------------------

NOT_INT = "ERR timeout is not an integer or out of range"


@pytest.mark.parametrize(("timeout", "message"), [
    ("abc", NOT_INT), ("1.5", NOT_INT), (" 1", NOT_INT), ("1x", NOT_INT), ("-", NOT_INT),
    ("99999999999999999999999", NOT_INT), ("-1", "ERR timeout is negative"),
    ("-1000", "ERR timeout is negative"),
])
def test_timeout_errors(c: RawClient, timeout: str, message: str) -> None:
    assert_error(c, message, "ADDJOB", "q", "x", timeout)
    assert c.call("QLEN", "q") == 0


REPLICATE = "ERR REPLICATE must be between 1 and 65535"
TTL = "ERR TTL must be a number > 0"
RETRY = "ERR RETRY time must be a non negative number"
DELAY = "ERR DELAY time must be a non negative number"
MAXLEN = "ERR MAXLEN must be a positive number"


@pytest.mark.parametrize(("option", "value", "message"), [
    ("REPLICATE", "0", REPLICATE), ("REPLICATE", "-1", REPLICATE),
    ("REPLICATE", "65536", REPLICATE), ("REPLICATE", "abc", REPLICATE),
    ("REPLICATE", "1.0", REPLICATE),
    ("TTL", "0", TTL), ("TTL", "-5", TTL), ("TTL", "ten", TTL), ("TTL", "1e3", TTL),
    ("RETRY", "-1", RETRY), ("RETRY", "x", RETRY), ("RETRY", "2.5", RETRY),
    ("DELAY", "-1", DELAY), ("DELAY", "soon", DELAY),
    ("MAXLEN", "0", MAXLEN), ("MAXLEN", "-3", MAXLEN), ("MAXLEN", "many", MAXLEN),
    ("replicate", "0", REPLICATE), ("ttl", "0", TTL),
])
def test_option_value_errors(c: RawClient, option: str, value: str, message: str) -> None:
    assert_error(c, message, "ADDJOB", "q", "x", 0, option, value)
    assert c.call("QLEN", "q") == 0
    assert c.call("JSCAN", "BUSYLOOP") == [b"0", []]


@pytest.mark.parametrize("args", [
    ("FOO",), ("TTL",), ("RETRY",), ("DELAY",), ("REPLICATE",), ("MAXLEN",),
    ("TTL", 10, "DELAY"), ("ASYNC", "extra"), ("NOHANG",), ("10",),
])
def test_unknown_option_or_missing_value_is_syntax_error(c: RawClient, args: tuple) -> None:
    assert_error(c, "ERR syntax error", "ADDJOB", "q", "x", 0, *args)
    assert c.call("QLEN", "q") == 0


def test_options_parsed_before_timeout(c: RawClient) -> None:
    assert_error(c, TTL, "ADDJOB", "q", "x", "abc", "TTL", 0)
    assert_error(c, "ERR syntax error", "ADDJOB", "q", "x", "-1", "FOO")
    assert_error(c, NOT_INT, "ADDJOB", "q", "x", "abc", "TTL", 10)


def test_retry_zero_with_replicate_above_one(c: RawClient) -> None:
    message = ("ERR With RETRY set to 0 please explicitly set  REPLICATE to 1 "
               "(at-most-once delivery)")
    assert_error(c, message, "ADDJOB", "q", "x", 0, "RETRY", 0, "REPLICATE", 2)
    assert_error(c, message, "ADDJOB", "q", "x", 0, "REPLICATE", 3, "RETRY", 0, "ASYNC")
    # checked before DELAY >= TTL and before the replication check
    assert_error(c, message, "ADDJOB", "q", "x", 0, "REPLICATE", 2, "RETRY", 0,
                 "DELAY", 10, "TTL", 5)
    assert c.add("q", "x", "RETRY", 0, "REPLICATE", 1).endswith(b"0")


DELAY_TTL = ("ERR The specified DELAY is greater than TTL. Job refused since would never "
             "be delivered")


@pytest.mark.parametrize(("delay", "ttl"), [(10, 10), (11, 10), (1, 1)])
def test_delay_not_below_ttl(c: RawClient, delay: int, ttl: int) -> None:
    assert_error(c, DELAY_TTL, "ADDJOB", "q", "x", 0, "DELAY", delay, "TTL", ttl)
    assert c.call("JSCAN", "BUSYLOOP") == [b"0", []]


def test_delay_against_default_ttl(c: RawClient) -> None:
    assert_error(c, DELAY_TTL, "ADDJOB", "q", "x", 0, "DELAY", 86400)
    assert c.show(c.add("q", "x", "DELAY", 86399))["delay"] == 86399


def test_delay_ttl_checked_before_replication(c: RawClient) -> None:
    assert_error(c, DELAY_TTL, "ADDJOB", "q", "x", 0, "REPLICATE", 2, "DELAY", 5,
                 "TTL", 5)


NOREPL = "NOREPL Not enough reachable nodes for the requested replication level"


@pytest.mark.parametrize("options", [
    ("REPLICATE", 2), ("REPLICATE", 3, "ASYNC"), ("REPLICATE", 65535),
    ("REPLICATE", 2, "TTL", 10, "RETRY", 1),
])
def test_norepl_on_single_node(c: RawClient, options: tuple) -> None:
    assert_error(c, NOREPL, "ADDJOB", "q", "x", 0, *options)
    assert c.call("QLEN", "q") == 0
    assert c.call("JSCAN", "BUSYLOOP") == [b"0", []]
    assert c.info_field("registered_jobs") == "0"


def test_norepl_checked_before_maxlen_and_pause(c: RawClient) -> None:
    c.add("q", "x")
    c.call("PAUSE", "q", "in")
    assert_error(c, NOREPL, "ADDJOB", "q", "x", 0, "REPLICATE", 2, "MAXLEN", 1)


def test_wrong_arity(c: RawClient) -> None:
    assert_error(c, "ERR wrong number of arguments for 'addjob' command", "ADDJOB", "q", "x")
    assert_error(c, "ERR wrong number of arguments for 'addjob' command", "ADDJOB")


# -- bodies and names --------------------------------------------------------------------

@pytest.mark.parametrize("body", [
    b"", b"a\r\nb", b"\r\n", b"\x00", b"nul\x00in\x00the\x00middle\r\n\r\n",
    bytes(range(256)), "unicode \u00e9\u4e2d".encode(), b"*3\r\n$1\r\nx\r\n", b"-ERR no",
])
def test_body_round_trip(c: RawClient, body: bytes) -> None:
    job_id = c.add("q", body)
    assert c.show(job_id)["body"] == body
    assert c.call("QPEEK", "q", 1) == [[b"q", job_id, body]]
    assert c.call("GETJOB", "FROM", "q") == [[b"q", job_id, body]]
    assert c.call("PING") == b"PONG"  # the stream is still in sync


def test_body_round_trip_redis_py(node) -> None:
    r = node.client()
    try:
        body = b"line1\r\nline2\x00\xff\r\n"
        job_id = r.execute_command("ADDJOB", "q", body, 0)
        assert r.execute_command("GETJOB", "FROM", "q") == [[b"q", job_id, body]]
    finally:
        r.close()


@pytest.mark.parametrize("size", [64 * 1024, 1024 * 1024 + 7, 8 * 1024 * 1024])
def test_large_body(c: RawClient, size: int) -> None:
    body = bytes(i % 251 for i in range(size))
    job_id = c.add("big", body)
    assert c.call("GETJOB", "FROM", "big") == [[b"big", job_id, body]]
    assert c.show(job_id)["body"] == body


def test_binary_queue_name(c: RawClient) -> None:
    name = b"q\r\n\x00\xff name"
    job_id = c.add(name, "x")  # type: ignore[arg-type]
    assert c.call("QLEN", name) == 1
    assert c.call("GETJOB", "FROM", name) == [[name, job_id, b"x"]]


def test_inline_addjob(node) -> None:
    with RawClient(node.port) as raw:
        raw.send_raw(b'ADDJOB q "a b\\r\\n" 0 TTL 100\r\n')
        reply = raw.read()
        assert isinstance(reply, Status) and ID_RE.match(reply)
        assert raw.show(bytes(reply))["body"] == b"a b\r\n"


def test_registered_jobs_counter(c: RawClient) -> None:
    assert c.info_field("registered_jobs") == "0"
    for i in range(5):
        c.add("q", str(i))
    assert c.info_field("registered_jobs") == "5"
    assert not isinstance(c.call("PING"), Error)
