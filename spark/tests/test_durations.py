"""Every duration the data source takes is whole milliseconds, in an option named
`*_ms`: how each reaches the wire (RETRY and TTL in whole seconds, rounded up; a delay
as DELAY or DELAY-MS), the old options in seconds refused with the name of the new
one, and durations that are not whole milliseconds >= 0 refused. No Spark, no node."""

from __future__ import annotations

from typing import Any

import pytest
from disq_client.durations import JobDurations, job_durations
from disq_spark import PartitionWriter, ReadOptions, WriteOptions
from disq_spark.options import RENAMED, read_options, write_settings

BASE = {"nodes": "127.0.0.1:1", "queue": "q"}  # nothing is sent


def written(**options: str) -> WriteOptions:
    return write_settings({**BASE, **options}, ["body"]).options


def wire(**options: str) -> bytes:
    """The ADDJOB arguments after the body that a write with these options sends."""
    writer = PartitionWriter(written(**options), 0)
    try:
        return writer._suffix
    finally:
        writer.close()


def _durations(o: WriteOptions) -> JobDurations:
    """What the writer sends for the write's durations."""
    return job_durations(delay_ms=o.delay_ms, retry_ms=o.retry_ms, ttl_ms=o.ttl_ms)


def arg(*tokens: str) -> bytes:
    return b"".join(b"$%d\r\n%s\r\n" % (len(t), t.encode()) for t in tokens)


@pytest.mark.parametrize(("ms", "seconds"), [(1500, 2), (1000, 1), (1, 1), (0, 0),
                                             (60_000, 60), (60_001, 61)])
def test_retry_and_ttl_are_sent_in_whole_seconds_rounded_up(ms: int, seconds: int) -> None:
    o = written(retry_ms=str(ms), ttl_ms=str(ms))
    assert (o.retry_ms, o.ttl_ms) == (ms, ms)
    assert _durations(o) == JobDurations(None, None, seconds, seconds)
    sent = wire(retry_ms=str(ms), ttl_ms=str(ms))
    assert arg("RETRY", str(seconds)) in sent and arg("TTL", str(seconds)) in sent


def test_a_delay_is_delay_in_whole_seconds_else_delay_ms() -> None:
    assert _durations(written(delay_ms="3000")) == JobDurations(3, None, None, None)
    assert _durations(written(delay_ms="1500")) == JobDurations(None, 1500, None, None)
    assert arg("DELAY", "3") in wire(delay_ms="3000")
    sent = wire(delay_ms="1500")
    assert arg("DELAY-MS", "1500") in sent and b"$5\r\nDELAY\r\n" not in sent
    assert _durations(written()) == JobDurations(None, None, None, None)
    assert b"RETRY" not in wire() and b"TTL" not in wire() and b"DELAY" not in wire()


def test_the_timeouts_and_back_off_in_ms() -> None:
    o = written(socket_timeout_ms="2500", connect_timeout_ms="750", backoff_ms="20",
                backoff_max_ms="400", timeout_ms="3000")
    assert (o.socket_timeout_ms, o.connect_timeout_ms, o.timeout_ms) == (2500, 750, 3000)
    with o.client() as client:
        assert (client.settings.timeout, client.settings.connect_timeout) == (2.5, 0.75)
    policy = o.retry_policy()
    assert (policy.base_delay, policy.max_delay) == (0.02, 0.4)
    with written(socket_timeout_ms="0").client() as client:  # 0: no limit
        assert client.settings.timeout is None
    with WriteOptions(["127.0.0.1:1"], queue="q").client() as client:  # the defaults
        assert (client.settings.timeout, client.settings.connect_timeout) == (30.0, 5.0)
    r = read_options({**BASE, "socket_timeout_ms": "1200", "poll_ms": "40",
                      "keepalive_ms": "900"})
    assert (r.socket_timeout_ms, r.poll_ms, r.keepalive_ms) == (1200, 40, 900)


@pytest.mark.parametrize(("old", "new"), sorted(RENAMED.items()))
def test_an_old_option_in_seconds_names_its_replacement(old: str, new: str) -> None:
    with pytest.raises(ValueError, match=rf"^disq: option '{old}' is gone: give {new} "
                       rf"\(milliseconds\): 60 s is {new}=60000$"):
        write_settings({**BASE, old: "60"}, ["body"])
    with pytest.raises(ValueError, match=rf"option '{old}' is gone: give {new} "
                       r"\(milliseconds\)$"):
        write_settings({**BASE, old.upper(): "soon"}, ["body"])  # any case; no hint


def test_the_old_socket_timeout_on_a_read() -> None:
    with pytest.raises(ValueError, match=r"'socket_timeout_s' is gone: give "
                       r"socket_timeout_ms \(milliseconds\): 2.5 s is socket_timeout_ms=2500"):
        read_options({**BASE, "socket_timeout_s": "2.5"})


@pytest.mark.parametrize("name", ["retry_ms", "ttl_ms", "delay_ms", "timeout_ms",
                                  "socket_timeout_ms", "connect_timeout_ms", "backoff_ms",
                                  "backoff_max_ms"])
@pytest.mark.parametrize("value", ["-1", "1.5", "1e3", "soon", ""])
def test_a_duration_is_whole_milliseconds(name: str, value: str) -> None:
    with pytest.raises(ValueError, match=rf"option {name} takes whole milliseconds \(an "
                       rf"integer >= 0\), not '{value}'"):
        write_settings({**BASE, name: value}, ["body"])


@pytest.mark.parametrize("name", ["poll_ms", "keepalive_ms", "socket_timeout_ms"])
def test_a_read_duration_is_whole_milliseconds(name: str) -> None:
    with pytest.raises(ValueError, match=f"option {name} takes whole milliseconds"):
        read_options({**BASE, name: "-5"})


@pytest.mark.parametrize(("field", "value"), [("retry_ms", -1), ("ttl_ms", 1.5),
                                              ("socket_timeout_ms", 2.5),
                                              ("backoff_ms", True), ("delay_ms", "100")])
def test_the_options_objects_check_their_durations(field: str, value: Any) -> None:
    """WriteOptions and ReadOptions, given without Spark (PartitionWriter, JobTaker),
    refuse a duration that is not whole ms >= 0 too."""
    with pytest.raises(ValueError, match=rf"disq: {field} must be a whole number of "
                       r"milliseconds >= 0"):
        WriteOptions(["127.0.0.1:1"], queue="q", **{field: value}).check()
    if field == "socket_timeout_ms":
        with pytest.raises(ValueError, match="socket_timeout_ms must be a whole number"):
            ReadOptions(["127.0.0.1:1"], queue="q", socket_timeout_ms=value).check()
