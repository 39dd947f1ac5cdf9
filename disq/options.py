"""The commands' options as the RESP server parses them: each option of a table
(disq_client.spec) compiled once into an `OptionParser` (how its value converts, the
error its bad values get), and the loops that set a typed request's fields from a
request's arguments (`parse_options`, `options_before_ids`) or from JSON (`set_fields`).
requests.py, end_requests.py and queue_requests.py build their typed requests with them.

Numbers follow the strtoll() rules Disque uses: an optional sign and decimal digits,
nothing around them, 64-bit range; an empty string is 0."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Final, cast

from disq_client.spec import (
    BYTES,
    CHOICE,
    FLAG,
    INT,
    INT_PAIR,
    MS,
    NUMBER,
    QUEUE_BODY,
    STR_PAIR,
    CommandOptions,
    Option,
)

from . import errors
from .errors import FixedError, fixed
from .ids import is_valid_job_id

_LL_MIN: Final = -(2**63)
_LL_MAX: Final = 2**63 - 1
# The canonical spellings of small numbers (REPLICATE 2, RETRY 30, COUNT 10...) and of
# round timeouts (ADDJOB ... 5000, GETJOB TIMEOUT 10000): one dict lookup for the
# values clients send on every request.
_SMALL: Final[dict[bytes, int]] = {b"%d" % i: i for i in (*range(1025), *range(1100, 120_001, 100))}

TIMEOUT_NOT_INT: Final = fixed("TIMEOUT_NOT_INT", "ERR", "timeout is not an integer or out of range")
TIMEOUT_NEGATIVE: Final = fixed("TIMEOUT_NEGATIVE", "ERR", "timeout is negative")


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


def timeout_ms(arg: bytes) -> int:
    value = parse_int(arg)
    if value is None:
        raise TIMEOUT_NOT_INT
    if value < 0:
        raise TIMEOUT_NEGATIVE
    return value


def validate_ids(ids: list[bytes]) -> list[bytes]:
    """Disque checks every ID before touching any job."""
    for job_id in ids:
        if not is_valid_job_id(job_id):
            raise errors.BADID
    return ids


class OptionParser:
    """One option of a command, compiled for the RESP parser: how its value converts,
    and the error its bad values get."""

    __slots__ = ("field", "kind", "low", "high", "min_len", "max_len", "error", "choices",
                 "repeat", "value", "values")

    def __init__(self, option: Option) -> None:
        self.field = option.field
        self.kind = option.kind
        self.low, self.high = option.low, option.high
        self.min_len, self.max_len = option.min_len, option.max_len
        self.error: type[FixedError] | None = (
            fixed(option.token, "ERR", option.error) if option.error else None)
        self.choices = {choice.encode(): choice for choice in option.choices}
        self.repeat = option.repeat
        self.values = option.values  # arguments after the token
        # The converter of this kind of value, picked once (ADDJOB's options are on
        # the hot path). INT_PAIR's takes the first of its two arguments (`pair`).
        self.value: Callable[[bytes], object] = {
            INT: self._int, MS: timeout_ms, BYTES: self._bytes, CHOICE: self._choice,
            NUMBER: self._number,
        }.get(option.kind, _true)

    def _int(self, arg: bytes) -> int:
        number = _SMALL.get(arg)
        if number is None:
            number = parse_int(arg)
        if number is None or not self.low <= number <= self.high:
            raise self.error  # type: ignore[misc]
        return number

    def _number(self, arg: bytes) -> float:
        try:
            # float() also takes spaces around and digits grouped with "_": not here
            number = float(arg) if arg.strip() == arg and b"_" not in arg else None
        except ValueError:
            number = None
        if number is None or not self.low < number <= self.high:  # (NaN: False)
            raise self.error  # type: ignore[misc]
        return number

    def pair(self, first: bytes, second: bytes) -> tuple[object, object]:
        """INT_PAIR: two integers in [low, high], the second not below the first;
        QUEUE_BODY: a queue name of min_len to max_len bytes and a body; STR_PAIR: a
        key of min_len to max_len bytes and a value of at most `high` bytes."""
        if self.kind == QUEUE_BODY:
            return self._bytes(first), second
        if self.kind == STR_PAIR:
            if len(second) > self.high:
                raise self.error  # type: ignore[misc]
            return self._bytes(first), second
        low, high = self._int(first), self._int(second)
        if high < low:
            raise self.error  # type: ignore[misc]
        return low, high

    def _bytes(self, arg: bytes) -> bytes:
        if not self.min_len <= len(arg) <= self.max_len:
            raise self.error  # type: ignore[misc]
        return arg

    def _choice(self, arg: bytes) -> str:
        choice = self.choices.get(arg) or self.choices.get(arg.lower())
        if choice is None:
            raise self.error  # type: ignore[misc]
        return choice

    def typed(self, value: object) -> object:
        """A value given typed (a JSON field of the kind its option wants: an int, a
        str, a float, a pair of ints) checked as the same value written in a RESP
        request is: the same bounds, the same errors."""
        if self.kind == FLAG:
            return True
        if self.repeat and isinstance(value, list):  # every value given, as a list
            return [self.typed(item) for item in value]
        if self.kind == INT_PAIR or self.kind == QUEUE_BODY or self.kind == STR_PAIR:
            pair = cast("tuple[object, object]", value)
            return self.pair(*(v if type(v) is bytes else str(v).encode() for v in pair))
        return self.value(value if type(value) is bytes else str(value).encode())


def _true(arg: bytes) -> bool:
    return True


def compile_options(spec: CommandOptions) -> dict[bytes, OptionParser]:
    parsers = {o.field: OptionParser(o) for o in spec.options}
    return {token: parsers[o.field] for token, o in spec.by_token.items()}


def parsers_by_field(parsers: dict[bytes, OptionParser]) -> dict[str, OptionParser]:
    return {parser.field: parser for parser in parsers.values()}


def set_fields(request: object, parsers: dict[str, OptionParser],
                values: Mapping[str, object]) -> set[str]:
    """Set `request`'s fields from `values` (field name -> typed value, in the order
    given; None and False leave an option out), each checked by its option's parser.
    A field the command does not have is a TypeError. The fields given are returned."""
    given: set[str] = set()
    for field, value in values.items():
        parser = parsers.get(field)
        if parser is None:
            raise TypeError(f"no option {field!r}")
        if value is None or value is False:
            continue
        setattr(request, field, parser.typed(value))
        given.add(field)
    return given


def parse_options(request: object, options: dict[bytes, OptionParser], args: list[bytes],
                   start: int, stop: bytes = b"", stop_too: bytes = b"") -> int:
    """Set `request`'s fields from the options from args[start] on, up to the token
    `stop` or `stop_too` (lowercase; not taken as an option's value), whose index is
    returned (len(args) if absent). An unknown token, or one whose value is missing,
    is a syntax error."""
    end = len(args)
    j = start
    while j < end:
        parser = options.get(args[j])
        if parser is None:
            token = args[j].lower()
            parser = options.get(token)
            if parser is None:
                if token and (token == stop or token == stop_too):
                    return j
                raise errors.SYNTAX
        if parser.kind == FLAG:
            setattr(request, parser.field, True)
        elif j + parser.values < end:
            if parser.values == 1:
                setattr(request, parser.field, parser.value(args[j + 1]))
            else:
                setattr(request, parser.field, parser.pair(args[j + 1], args[j + 2]))
            j += parser.values
        else:
            raise errors.SYNTAX
        j += 1
    return end


def options_before_ids(request: object, parsers: dict[bytes, OptionParser],
                       args: list[bytes]) -> int:
    """Set `request`'s fields from the options that come first, from args[1] up to the
    first job ID or argument that is no option's token (NACK's, WAITJOB's): its index.
    No job ID can be an option's token."""
    start = 1
    while start < len(args) and not is_valid_job_id(args[start]):
        parser = parsers.get(args[start]) or parsers.get(args[start].lower())
        if parser is None:
            break  # not an option: an ID, checked by the caller
        start = parse_options(request, parsers, args[:start + 1 + parser.values], start)
    return start
