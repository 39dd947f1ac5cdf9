"""GETJOB ... WHERE (a disq extension): filters on a job's attributes (ADDJOB ...
ATTR, attrs.py). `WHERE key = value`, `key != value`, `key PREFIX p`, `key < n`,
`key > n` (numbers compared as numbers: an attribute that is no number does not match
< or >) and `key EXISTS`; several WHEREs must all match. A job without the key matches
none of them, not even `!=`.

Only a GETJOB with WHERE takes the filtered path (consumers.py `take`): a plain one
pays one test. The filtered path looks at a queue's first WHERE_SCAN_MAX jobs in
delivery order at most, so one GETJOB never holds the loop for a long queue."""

from __future__ import annotations

import math
from typing import Final

from . import errors
from .attrs import MAX_KEY_LEN
from .job import Job

WHERE_SCAN_MAX: Final = 10_000  # jobs of a queue one filtered take looks at, at most
MAX_CONDITIONS: Final = 16

EQ, NE, PREFIX, LT, GT, EXISTS = range(6)
_OPS: Final = {b"=": EQ, b"==": EQ, b"!=": NE, b"prefix": PREFIX, b"<": LT, b">": GT,
               b"exists": EXISTS}

BAD_WHERE: Final = errors.fixed(
    "BAD_WHERE", "ERR", "WHERE needs key = value, key != value, key PREFIX p, key < n, "
    f"key > n or key EXISTS (a key of 1 to {MAX_KEY_LEN} bytes, at most "
    f"{MAX_CONDITIONS} WHEREs)")
WHERE_NOT_NUMBER: Final = errors.fixed(
    "WHERE_NOT_NUMBER", "ERR", "WHERE key < n and key > n need a number")


class Condition:
    """One WHERE: the key, the comparison and what it compares with."""

    __slots__ = ("key", "op", "value", "number")

    def __init__(self, key: bytes, op: int, value: bytes = b"", number: float = 0.0) -> None:
        self.key = key
        self.op = op
        self.value = value
        self.number = number

    def matches(self, attrs: dict[bytes, bytes]) -> bool:
        value = attrs.get(self.key)
        if value is None:
            return False
        op = self.op
        if op == EQ:
            return value == self.value
        if op == NE:
            return value != self.value
        if op == PREFIX:
            return value.startswith(self.value)
        if op == EXISTS:
            return True
        number = to_number(value)
        if number is None:
            return False
        return number < self.number if op == LT else number > self.number


def to_number(data: bytes) -> float | None:
    """A decimal number (12, -3.5, 1e3), finite; None otherwise."""
    if not data or data.strip() != data or b"_" in data:
        return None
    try:
        number = float(data)
    except ValueError:
        return None
    return number if math.isfinite(number) else None


def parse_condition(args: list[bytes], j: int) -> tuple[Condition, int]:
    """The WHERE whose key is args[j], and the index after it. Raises BAD_WHERE (or
    WHERE_NOT_NUMBER for < and > with no number)."""
    if j + 1 >= len(args):
        raise BAD_WHERE
    key, op = args[j], _OPS.get(args[j + 1].lower())
    if op is None or not 0 < len(key) <= MAX_KEY_LEN:
        raise BAD_WHERE
    if op == EXISTS:
        return Condition(key, op), j + 2
    if j + 2 >= len(args):
        raise BAD_WHERE
    value = args[j + 2]
    if op == LT or op == GT:
        number = to_number(value)
        if number is None:
            raise WHERE_NOT_NUMBER
        return Condition(key, op, value, number), j + 3
    return Condition(key, op, value), j + 3


def job_matches(job: Job, conditions: list[Condition]) -> bool:
    ext = job.ext
    if ext is None or ext.attrs is None:
        return False
    attrs = dict(ext.attrs)
    for condition in conditions:
        if not condition.matches(attrs):
            return False
    return True
