"""The cost checks of an HTTP request's JSON (disq/server/http/jsonbody.py): where a
string starts and ends is read right through escapes, so that a bracket or a digit in
a string is never counted and one outside is never missed."""

from __future__ import annotations

import json

import pytest

from disq.server.http.jsonbody import MAX_DEPTH, MAX_DIGITS, check_cost, parse
from disq.server.http.problems import Problem

DEEP = f"deeper than {MAX_DEPTH}"
LONG = f"more than {MAX_DIGITS} digits"


def refusal(body: bytes) -> str | None:
    try:
        check_cost(body)
    except Problem as problem:
        return problem.detail
    return None


@pytest.mark.parametrize("text", [
    "[" * 1000, "]" * 1000 + "[" * 1000, "9" * 1000, '\\"' + "[" * 100, "\\" * 9 + "[" * 99,
    '"' * 70 + "{" * 70, "\u00e9[" * 100,
])
def test_what_is_in_a_string_is_only_text(text: str) -> None:
    body = json.dumps({"body": text, "other": [text, {"k": text}]}).encode()
    assert refusal(body) is None
    assert parse(body)["body"] == text


def test_depth_and_digits_are_counted_outside_strings() -> None:
    assert refusal(b"[" * MAX_DEPTH + b"]" * MAX_DEPTH) is None
    assert DEEP in (refusal(b"[" * (MAX_DEPTH + 1) + b"]" * (MAX_DEPTH + 1)) or "")
    # a string ending in an escaped backslash ends there: what follows is outside
    body = b'{"a": "x\\\\", "b": ' + b"[" * 65 + b"]" * 65 + b"}"
    assert DEEP in (refusal(body) or "")
    body = b'{"a": "x\\\\\\"", "b": ' + b"{" * 70 + b"}" * 70 + b"}"
    assert DEEP in (refusal(body) or "")
    # a flat list of many objects is not deep
    assert refusal(json.dumps([{"body": "x"}] * 10_000).encode()) is None
    assert refusal(b'{"ttl": ' + b"9" * MAX_DIGITS + b"}") is None
    assert LONG in (refusal(b'{"ttl": ' + b"9" * (MAX_DIGITS + 1) + b"}") or "")
    assert LONG in (refusal(b'{"s": "\\\\", "ttl": -1.' + b"0" * 50 + b"}") or "")
    assert LONG in (refusal(b"[1e" + b"9" * 100 + b"]") or "")


def test_a_lone_surrogate_escape_is_refused_and_a_pair_is_text() -> None:
    for lone in (b'"\\ud800"', b'"\\udc00"', b'"x\\uDBFFy"', b'"\\ud800\\\\udc00"',
                 b'"\\udc00\\ud800"'):
        assert "surrogate" in (refusal(b'{"body": ' + lone + b"}") or ""), lone
    assert parse(b'{"body": "\\ud83d\\ude00"}') == {"body": "\U0001f600"}
    assert parse(json.dumps({"body": "\U0001f600 \\ud800"}).encode())["body"] == (
        "\U0001f600 \\ud800")  # an escaped backslash, then text


@pytest.mark.parametrize("body", [b"NaN", b"[Infinity]", b"{", b"\xff\xfe[]", b'"\\ud800'])
def test_what_is_not_json_is_a_400(body: bytes) -> None:
    with pytest.raises(Problem) as raised:
        parse(body)
    assert raised.value.status == 400
