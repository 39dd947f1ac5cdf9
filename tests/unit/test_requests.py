"""Typed requests parsed from RESP arguments with the options of disq_client.spec, and
the client's encoding of the same options."""

from __future__ import annotations

import pytest
from disq_client.spec import ADDJOB, GETJOB, JOB_STATES, JSCAN, PAUSE, QSCAN

from disq import errors
from disq.dedup_table import is_unique, scoped_key, unique_key
from disq.job import STATE_BY_NAME
from disq.queue import PAUSED_ALL, PAUSED_IN, PAUSED_OUT
from disq.queue_requests import JScan, Pause, QScan
from disq.requests import AddJob, AddJobs, GetJob


def args(text: str) -> list[bytes]:
    return [a.encode() for a in text.split()]


def test_addjob_defaults_and_every_option() -> None:
    plain = AddJob.parse(args("ADDJOB q body 0"))
    assert (plain.queue, plain.body, plain.timeout, plain.repl, plain.delay, plain.retry,
            plain.ttl, plain.maxlen, plain.async_, plain.queue_randomly, plain.dedup) == (
        b"q", b"body", 0, None, 0, None, 0, 0, False, False, None)  # TTL 0: not given
    full = AddJob.parse(args("ADDJOB q body 250 replicate 2 DELAY 5 Retry 30 TTL 600 "
                             "MAXLEN 9 ASYNC queue-randomly DEDUP key-1"))
    assert (full.timeout, full.repl, full.delay, full.retry, full.ttl, full.maxlen,
            full.async_, full.queue_randomly, full.dedup) == (
        250, 2, 5, 30, 600, 9, True, True, scoped_key(b"q", b"key-1"))


def test_a_dedup_key_is_scoped_to_its_queue_however_the_request_is_made() -> None:
    """Parsed, built (CRON, the tests), or a job of an ADDJOBS: the same key in two
    queues is two keys, and no queue and key pair makes another's scoped key."""
    parsed = AddJob.parse(args("ADDJOB qa body 0 DEDUP order-42")).dedup
    assert parsed == AddJob(b"qa", b"b", dedup=b"order-42").dedup == scoped_key(
        b"qa", b"order-42")
    assert parsed != AddJob.parse(args("ADDJOB qb body 0 DEDUP order-42")).dedup
    batch = AddJobs.parse(args("ADDJOBS qa 0 DEDUP-JOBS order-42 body k2 body2"))
    assert batch.job(0).dedup == parsed and batch.job(1).dedup == scoped_key(b"qa", b"k2")
    assert scoped_key(b"ab", b"c") != scoped_key(b"b", b"ca")  # "c" + "ab" as "ca" + "b"
    assert scoped_key(b"b", b"a\x00") != scoped_key(b"\x00b", b"a")


def test_a_unique_key_is_the_dedup_slot_marked_unique_however_the_request_is_made() -> None:
    """UNIQUE is parsed into `ext` (a plain ADDJOB pays nothing), then moved to `dedup`
    as a UNIQUE key: another key than DEDUP's of the same name; `ext` goes with it
    unless another extension is in it."""
    parsed = AddJob.parse(args("ADDJOB q body 0 UNIQUE order-42"))
    assert parsed.dedup == unique_key(b"q", b"order-42") != scoped_key(b"q", b"order-42")
    assert is_unique(parsed.dedup) and not is_unique(scoped_key(b"q", b"order-42"))
    assert parsed.unique == b"order-42" and parsed.ext is None
    fields = AddJob.from_fields(b"q", b"body", 0, {"unique": "order-42", "priority": 3})
    assert fields.dedup == parsed.dedup and fields.priority == 3
    assert fields.ext is not None and fields.ext.unique is None
    assert AddJob.parse(args("ADDJOB q body 0 DEDUP k")).unique is None
    for text in ("ADDJOB q body 0 DEDUP a UNIQUE b", "ADDJOB q body 0 UNIQUE b DEDUP a"):
        with pytest.raises(errors.DisqError, match="DEDUP and UNIQUE cannot be combined"):
            AddJob.parse(args(text))
    with pytest.raises(errors.DisqError, match="ADDJOBS takes no UNIQUE key"):
        AddJobs.parse(args("ADDJOBS q 0 UNIQUE k JOBS a b"))


def test_addjob_extensions() -> None:
    plain = AddJob.parse(args("ADDJOB q body 0 REPLICATE 2 ASYNC"))
    assert not plain.extended
    assert (plain.delay_ms, plain.at, plain.priority, plain.group) == (None,) * 4
    full = AddJob.parse(args("ADDJOB q body 0 delay-ms 1500 PRIORITY 0 group g1 TTL 9"))
    assert full.extended
    assert (full.delay_ms, full.at, full.priority, full.group) == (1500, None, 0, b"g1")
    assert AddJob.parse(args("ADDJOB q body 0 AT 0")).at == 0
    assert AddJob.parse(args("ADDJOB q body 0 GROUP g")).extended
    # DELAY with DELAY-MS or AT is refused built from fields too (the HTTP API's way)
    assert AddJob(b"q", b"b", priority=3).extended
    assert not AddJob(b"q", b"b", delay=3).extended
    with pytest.raises(errors.DisqError, match="DELAY and AT are mutually exclusive"):
        AddJob(b"q", b"b", delay=3, at=5)


@pytest.mark.parametrize(("text", "reply"), [
    ("ADDJOB q b 0 REPLICATE 0", b"-ERR REPLICATE must be between 1 and 65535\r\n"),
    ("ADDJOB q b 0 REPLICATE 65536", b"-ERR REPLICATE must be between 1 and 65535\r\n"),
    ("ADDJOB q b 0 TTL 0", b"-ERR TTL must be a number > 0\r\n"),
    ("ADDJOB q b 0 RETRY -1", b"-ERR RETRY time must be a non negative number\r\n"),
    ("ADDJOB q b 0 DELAY x", b"-ERR DELAY time must be a non negative number\r\n"),
    ("ADDJOB q b 0 MAXLEN 0", b"-ERR MAXLEN must be a positive number\r\n"),
    ("ADDJOB q b 0 TTL", b"-ERR syntax error\r\n"),  # a value is missing
    ("ADDJOB q b 0 BOGUS", b"-ERR syntax error\r\n"),
    ("ADDJOB q b soon", b"-ERR timeout is not an integer or out of range\r\n"),
    ("ADDJOB q b -1", b"-ERR timeout is negative\r\n"),
    ("ADDJOB q b soon TTL 0", b"-ERR TTL must be a number > 0\r\n"),  # options first
    ("ADDJOB q b 0 DEDUP " + "k" * 257, b"-ERR DEDUP key must be 1 to 256 bytes\r\n"),
    # disq's ADDJOB options, checked as Disque checks its own: each value as it is read,
    # then which of DELAY, DELAY-MS and AT were given, then the timeout
    ("ADDJOB q b 0 DELAY-MS -1", b"-ERR DELAY-MS time must be a non negative number\r\n"),
    ("ADDJOB q b 0 DELAY-MS 1.5", b"-ERR DELAY-MS time must be a non negative number\r\n"),
    ("ADDJOB q b 0 AT -5", b"-ERR AT must be a Unix time in milliseconds\r\n"),
    ("ADDJOB q b 0 AT soon", b"-ERR AT must be a Unix time in milliseconds\r\n"),
    ("ADDJOB q b 0 PRIORITY 256", b"-ERR PRIORITY must be between 0 and 255\r\n"),
    ("ADDJOB q b 0 PRIORITY -1", b"-ERR PRIORITY must be between 0 and 255\r\n"),
    ("ADDJOB q b 0 GROUP " + "g" * 257, b"-ERR GROUP must be 1 to 256 bytes\r\n"),
    ("ADDJOB q b 0 GROUP", b"-ERR syntax error\r\n"),
    ("ADDJOB q b 0 DELAY 0 AT 5", b"-ERR DELAY and AT are mutually exclusive\r\n"),
    ("ADDJOB q b 0 at 5 DELAY 1", b"-ERR DELAY and AT are mutually exclusive\r\n"),
    ("ADDJOB q b 0 DELAY-MS 5 delay 1", b"-ERR DELAY and DELAY-MS are mutually exclusive\r\n"),
    ("ADDJOB q b 0 AT 5 DELAY-MS 5", b"-ERR DELAY-MS and AT are mutually exclusive\r\n"),
    ("ADDJOB q b 0 AT 5 DELAY-MS 5 DELAY 1",
     b"-ERR DELAY and DELAY-MS are mutually exclusive\r\n"),
    ("ADDJOB q b 0 DELAY-MS 5 PRIORITY 300 AT 1",  # a bad value first: as it is read
     b"-ERR PRIORITY must be between 0 and 255\r\n"),
    ("ADDJOB q b soon AT 5 DELAY 1", b"-ERR DELAY and AT are mutually exclusive\r\n"),
    ("ADDJOB q b soon AT 5", b"-ERR timeout is not an integer or out of range\r\n"),
    ("GETJOB FROM", b"-ERR syntax error\r\n"),
    ("GETJOB q", b"-ERR syntax error\r\n"),
    ("GETJOB COUNT 0 FROM q", b"-ERR COUNT must be a number greater than zero\r\n"),
    ("GETJOB TIMEOUT from FROM q", b"-ERR timeout is not an integer or out of range\r\n"),
    ("GETJOB TIMEOUT", b"-ERR syntax error\r\n"),
])
def test_bad_requests_get_disques_errors(text: str, reply: bytes) -> None:
    parse = AddJob.parse if text.startswith("ADDJOB") else GetJob.parse
    with pytest.raises(errors.DisqError) as refused:
        parse(args(text))
    assert refused.value.reply() == reply


def test_an_empty_option_is_a_syntax_error() -> None:
    """An empty argument where an option goes is refused, as Disque refuses it (the
    options once stopped there silently, dropping those after it)."""
    for request in ([b"ADDJOB", b"q", b"b", b"0", b"", b"REPLICATE", b"2"],
                    [b"GETJOB", b"", b"FROM", b"q"]):
        parse = AddJob.parse if request[0] == b"ADDJOB" else GetJob.parse
        with pytest.raises(errors.DisqError) as refused:
            parse(request)
        assert refused.value.reply() == b"-ERR syntax error\r\n"


def test_getjob_options_stop_at_from() -> None:
    request = GetJob.parse(args("GETJOB nohang TIMEOUT 100 COUNT 5 WITHCOUNTERS from a COUNT"))
    assert (request.nohang, request.timeout, request.count, request.with_counters,
            request.queues) == (True, 100, 5, True, [b"a", b"COUNT"])


def test_the_client_encodes_the_options_the_server_parses() -> None:
    tail = ADDJOB.encode({"repl": 2, "ttl": 60, "async_": True, "dedup": "k", "delay": None})
    assert tail == ["REPLICATE", 2, "TTL", 60, "ASYNC", "DEDUP", "k"]
    request = AddJob.parse([b"ADDJOB", b"q", b"b", b"0", *(str(a).encode() for a in tail)])
    assert (request.repl, request.ttl, request.async_, request.dedup) == (
        2, 60, True, scoped_key(b"q", b"k"))
    assert GETJOB.encode({"count": 3, "nohang": False}) == ["COUNT", 3]
    tail = ADDJOB.encode({"delay_ms": 0, "at": 1_700_000_000_000, "priority": 0,
                          "group": "g"})
    assert tail == ["DELAY-MS", 0, "AT", 1_700_000_000_000, "PRIORITY", 0, "GROUP", "g"]
    with pytest.raises(TypeError, match="no option 'urgency'"):
        ADDJOB.encode({"urgency": 1})


def test_scan_requests() -> None:
    plain = QScan.parse(args("QSCAN"))
    assert (plain.cursor, plain.count, plain.busyloop, plain.minlen, plain.maxlen,
            plain.importrate) == (0, 100, False, -1, -1, -1)
    full = QScan.parse(args("QSCAN count 5 7 BUSYLOOP MINLEN 1 maxlen 9 IMPORTRATE -2"))
    assert (full.cursor, full.count, full.busyloop, full.minlen, full.maxlen,
            full.importrate) == (7, 5, True, 1, 9, -2)
    jobs = JScan.parse(args("JSCAN STATE queued 3 QUEUE q state ACTIVE REPLY All COUNT -1"))
    assert (jobs.cursor, jobs.count, jobs.queue, jobs.states, jobs.reply) == (
        3, -1, b"q", ["queued", "active"], "all")
    assert (JScan.parse(args("JSCAN")).states, JScan.parse(args("JSCAN")).reply) == ([], "id")


@pytest.mark.parametrize(("text", "reply"), [
    ("QSCAN -1", b"-ERR invalid cursor or option name\r\n"),
    ("QSCAN 0 MINLEN", b"-ERR syntax error\r\n"),
    ("QSCAN MINLEN x bogus", b"-ERR invalid cursor or option name\r\n"),
    ("QSCAN MINLEN x COUNT y", b"-ERR value is not an integer or out of range\r\n"),
    ("JSCAN STATE x REPLY json", b"-ERR Invalid job state name\r\n"),
    ("JSCAN REPLY json STATE x", b"-ERR Invalid REPLY type, try ID or ALL\r\n"),
    ("PAUSE q in sideways", b"-ERR syntax error\r\n"),
])
def test_bad_queue_requests(text: str, reply: bytes) -> None:
    parse = {"QSCAN": QScan.parse, "JSCAN": JScan.parse, "PAUSE": Pause.parse}
    with pytest.raises(errors.DisqError) as refused:
        parse[text.split()[0]](args(text))
    assert refused.value.reply() == reply


def test_pause_words_apply_in_order() -> None:
    for text, flags, bcast in [
        ("PAUSE q state", None, False), ("PAUSE q bcast", None, True),
        ("PAUSE q in OUT", PAUSED_ALL, False), ("PAUSE q all none", 0, False),
        ("PAUSE q none out bcast", PAUSED_OUT, True), ("PAUSE q in none in", PAUSED_IN, False),
    ]:
        request = Pause.parse(args(text))
        assert (request.queue, request.flags, request.bcast) == (b"q", flags, bcast), text


def test_the_client_encodes_the_queue_options_the_server_parses() -> None:
    assert set(JOB_STATES) == set(STATE_BY_NAME)
    tail = QSCAN.encode({"cursor": 4, "count": 10, "minlen": 2, "maxlen": None})
    assert tail == [4, "COUNT", 10, "MINLEN", 2]
    request = QScan.parse([b"QSCAN", *(str(a).encode() for a in tail)])
    assert (request.cursor, request.count, request.minlen) == (4, 10, 2)
    tail = JSCAN.encode({"cursor": 0, "queue": "q", "states": ["queued", "acked"],
                         "reply": "all"})
    assert tail == [0, "QUEUE", "q", "STATE", "queued", "STATE", "acked", "REPLY", "all"]
    request = JScan.parse([b"JSCAN", *(str(a).encode() for a in tail)])
    assert (request.queue, request.states, request.reply) == (b"q", ["queued", "acked"], "all")
    words = PAUSE.encode([("in", True), ("none", True), ("out", True), ("bcast", True)])
    assert words == ["in", "none", "out", "bcast"]
    request = Pause.parse([b"PAUSE", b"q", *(str(w).encode() for w in words)])
    assert (request.flags, request.bcast) == (PAUSED_OUT, True)
    with pytest.raises(TypeError, match="no option 'sideways'"):
        PAUSE.encode([("sideways", True)])
