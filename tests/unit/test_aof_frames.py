"""The AOF's checksummed and encrypted frames (disq/aof/frames.py): what the writer's
codec writes reads back, every damage is found at its frame's offset, a cut-off last
frame is told from damage, keys are checked, and the loader's aof-load-corrupt."""

from __future__ import annotations

from pathlib import Path

import pytest

from disq.aof.fileformat import FormatError, RecordReader, deljob_record, loadjob_record
from disq.aof.frames import (
    FRAME_SIZE,
    HEADER_SIZE,
    Codec,
    FramedReader,
    KeyFileError,
    WrongKey,
    load_key,
    reader_for,
)
from disq.aof.loader import AofLoader, AofLoadError
from disq.aof.serialize import JobEncoder
from disq.config import Config
from disq.job import QUEUED, Job
from disq.node import Node, now_ms

ME = "a" * 40
KEY = bytes(range(32))
OTHER_KEY = bytes(32)


ETIME = now_ms() + 3_600_000


def job_record(n: int) -> bytes:
    job = Job(b"D-aaaaaaaa-%024d-05a1" % n, b"q", b"body %d" % n, QUEUED, n, ETIME, 0, 60, 1)
    return loadjob_record(JobEncoder(ME).serialize(job))


def framed_file(codec: Codec, groups: list[list[bytes]]) -> tuple[bytes, list[int]]:
    """A file of one frame per group of records, and where each frame starts."""
    data = codec.header()
    starts = []
    for records in groups:
        starts.append(len(data))
        data += codec.frame(b"".join(records))
    return data, starts


GROUPS = [[job_record(0)], [job_record(1), job_record(2)], [deljob_record(b"D-x" * 13 + b"x")],
          [job_record(3)]]


def records_of(reader: RecordReader | FramedReader) -> list[list[bytes]]:
    return [args for _, args in reader]


@pytest.mark.parametrize("key", [None, KEY])
def test_frames_read_back_the_records_written(key: bytes | None) -> None:
    data, starts = framed_file(Codec(key), GROUPS)
    assert data.startswith(b"DISQAOF\x01")
    reader = reader_for(data, key)
    assert isinstance(reader, FramedReader)
    expected = [args for group in GROUPS for r in group for _, args in RecordReader(r)]
    assert records_of(reader) == expected
    assert reader.pos == len(data) and reader.cut_off is None and reader.frames == 4
    if key is None:  # checksums only: the records are there, at their own offsets
        offsets = [offset for offset, _ in reader_for(data, None)]
        assert offsets[0] == starts[0] + FRAME_SIZE
        assert data[offsets[2]:].startswith(job_record(2))
    else:
        assert b"body 1" not in data and b"LOADJOB" not in data


def test_a_plain_file_is_read_as_disques_records() -> None:
    data = b"".join(r for group in GROUPS for r in group)
    reader = reader_for(data, None)
    assert type(reader) is RecordReader and len(records_of(reader)) == 5


@pytest.mark.parametrize("key", [None, KEY])
def test_every_flipped_byte_is_found_and_no_changed_record_loads(key: bytes | None) -> None:
    data, starts = framed_file(Codec(key), GROUPS)
    good = records_of(reader_for(data, key))
    for pos in range(len(data)):
        for mask in (0x01, 0xff):
            bad = bytearray(data)
            bad[pos] ^= mask
            try:
                reader = reader_for(bytes(bad), key)
                loaded = records_of(reader)
            except FormatError as exc:
                assert pos < HEADER_SIZE or exc.offset == max(s for s in starts if s <= pos)
                continue
            except WrongKey:  # the header's key id hit: still refused
                assert key is not None and pos < HEADER_SIZE
                continue
            # Only a file that ends in a zero reads as a cut-off tail (its last frame
            # one byte short, then a file system's zeros): the last byte zeroed, or,
            # when the last frame's tag or CRC ends in 0 itself (1 file in 256), any
            # byte of that frame changed. Either way the changed record is not loaded.
            assert reader.cut_off is not None and bad[-1] == 0, pos
            assert loaded == good[:len(loaded)]


@pytest.mark.parametrize("key", [None, KEY])
def test_every_cut_is_a_cut_off_tail(key: bytes | None) -> None:
    data, starts = framed_file(Codec(key), GROUPS)
    for cut in range(len(data)):
        reader = reader_for(data[:cut], key)
        records = records_of(reader)
        whole = [s for s in [*starts, len(data)] if s <= cut]
        if cut < HEADER_SIZE:
            assert records == [] and reader.pos == 0 and (cut == 0 or reader.cut_off)
            continue
        assert reader.pos == whole[-1], cut
        assert (reader.cut_off is None) == (cut == whole[-1])
        # a cut-off tail followed by the zeros a file system may leave (unless the byte
        # cut off is a zero itself: then the zeros give the frame its own bytes back,
        # as a tag or CRC ending in 0 does once in 256 files)
        if cut < len(data) and data[cut] == 0:
            continue
        padded = reader_for(data[:cut] + bytes(100), key)
        assert records_of(padded) == records and padded.pos == reader.pos


def test_a_frame_changed_without_the_key_fails_authentication() -> None:
    from crc32c import crc32c

    from disq.aof.frames import FRAME
    data, starts = framed_file(Codec(KEY), GROUPS)
    at = starts[1]
    length, complement, _ = FRAME.unpack(data[at:at + FRAME_SIZE])
    payload = bytearray(data[at + FRAME_SIZE:at + FRAME_SIZE + length])
    payload[20] ^= 1
    head = FRAME.pack(length, complement, crc32c(bytes(payload)))  # a checksum made to fit
    forged = data[:at] + head + bytes(payload) + data[at + FRAME_SIZE + length:]
    with pytest.raises(FormatError, match="fails authentication") as found:
        records_of(reader_for(forged, KEY))
    assert found.value.offset == at


def test_an_encrypted_file_needs_its_own_key() -> None:
    data, _ = framed_file(Codec(KEY), GROUPS)
    with pytest.raises(WrongKey, match="written with another key"):
        reader_for(data, OTHER_KEY)
    with pytest.raises(WrongKey, match="is encrypted"):
        reader_for(data, None)
    frames = reader_for(data, None, frames_only=True)  # disq-check-aof without the key
    assert records_of(frames) == [] and frames.frames == 4 and frames.pos == len(data)


def test_nonces_never_repeat_in_a_file() -> None:
    codec = Codec(KEY)
    nonces = {codec.frame(b"x")[FRAME_SIZE:FRAME_SIZE + 12] for _ in range(1000)}
    assert len(nonces) == 1000


def test_key_files(tmp_path: Path) -> None:
    path = tmp_path / "aof.key"
    path.write_text(KEY.hex() + "\n")
    assert load_key(str(path)) == KEY
    path.write_text(KEY.hex()[:-2])
    with pytest.raises(KeyFileError, match="64 hex digits .*it holds 62 characters"):
        load_key(str(path))
    path.write_text("g" * 64)
    with pytest.raises(KeyFileError, match="not all hex digits"):
        load_key(str(path))
    path.write_bytes(KEY)  # raw bytes are not accepted: one form only
    with pytest.raises(KeyFileError, match="64 hex digits"):
        load_key(str(path))
    with pytest.raises(KeyFileError, match="can't read .*missing"):
        load_key(str(tmp_path / "missing"))


# -- the loader ------------------------------------------------------------------------

def load(path: Path, *, corrupt: str = "refuse", key: bytes | None = None) -> Node:
    node = Node(Config(), ME)
    node.arm_timer = lambda when: None
    key_file = ""
    if key is not None:
        (path.parent / "key").write_text(key.hex())
        key_file = str(path.parent / "key")
    loader = AofLoader(node, str(path), enqueue_jobs=False, load_truncated=True,
                       known_ids={ME: ME}, key_file=key_file, load_corrupt=corrupt)
    for _ in loader.run():
        pass
    return node


@pytest.mark.parametrize("key", [None, KEY])
def test_load_corrupt_refuse_names_the_offset_and_the_directive(tmp_path: Path,
                                                               key: bytes | None) -> None:
    data, starts = framed_file(Codec(key), GROUPS)
    bad = bytearray(data)
    bad[starts[1] + FRAME_SIZE + 30] ^= 4
    path = tmp_path / "disque.aof"
    path.write_bytes(bytes(bad))
    with pytest.raises(AofLoadError, match=f"at offset {starts[1]}: .*aof-load-corrupt"):
        load(path, key=key)
    assert path.read_bytes() == bytes(bad)  # untouched
    node = load(path, corrupt="truncate", key=key)
    assert [job.body for job in node.jobs.values()] == [b"body 0"]
    assert path.read_bytes() == data[:starts[1]]
    assert len(load(path, key=key).jobs) == 1  # and it loads as it is now


def test_load_refuses_another_key_and_leaves_the_file(tmp_path: Path) -> None:
    data, _ = framed_file(Codec(KEY), GROUPS)
    path = tmp_path / "disque.aof"
    path.write_bytes(data + b"cut")
    with pytest.raises(AofLoadError, match="written with another key.*left as it is"):
        load(path, key=OTHER_KEY)
    with pytest.raises(AofLoadError, match="is encrypted"):
        load(path)
    assert path.read_bytes() == data + b"cut"
    assert len(load(path, key=KEY).jobs) == 4


def test_load_corrupt_truncate_applies_to_plain_files_too(tmp_path: Path) -> None:
    records = [job_record(n) for n in range(3)]
    path = tmp_path / "disque.aof"
    path.write_bytes(records[0] + b"#garbage\r\n" + records[1] + records[2])
    node = load(path, corrupt="truncate")
    assert len(node.jobs) == 1 and path.read_bytes() == records[0]
