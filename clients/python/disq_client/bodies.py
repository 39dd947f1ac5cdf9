"""Job bodies are bytes on the wire. These helpers turn text, JSON and msgpack values
into bodies and back; `Job.text()`, `Job.json()` and `Job.msgpack()` use them."""

from __future__ import annotations

import json
from typing import Any

import msgpack

Body = bytes | bytearray | memoryview | str


def to_body(value: Body) -> bytes:
    """bytes as they are, str as UTF-8."""
    if isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode()
    if isinstance(value, bytearray | memoryview):
        return bytes(value)
    raise TypeError(f"a job body must be bytes or str, not {type(value).__name__} "
                    "(use disq_client.bodies.json_body or msgpack_body for other values)")


def json_body(value: Any) -> bytes:
    """A compact UTF-8 JSON body."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()


def from_json(body: bytes) -> Any:
    return json.loads(body)


def msgpack_body(value: Any) -> bytes:
    data: bytes = msgpack.packb(value, use_bin_type=True)
    return data


def from_msgpack(body: bytes) -> Any:
    return msgpack.unpackb(body, raw=False)


def text(body: bytes) -> str:
    return body.decode()
