"""Durations in the client's calls (durations.py): ms ints under `*_ms`, timedeltas under
the plain names, sent in the unit each option has on the wire."""

from __future__ import annotations

from datetime import timedelta

import pytest
from disq_client import Client
from disq_client.durations import JobDurations, job_durations, to_ms, to_seconds


def test_ms_and_timedeltas_are_the_same_duration() -> None:
    assert to_ms("retry", None, None) is None
    assert to_ms("retry", None, 1500) == 1500
    assert to_ms("retry", timedelta(seconds=1.5), None) == 1500
    assert to_ms("retry", timedelta(microseconds=1), None) == 1  # rounded up
    assert to_ms("retry", timedelta(0), None) == 0


def test_seconds_on_the_wire_are_rounded_up_never_early() -> None:
    assert to_seconds("ttl", None, 1) == 1
    assert to_seconds("ttl", None, 1000) == 1
    assert to_seconds("ttl", None, 1001) == 2
    assert to_seconds("retry", None, 0) == 0  # RETRY 0: at most once, as given
    assert to_seconds("ttl", timedelta(minutes=1), None) == 60


def test_a_delay_of_whole_seconds_is_disques_delay_else_delay_ms() -> None:
    assert job_durations() == JobDurations(None, None, None, None)
    assert job_durations(delay_ms=30_000) == JobDurations(30, None, None, None)
    assert job_durations(delay=timedelta(milliseconds=250)) == JobDurations(
        None, 250, None, None)
    assert job_durations(delay_ms=0, retry_ms=7000, ttl_ms=3_600_000).fields() == {
        "delay": 0, "delay_ms": None, "retry": 7, "ttl": 3600}


@pytest.mark.parametrize("name", ["retry", "ttl", "delay"])
def test_a_bare_number_under_the_old_name_names_the_new_form(name: str) -> None:
    with pytest.raises(TypeError, match=rf"{name} takes a datetime.timedelta.*"
                                        rf"{name}_ms=30000 for 30 s"):
        job_durations(**{name: 30})


def test_bad_durations_are_refused_with_their_name() -> None:
    with pytest.raises(TypeError, match="give retry or retry_ms, not both"):
        to_ms("retry", timedelta(seconds=1), 1000)
    with pytest.raises(TypeError, match="ttl_ms takes an int of milliseconds, not float"):
        to_ms("ttl", None, 1.5)
    with pytest.raises(TypeError, match="ttl_ms takes an int"):
        to_ms("ttl", None, True)
    with pytest.raises(ValueError, match="retain_ms must not be negative"):
        to_ms("retain", None, -1)
    with pytest.raises(ValueError, match="delay must not be negative"):
        to_ms("delay", timedelta(seconds=-1), None)


def test_every_call_taking_durations_refuses_the_old_form_before_sending() -> None:
    """No server: each call fails on its arguments before it connects."""
    c = Client("127.0.0.1:1")
    calls = [
        lambda: c.add_job("q", b"x", retry=30),  # type: ignore[arg-type]
        lambda: c.add_jobs("q", [b"x"], ttl=60),  # type: ignore[arg-type]
        lambda: c.topic_publish("t", b"x", delay=5),  # type: ignore[arg-type]
        lambda: c.cron_add("n", "q", "* * * * * *", b"x", retry=5),  # type: ignore[arg-type]
        lambda: c.batch_new("b", ttl=60),  # type: ignore[arg-type]
        lambda: c.qpolicy_set("q", result_ttl=60),  # type: ignore[arg-type]
        lambda: c.qpolicy_set("q", retain=60),  # type: ignore[arg-type]
    ]
    for call in calls:
        with pytest.raises(TypeError, match=r"takes a datetime.timedelta; give milliseconds"):
            call()
