"""Durations in the client's calls: one unit everywhere.

Every duration a call takes is either an int of milliseconds under a name ending in
`_ms` (`retry_ms=30_000`) or a `datetime.timedelta` under the plain name
(`retry=timedelta(seconds=30)`); never both, never a bare number under the plain name.
The plain names took seconds in earlier versions, so a number given there is a
TypeError that names the new form, rather than a job retried 1000 times too soon.

Disque's own options (DELAY, RETRY, TTL) and a few of disq's (RESULT-TTL, RETAIN, a
batch's TTL) are whole seconds on the wire (`spec.Option.seconds`): a duration in ms is
rounded up to them (`spec.wire_seconds`), so a job is never retried, expired or
forgotten early. A delay of whole seconds is sent as DELAY (which Disque knows), any
other as DELAY-MS.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from .spec import wire_seconds

_MS = timedelta(milliseconds=1)


def to_ms(name: str, value: object, ms: object) -> int | None:
    """The duration given as `name` (a timedelta) or as `name`_ms (an int of ms), in
    ms, rounded up; None if neither was given."""
    if value is not None:
        if ms is not None:
            raise TypeError(f"give {name} or {name}_ms, not both")
        if not isinstance(value, timedelta):
            hint = (f" ({name}_ms={round(value * 1000)} for {value} s)"
                    if isinstance(value, int | float) and not isinstance(value, bool) else "")
            raise TypeError(f"{name} takes a datetime.timedelta; give milliseconds as "
                            f"{name}_ms{hint}")
        if value < timedelta(0):
            raise ValueError(f"{name} must not be negative")
        return -(-value // _MS)
    if ms is None:
        return None
    if not isinstance(ms, int) or isinstance(ms, bool):
        raise TypeError(f"{name}_ms takes an int of milliseconds, not {type(ms).__name__}")
    if ms < 0:
        raise ValueError(f"{name}_ms must not be negative")
    return ms


def to_seconds(name: str, value: object, ms: object) -> int | None:
    """`to_ms` as an option in whole seconds takes it: rounded up."""
    given = to_ms(name, value, ms)
    return None if given is None else wire_seconds(given)


def socket_wait(name: str, value: object, ms: object, default: float | None
                ) -> float | None:
    """A connection's timeout as the socket takes it: seconds, None for no limit
    (given as 0 ms); `default` if not given."""
    given = to_ms(name, value, ms)
    if given is None:
        return default
    return given / 1000 if given else None


@dataclass(frozen=True, slots=True)
class JobDurations:
    """ADDJOB's (and TOPIC PUBLISH's) durations as sent: DELAY, DELAY-MS (at most one
    of them), RETRY and TTL in seconds; None where not given."""

    delay: int | None
    delay_ms: int | None
    retry: int | None
    ttl: int | None

    def fields(self) -> dict[str, int | None]:
        """By option field (spec.py): TOPIC PUBLISH's and CRON ADD's option maps."""
        return {"delay": self.delay, "delay_ms": self.delay_ms, "retry": self.retry,
                "ttl": self.ttl}


def job_durations(*, delay: object = None, delay_ms: object = None, retry: object = None,
                  retry_ms: object = None, ttl: object = None, ttl_ms: object = None
                  ) -> JobDurations:
    """A job's durations as the caller gave them, as sent (see JobDurations)."""
    wait = to_ms("delay", delay, delay_ms)
    retry_s, ttl_s = to_seconds("retry", retry, retry_ms), to_seconds("ttl", ttl, ttl_ms)
    if wait is not None and wait % 1000 == 0:
        return JobDurations(wait // 1000, None, retry_s, ttl_s)
    return JobDurations(None, wait, retry_s, ttl_s)
