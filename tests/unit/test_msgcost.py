"""disq._msgcost: what a bus frame would take once decoded, counted from its bytes
(messages.py refuses a frame over its budget before decoding it)."""

from __future__ import annotations

import importlib
import struct
import tracemalloc
from typing import Any

import msgpack
import pytest
from fuzzing import fuzz_settings
from hypothesis import given
from hypothesis import strategies as st

from disq.cluster import messages as m

try:
    msgcost: Any = importlib.import_module("disq._msgcost")
except ImportError:  # built at install where there is a compiler
    msgcost = None
pytestmark = pytest.mark.skipif(msgcost is None, reason="disq._msgcost is not built")

scalars = (st.none() | st.booleans() | st.integers(-2**63, 2**64 - 1) | st.floats()
           | st.text(max_size=50) | st.binary(max_size=50))
objects = st.recursive(scalars, lambda children: st.lists(children, max_size=20),
                       max_leaves=200)


def decoded_size(data: bytes) -> int:
    """What msgpack-python allocates to decode `data` (tracemalloc)."""
    tracemalloc.start()
    try:
        obj = msgpack.unpackb(data, raw=False)
        size = tracemalloc.get_traced_memory()[0]
        del obj
    finally:
        tracemalloc.stop()
    return size


@fuzz_settings()
@given(objects)
def test_the_count_follows_what_decoding_allocates(obj: object) -> None:
    """(Within a factor and a slack: CPython takes small lists and floats from free
    lists that tracemalloc does not see, 80 lists at most.)"""
    data = msgpack.packb(obj, use_bin_type=True)
    counted = msgcost.cost(data, 0, len(data), 2**62)
    real = decoded_size(data)
    assert counted <= 2 * real + 8000
    assert real <= 2 * counted + 8000


@pytest.mark.parametrize("name, obj", [
    ("empty arrays", [[]] * 20_000),
    ("job IDs", [f"{i:040x}" for i in range(20_000)]),
    ("PAUSEs", [[m.PAUSE, b"q", 3]] * 20_000),
    ("big ints", [2**40 + i for i in range(20_000)]),
])
def test_dense_payloads_within_ten_percent(name: str, obj: object) -> None:
    data = msgpack.packb(obj, use_bin_type=True)
    counted = msgcost.cost(data, 0, len(data), 2**62)
    assert abs(counted - decoded_size(data)) < decoded_size(data) / 10, name


def test_it_stops_past_the_limit_and_reads_a_slice() -> None:
    data = b"junk" + b"\xdd" + struct.pack(">I", 1000) + b"\x90" * 1000 + b"junk"
    assert msgcost.cost(data, 4, len(data) - 4, 2**62) == 56 + 8 * 1000 + 56 * 1000
    assert msgcost.cost(data, 4, len(data) - 4, 100) == 56 + 8 * 1000  # the first array


@pytest.mark.parametrize("data, error", [
    (b"\x81\x00\x00", "a map"),
    (b"\xd4\x01\x00", "an ext type"),
    (b"\x93\x00", "truncated"),
    (b"\xdd\xff\xff\xff\xff", "truncated"),
    (b"\xc4\x10abc", "truncated"),
    (b"\x90\x90", "extra bytes"),
    (b"\x91" * 600 + b"\x90", "nested too deep"),
])
def test_what_the_bus_never_sends_is_refused(data: bytes, error: str) -> None:
    with pytest.raises(ValueError, match=error):
        msgcost.cost(data, 0, len(data), 2**62)


def test_a_big_frame_over_its_budget_is_refused_before_decoding() -> None:
    """A frame of 1 MB of empty arrays (64 MB once decoded) fails from its bytes:
    FrameError names the budget."""
    count = m.PLAIN_DECODE_MAX * 4
    payload = msgpack.packb([m.VERSION, "f" * 40, 7000, [], [[m.PING, []]]])[:-1]
    payload = (b"\x95" + payload[1:] + b"\x91\xdd" + struct.pack(">I", count + 1) + b"\x00"
               + b"\x90" * count)
    reader = m.FrameReader()
    with pytest.raises(m.FrameError, match="would decode into more than"):
        list(reader.feed(struct.pack(">I", len(payload)) + payload))
