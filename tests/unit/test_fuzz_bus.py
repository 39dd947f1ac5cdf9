"""Properties of the bus frame decoder (disq/cluster/messages.py) and the job decoder
of replication (disq/replication/wire.py): whatever the bytes, the only outcomes are
well-formed frames or FrameError (a job: a valid Job or None), never another
exception."""

from __future__ import annotations

import math
import struct

import msgpack
import pytest
from fuzzing import fuzz_settings
from hypothesis import example, given
from hypothesis import strategies as st

from disq.cluster import messages as m
from disq.job import Job
from disq.replication.wire import (
    COPY_FIELDS,
    FIELD_COUNT,
    decode_copy,
    decode_holders,
    decode_job,
    encode_job,
)

SENDER = "a" * 40
JOB_ID = b"D-aaaaaaaa-0123456789abcdefghijklmn-05a1"

# msgpack-able values of every type the decoder may meet
LEAVES = (st.none() | st.booleans() | st.integers(-2**63, 2**64 - 1) | st.floats(allow_nan=False)
          | st.text(max_size=20) | st.binary(max_size=20))
VALUES = st.recursive(LEAVES, lambda inner: st.lists(inner, max_size=5)
                      | st.dictionaries(st.text(max_size=5) | st.integers(-9, 9), inner, max_size=3),
                      max_leaves=20)
# what the bus sends: no maps (a frame with one is refused)
SENT_VALUES = st.recursive(LEAVES, lambda inner: st.lists(inner, max_size=5), max_leaves=20)
CUTS = st.lists(st.integers(0, 100_000), max_size=6)


def feed_in_pieces(data: bytes, cuts: list[int]) -> list[list]:
    """Feed `data` in pieces; returns the frames, or raises FrameError."""
    reader = m.FrameReader()
    points = sorted({c % (len(data) + 1) for c in cuts})
    bounds = [0, *points, len(data)]
    frames: list[list] = []
    for a, b in zip(bounds, bounds[1:], strict=False):
        frames += reader.feed(data[a:b])
    return frames


def check_frames(frames: list[list]) -> None:
    """What the link's code relies on in every frame it is given."""
    for frame in frames:
        assert type(frame) is list and len(frame) == 5 and frame[0] == m.VERSION
        assert type(frame[1]) is str and type(frame[2]) is int
        assert type(frame[3]) is list and type(frame[4]) is list
        for message in frame[4]:
            assert type(message) is list and message and type(message[0]) is int


def outcome(data: bytes, cuts: list[int]) -> list[list] | str:
    try:
        frames = feed_in_pieces(data, cuts)
    except m.FrameError:
        return "error"
    check_frames(frames)
    return frames


def frame_of(payload: object) -> bytes:
    packed = msgpack.packb(payload, use_bin_type=True)
    return struct.pack(">I", len(packed)) + packed


MESSAGES = st.lists(st.lists(SENT_VALUES, max_size=4).flatmap(
    lambda fields: st.integers(0, 30).map(lambda t: [t, *fields])), max_size=4)


@fuzz_settings(150)
@given(MESSAGES, CUTS)
def test_valid_frames_decode_whatever_the_reads(messages: list[list], cuts: list[int]) -> None:
    data = m.encode_frame(SENDER, 7711, ["leaving"], messages) * 2
    frames = feed_in_pieces(data, cuts)
    check_frames(frames)
    assert len(frames) == 2 and frames[0][1] == SENDER and frames[0][2] == 7711
    assert frames[0][4] == msgpack.unpackb(msgpack.packb(messages))


@fuzz_settings(150)
@given(st.binary(max_size=400), CUTS)
def test_random_bytes_are_frames_or_frame_errors(data: bytes, cuts: list[int]) -> None:
    outcome(data, cuts)


@fuzz_settings(150)
@given(MESSAGES, st.lists(st.tuples(st.integers(0, 2), st.integers(0, 10_000),
                                    st.integers(0, 255)), min_size=1, max_size=4), CUTS)
@example([[0], [0], [0, None, None, None], [0, None, [None, None, None, None, math.inf], None]],
         [(1, 0, 0), (0, 2042, 1), (2, 0, 0)], [])
def test_mutated_frames_are_frames_or_frame_errors(messages: list[list],
                                                   edits: list[tuple[int, int, int]],
                                                   cuts: list[int]) -> None:
    data = bytearray(m.encode_frame(SENDER, 7711, [], messages))
    for kind, pos, byte in edits:
        pos %= len(data) + 1
        if kind == 0 and pos < len(data):
            data[pos] = byte
        elif kind == 1:
            data.insert(pos, byte)
        else:
            del data[pos:pos + 1]
    whole = outcome(bytes(data), [])
    # The reads never change the outcome. Compared by repr: a mutated float may be a
    # NaN, which equals no NaN (CI found one: `inf` with a bit flipped).
    assert repr(outcome(bytes(data), cuts)) == repr(whole)


@fuzz_settings(150)
@given(st.one_of(VALUES, st.lists(VALUES, min_size=5, max_size=5),
                 st.tuples(st.just(m.VERSION), st.text(max_size=41) | VALUES,
                           st.integers(-5, 70000) | VALUES, st.lists(VALUES) | VALUES,
                           MESSAGES | st.lists(VALUES)).map(list)))
def test_wrong_typed_msgpack_is_refused_or_well_formed(payload: object) -> None:
    outcome(frame_of(payload), [])


def test_a_frame_too_long_is_refused_before_its_body() -> None:
    for limit in (m.MAX_FRAME, m.MAX_HANDSHAKE_FRAME):
        reader = m.FrameReader(limit)
        with pytest.raises(m.FrameError, match=f"frame of {limit + 1} bytes"):
            list(reader.feed(struct.pack(">I", limit + 1)))


def test_the_handshake_fits_its_limit_and_what_follows_it_the_frame_limit() -> None:
    """A link proving the cluster secret takes frames of MAX_HANDSHAKE_FRAME, then (set
    between two frames of one read) of MAX_FRAME."""
    auth = m.encode_frame("f" * 40, 55535, ["leaving"], [[m.AUTH, bytes(16)]])
    proof = m.encode_frame("f" * 40, 55535, ["leaving"], [[m.AUTH_PROOF, bytes(32)]])
    big = m.encode_frame(SENDER, 7711, [], [[m.REPLJOB, b"x" * 10_000]])
    reader = m.FrameReader(m.MAX_HANDSHAKE_FRAME)
    frames = []
    for frame in reader.feed(auth + proof + big):
        frames.append(frame)
        if frame[4][0][0] == m.AUTH_PROOF:
            reader.max_frame = m.MAX_FRAME
    assert [f[4][0][0] for f in frames] == [m.AUTH, m.AUTH_PROOF, m.REPLJOB]
    with pytest.raises(m.FrameError):
        list(m.FrameReader(m.MAX_HANDSHAKE_FRAME).feed(auth + big))


def header(count: int) -> bytes:
    """The start of a frame whose messages array holds `count` messages."""
    head = b"\x95" + b"".join(map(msgpack.packb, (m.VERSION, SENDER, 7711, [])))
    return head + b"\xdd" + struct.pack(">I", count)


def framed(payload: bytes) -> bytes:
    return struct.pack(">I", len(payload)) + payload


@pytest.mark.parametrize("shape", ["flat", "nested"])
def test_a_frame_may_not_decode_into_far_more_lists_than_its_bytes(shape: str) -> None:
    """Empty arrays: one byte each, 64 once decoded (20 MB of them made 1.4 GB)."""
    count = 2 * m.PLAIN_DECODE_MAX
    if shape == "flat":  # [[PING, [], [], ...]]
        payload = header(1) + b"\xdd" + struct.pack(">I", count + 1) + b"\x00" + b"\x90" * count
    else:  # [[PING, [[], [], ...]], ...]: arrays no single length limit stops
        message = b"\x92\x00\xdc" + struct.pack(">H", 1000) + b"\x90" * 1000
        payload = header(count // 1000) + message * (count // 1000)
    with pytest.raises(m.FrameError, match="would decode into more than"):
        list(m.FrameReader().feed(framed(payload)))
    small = header(1) + b"\xdc" + struct.pack(">H", 10_001) + b"\x00" + b"\x90" * 10_000
    assert len(next(m.FrameReader().feed(framed(small)))[4][0]) == 10_001  # decoded as is


@pytest.mark.parametrize("precount", [True, False])
def test_the_densest_legit_frames_decode(precount: bool, monkeypatch) -> None:
    """Batches of one loop turn, well over PLAIN_DECODE_MAX, with the most lists per
    byte the bus sends: DEDUP replies and PAUSEs of one-byte names, tiny jobs. Their
    lists fit the budget whether they are bounded first or counted as built."""
    if not precount:
        monkeypatch.setattr(m, "PRECOUNT_MAX", 0)
    copy = [JOB_ID.decode(), b"q", b"", 1, 0, 2, 300_000, 1, 0, 300, 0, 0]
    batches = [
        [[m.DEDUP_REPLY, *[[b"k", None, -1]] * 100_000]],
        [[m.PAUSE, b"q", 1]] * 100_000,
        [[m.QLEN_REQUEST, 1, b"q"]] * 100_000,
        [[m.REPLJOB, False, [SENDER], *[copy] * 30_000]],
        [[m.DEDUP_QUERY, *[[b"k", 1]] * 100_000]],
    ]
    for messages in batches:
        data = m.encode_frame(SENDER, 7711, [], messages)
        assert len(data) > m.PLAIN_DECODE_MAX
        assert next(m.FrameReader().feed(data))[4] == messages


@pytest.mark.parametrize("value", [{}, {"a": 1}, msgpack.ExtType(1, b""),
                                   msgpack.ExtType(5, b"abc")])
def test_maps_and_ext_types_are_refused(value: object) -> None:
    """Never sent by the bus; an empty map is a byte that decodes into 64."""
    with pytest.raises(m.FrameError, match="undecodable frame"):
        list(m.FrameReader().feed(frame_of([m.VERSION, SENDER, 7711, [], [[0, value]]])))


# -- jobs on the bus ---------------------------------------------------------------------

def a_job() -> Job:
    job = Job(JOB_ID, b"q", b"body", 1, 1_700_000_000_000_000_000, 2_000_000_000_000, 0, 60, 2)
    job.nodes_delivered = frozenset({SENDER, "b" * 40})
    return job


@fuzz_settings(150)
@given(st.lists(VALUES, min_size=FIELD_COUNT, max_size=FIELD_COUNT) | VALUES)
def test_decode_job_takes_anything(data: object) -> None:
    job = decode_job(data, 1_000, {SENDER: SENDER})
    assert job is None or isinstance(job, Job)


@fuzz_settings(150)
@given(st.integers(0, FIELD_COUNT - 1), VALUES)
def test_decode_job_with_one_field_replaced(index: int, value: object) -> None:
    data = encode_job(a_job(), SENDER, 1_000)
    data[index] = value
    job = decode_job(data, 1_000, {SENDER: SENDER})
    if job is not None:  # a valid value: the job says what was sent
        assert job.id == JOB_ID or index == 0
        assert job.nodes_delivered is not None and job.nodes_delivered <= {SENDER}


@fuzz_settings(150)
@given(st.lists(VALUES, min_size=COPY_FIELDS, max_size=COPY_FIELDS) | VALUES)
def test_decode_copy_takes_anything(data: object) -> None:
    job = decode_copy(data, 1_000)
    assert job is None or (isinstance(job, Job) and job.nodes_delivered is None)


@fuzz_settings(150)
@given(st.lists(VALUES | st.sampled_from([SENDER, "b" * 40]), max_size=5) | VALUES)
def test_decode_holders_keeps_known_ids_only(data: object) -> None:
    holders = decode_holders(data, {SENDER: SENDER}, "m" * 40)
    assert holders is None or holders <= {SENDER, "m" * 40}
