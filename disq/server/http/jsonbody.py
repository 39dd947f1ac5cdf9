"""A request's body as JSON, at a bounded cost: read within `http-read-timeout` (408
after it), refused (400) before it is parsed when it nests deeper than MAX_DEPTH
(Python's parser recurses: 200,000 levels exhaust the stack) or holds a number of more
than MAX_DIGITS digits (turning a long one into an int is quadratic, and Python
refuses past 4,300 digits). Both are checked by passes of bytes methods over the body
(C loops, no Python per byte), the strings left out (a bracket or a digit in one is
only text): a few linear scans of at most http-max-body bytes."""

from __future__ import annotations

import asyncio
import json
import re
from itertools import accumulate
from typing import Any

from aiohttp import web

from .problems import Problem, bad_request

MAX_DEPTH = 64  # a job is an object in a list at most; policies one level more
MAX_DIGITS = 40  # any integer disq takes has 19 at most, a float's shortest form 17
_STRUCTURE = b'[]{}"'
_NOT_STRUCTURE = bytes(c for c in range(256) if c not in _STRUCTURE)
_DEPTH_STEP = [0] * 256
for _c in b"[{":
    _DEPTH_STEP[_c] = 1
for _c in b"]}":
    _DEPTH_STEP[_c] = -1
_DIGIT_RUNS = bytes.maketrans(b"0123456789", b"0000000000")
_LONG_RUN = b"0" * (MAX_DIGITS + 1)
# A \uD800-\uDFFF escape that is not half of a pair: JSON's parser lets it through,
# and a string holding it cannot be encoded (the job's body, a queue name...).
_LONE_SURROGATE = re.compile(rb"\\u[dD][89abAB][0-9a-fA-F]{2}(?!\\u[dD][c-fC-F])"
                             rb"|(?<!\\u[dD][89abAB][0-9a-fA-F]{2})\\u[dD][c-fC-F]")


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _outside_strings(plain: bytes) -> list[bytes]:
    """The pieces of a body outside its strings, once escapes are blanked out (every
    quote left opens or closes a string: the even pieces are outside them)."""
    return plain.split(b'"')[::2]


def check_cost(body: bytes) -> None:
    """Raise a 400 for a body too deep or with too long a number (see above), or with
    a lone UTF-16 surrogate escaped in a string (`"\\ud800"`). Where a
    string starts and ends is all that is parsed: escaped backslashes, then escaped
    quotes, are blanked out (a JSON parser stops at the first backslash outside a
    string, so the count can be off only past where parsing stops)."""
    plain = body.replace(b"\\\\", b"  ").replace(b'\\"', b"  ")
    if plain.count(b"[") + plain.count(b"{") > MAX_DEPTH:  # else it cannot nest deeper
        brackets = b"".join(_outside_strings(plain.translate(None, _NOT_STRUCTURE)))
        if len(brackets) > MAX_DEPTH and max(
                accumulate(map(_DEPTH_STEP.__getitem__, brackets))) > MAX_DEPTH:
            raise bad_request(f"the request body is JSON nested deeper than {MAX_DEPTH} "
                              "levels")
    if _LONG_RUN in plain.translate(_DIGIT_RUNS):  # in a string, maybe: look closer
        outside = b" ".join(_outside_strings(plain))
        if _LONG_RUN in outside.translate(_DIGIT_RUNS):
            raise bad_request(f"a number in the request body has more than {MAX_DIGITS} "
                              "digits")
    if b"\\u" in plain and _LONE_SURROGATE.search(plain):
        raise bad_request("the request body has a \\u escape of half a UTF-16 surrogate "
                          "pair: no text holds one")


def parse(body: bytes) -> Any:
    """The JSON value of a request body (UTF-8, as RFC 8259 has it: the checks read its
    bytes as ASCII); 400 for one that is not JSON or costs too much."""
    check_cost(body)
    try:
        return json.loads(body.decode(), parse_constant=_no_constant)
    except (ValueError, UnicodeDecodeError, RecursionError):
        raise bad_request("the request body is not JSON") from None


async def read_json(request: web.Request, read_timeout: float) -> Any:
    """The request's body as JSON ({} without one), read within `read_timeout` s."""
    if not request.can_read_body:
        return {}
    try:
        async with asyncio.timeout(read_timeout):
            body = await request.read()
    except TimeoutError:
        raise Problem(408, f"the request body did not arrive within http-read-timeout "
                           f"({read_timeout:g} s)", "TIMEOUT") from None
    return parse(body)
