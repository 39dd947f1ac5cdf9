"""CRON's schedule table without sockets (disq/schedules.py)."""

from __future__ import annotations

import pytest

from disq.errors import DisqError
from disq.schedules import MAX_CATCHUP, CronSchedule, CronTable, check_spec, parse_zone

T0 = 1_800_000_000_000  # a Unix ms on a whole minute (2027-01-15 08:00:00 UTC)


def every_second(name: bytes = b"s", version: int = T0, origin: str = "a") -> CronSchedule:
    return CronSchedule(name, b"q", "* * * * * *", b"body", version=version, origin=origin)


def test_ticks_are_due_once_each_and_only_after_the_definition() -> None:
    table = CronTable()
    table.merge(every_second(), T0)
    assert table.due(T0) == []  # the tick of the definition's own second is not fired
    assert table.next_deadline() == T0 + 1000
    due = table.due(T0 + 1000)
    assert [tick for _, tick in due] == [T0 + 1000]
    table.fired(b"s", T0 + 1000, b"job")
    assert table.due(T0 + 1500) == [] and table.overdue() == []


def test_missed_ticks_are_fired_by_whoever_takes_over_but_capped() -> None:
    table = CronTable()
    table.merge(every_second(), T0)
    due = table.due(T0 + 5000)  # the firer died: 5 ticks nobody fired
    assert [tick for _, tick in due] == [T0 + i * 1000 for i in range(1, 6)]
    table.merge(every_second(version=T0 + 1), T0 + 1)
    many = table.due(T0 + 10_000_000)
    assert len(many) == MAX_CATCHUP and many[-1][1] == T0 + 10_000_000


def test_a_schedule_loaded_from_disk_fires_the_ticks_it_missed_once() -> None:
    table = CronTable()
    stored = every_second()
    stored.last_fire = T0 + 1000
    table.load(stored, T0 + 60_000)  # a minute down
    assert [tick for _, tick in table.overdue()] == [T0 + 60_000]


def test_the_newest_definition_wins_and_keeps_the_fired_ticks() -> None:
    table = CronTable()
    old = every_second(version=T0, origin="b")
    old.last_fire = T0 + 3000
    assert table.merge(old, T0)
    assert not table.merge(every_second(version=T0, origin="a"), T0)  # older (tiebreak)
    newer = every_second(version=T0 + 5, origin="a")
    assert table.merge(newer, T0)
    assert table.get(b"s") is newer and newer.last_fire == T0 + 3000
    gone = CronSchedule(b"s", b"q", "* * * * * *", b"", version=T0 + 6, origin="c",
                        deleted=True)
    assert table.merge(gone, T0) and table.get(b"s") is None and len(table) == 0
    assert not table.merge(every_second(version=T0 + 5, origin="z"), T0)  # stays deleted
    table.sweep(T0 + 25 * 3600 * 1000)
    assert table.schedules == {}


def test_wire_round_trip_and_bad_input_dropped() -> None:
    schedule = CronSchedule(b"n", b"q", "0 9 * * 1-5", b"b", repl=2, retry=30, ttl=600,
                            priority=3, group=b"g", tz="Europe/Paris", version=T0,
                            origin="x" * 40)
    copy = CronSchedule.from_wire(schedule.to_wire())
    assert copy is not None and copy.to_wire() == schedule.to_wire()
    bad = schedule.to_wire()
    for index, value in ((0, b""), (2, "61 * * * *"), (9, "Nowhere/Town"), (4, "2"),
                         (10, 1.5)):
        data = list(bad)
        data[index] = value
        assert CronSchedule.from_wire(data) is None, (index, value)
    assert CronSchedule.from_wire("nope") is None
    assert CronSchedule.from_wire(bad[:-2]) is None
    assert CronSchedule.from_wire([*bad[:-1], 3]) is None  # a format not known yet
    assert CronSchedule.from_wire([*bad[:-1], "2"]) is None


def test_time_zones_and_daylight_saving() -> None:
    paris = CronSchedule(b"p", b"q", "0 9 * * *", b"b", tz="Europe/Paris", version=T0)
    paris.advance(T0 - 1)
    assert paris.following == T0  # 09:00 in Paris is 08:00 UTC in January
    paris.advance(T0)
    assert paris.tick == T0 and paris.following == T0 + 86_400_000
    summer = 1_782_000_000_000  # June 2026: 09:00 in Paris is 07:00 UTC
    paris.advance(summer)
    assert (paris.following // 1000) % 86400 == 7 * 3600
    with pytest.raises(DisqError):
        parse_zone("Mars/Olympus")
    with pytest.raises(DisqError):
        check_spec("* * * * * * * *", parse_zone(""))


def test_six_fields_put_seconds_first() -> None:
    """As Quartz, Spring, BullMQ and node-cron: `*/10 * * * * *` is every 10 s."""
    table = CronTable()
    table.merge(CronSchedule(b"s", b"q", "*/10 * * * * *", b"x", version=T0, origin="a"), T0)
    assert table.next_deadline() == T0 + 10_000
    table.merge(CronSchedule(b"t", b"q", "30 0 2 * * *", b"x", version=T0, origin="a"), T0)
    assert table.get(b"t") is not None and table.get(b"t").following % 86_400_000 == (
        2 * 3600 + 30) * 1000


def test_a_schedule_stored_with_seconds_last_keeps_its_meaning() -> None:
    """A schedule of an older disq (AOF, nodes.conf, a peer's CRON_SYNC: the wire form
    without the format field) had its seconds last: it is read seconds first."""
    old = CronSchedule(b"s", b"q", "0 2 * * * 30", b"x", version=T0, origin="a").to_wire()
    old = old[:15]  # no format field: before seconds came first
    schedule = CronSchedule.from_wire(old)
    assert schedule is not None and schedule.spec == "30 0 2 * * *"
    five = CronSchedule.from_wire(
        CronSchedule(b"f", b"q", "0 2 * * *", b"x", version=T0, origin="a").to_wire()[:15])
    assert five is not None and five.spec == "0 2 * * *"  # five fields: unchanged
    again = CronSchedule.from_wire(schedule.to_wire())  # a new one stays as it is
    assert again is not None and again.spec == "30 0 2 * * *"
