"""Argument parsing shared by the command modules, with the rules of the strtoll()
checks Disque uses: an optional sign and decimal digits, nothing around them, 64-bit
range; an empty string is 0."""

from __future__ import annotations

from ...errors import DisqError, fixed
from ...node import validate_ids

__all__ = ["parse_int", "int_or", "timeout_ms", "validate_ids"]

_LL_MIN, _LL_MAX = -(2**63), 2**63 - 1


# The canonical spellings of small numbers (REPLICATE 2, RETRY 30, COUNT 10...) and of
# round timeouts (ADDJOB ... 5000, GETJOB TIMEOUT 10000): one dict lookup for the
# values clients send on every request.
_SMALL = {b"%d" % i: i for i in (*range(1025), *range(1100, 120_001, 100))}


def parse_int(arg: bytes) -> int | None:
    """The integer value of `arg`, or None if Redis would not accept it."""
    value = _SMALL.get(arg)
    if value is not None:
        return value
    if not arg:
        return 0
    digits = arg[1:] if arg[0] in (43, 45) else arg  # '+' or '-'
    if not digits.isdigit() or len(digits) > 40:
        return None
    value = int(arg)
    if value < _LL_MIN or value > _LL_MAX:
        return None
    return value


def int_or(arg: bytes, error: DisqError) -> int:
    value = parse_int(arg)
    if value is None:
        raise error
    return value


_TIMEOUT_NOT_INT = fixed("TIMEOUT_NOT_INT", "ERR", "timeout is not an integer or out of range")
_TIMEOUT_NEGATIVE = fixed("TIMEOUT_NEGATIVE", "ERR", "timeout is negative")


def timeout_ms(arg: bytes) -> int:
    value = parse_int(arg)
    if value is None:
        raise _TIMEOUT_NOT_INT
    if value < 0:
        raise _TIMEOUT_NEGATIVE
    return value
