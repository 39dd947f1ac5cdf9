"""The AOF with checksums, and encrypted at rest: a header, then frames of records.

    header (32 bytes)  b"DISQAOF" 0x01 | mode: 1 CRC32C, 2 AES-256-GCM | 3 zero bytes
                       | key id (16 bytes; zeros without a key) | CRC32C of the 28 before
    frame              <u32 length> <u32 length XOR 0xffffffff> <u32 CRC32C(payload)>
                       then `length` bytes of payload: whole records (fileformat.py), or,
                       encrypted, a 12-byte nonce + AES-256-GCM(records) + its 16-byte tag

Disque's file (and an older disq's, or one written with `aof-checksum no`) starts with
`*`: `reader_for` tells the formats apart by the first bytes, so such a file loads as
before. One frame holds what one write writes (every record of a loop turn; a slice of
a rewrite), so the checksum and the encryption cost once per write, not per record.

A flipped byte fails the CRC (or the GCM tag: a frame whose CRC was recomputed by
someone without the key); a damaged length fails its complement, so a frame that runs
past the end of the file is a cut-off tail only when its header is sound. Damage is
reported at the offset of its frame. One CRC32C call per frame: the call, not the
bytes, is what costs (about 1,900 instructions for 200 bytes, with the CPU's CRC32
instruction), so the header's check is the complement rather than a second CRC.

The key file holds the key as 64 hex digits (whitespace around them ignored), e.g.
`openssl rand -hex 32 > aof.key`: one unambiguous form (a raw 32-byte file cannot be
told from a 32-character passphrase). The key id in the header is a hash of the key, so
the loader names "another key" instead of failing on every frame. Nonces: 8 random
bytes per file opened, then a 32-bit counter (a fresh random prefix when it wraps).
"""

from __future__ import annotations

import errno
import hashlib
import os
import struct
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from crc32c import crc32c

from ..config import ConfigError
from .fileformat import (
    Buffer,
    FormatError,
    Incomplete,
    RecordReader,
    before_zeros,
    parse_record,
)

if TYPE_CHECKING:
    from ..config import Settings

MAGIC = b"DISQAOF\x01"
HEADER = struct.Struct("<8sB3x16sI")
HEADER_SIZE = HEADER.size  # 32
FRAME = struct.Struct("<III")
FRAME_SIZE = FRAME.size  # 12
U32 = struct.Struct("<I")
MASK = 0xFFFFFFFF
CRC, AES = 1, 2
MODES = {CRC: "CRC32C", AES: "AES-256-GCM"}
NONCE_SIZE, TAG_SIZE = 12, 16
NO_KEY = bytes(16)


class KeyFileError(OSError):
    """aof-encryption-key-file is missing, unreadable or not a key. An OSError, so the
    places that handle a failed open or write (start-up, rewrites) handle it too."""

    def __init__(self, message: str) -> None:
        super().__init__(errno.EINVAL, message)


def load_key(path: str) -> bytes:
    """The 32-byte key of a key file (64 hex digits)."""
    try:
        with open(path, "rb") as fh:
            text = fh.read(1024)
    except OSError as exc:
        raise KeyFileError(f"can't read aof-encryption-key-file '{path}': "
                           f"{exc.strerror}") from None
    digits = text.strip()
    try:
        key = bytes.fromhex(digits.decode("ascii"))
    except (UnicodeDecodeError, ValueError):
        key = b""
    if len(key) != 32:
        found = (f"it holds {len(digits)} characters" if len(digits) != 64
                 else "its 64 characters are not all hex digits")
        raise KeyFileError(
            f"aof-encryption-key-file '{path}' must hold a 32-byte key as 64 hex digits "
            f"(e.g. from 'openssl rand -hex 32'): {found}")
    return key


def key_id(key: bytes) -> bytes:
    """Names a key without giving it away."""
    return hashlib.sha256(b"disq aof key id\0" + key).digest()[:16]


def prepare(config: Any) -> None:
    """At start-up: make the key file's path absolute (the node enters `dir` later; a
    rewrite reads the file again) and read it, so that a missing or bad key file stops
    the start before anything is written."""
    path = config.aof_encryption_key_file
    if path:
        config.apply("aof-encryption-key-file", [os.path.abspath(path)])
        try:
            load_key(config.aof_encryption_key_file)
        except KeyFileError as exc:
            raise ConfigError(exc.strerror) from None


class Codec:
    """Frames the records of one file: CRC32C, and AES-256-GCM with a key."""

    __slots__ = ("mode", "key_id", "_aead", "_prefix", "_counter")

    def __init__(self, key: bytes | None = None) -> None:
        self.mode = CRC if key is None else AES
        self.key_id = NO_KEY if key is None else key_id(key)
        self._aead: Any = None
        if key is not None:
            from cryptography.hazmat.primitives.ciphers.aead import AESGCM
            self._aead = AESGCM(key)
        self._prefix = os.urandom(8)
        self._counter = 0

    def describe(self) -> str:
        return describe(self.mode, self.key_id)

    def header(self) -> bytes:
        head = HEADER.pack(MAGIC, self.mode, self.key_id, 0)[:-4]
        return head + U32.pack(crc32c(head))

    def frame(self, data: bytes) -> bytes:
        aead = self._aead
        if aead is not None:
            self._counter += 1
            if self._counter == 1 << 32:
                self._prefix, self._counter = os.urandom(8), 1
            nonce = self._prefix + U32.pack(self._counter)
            data = nonce + aead.encrypt(nonce, data, None)
        n = len(data)
        return FRAME.pack(n, n ^ MASK, crc32c(data)) + data


def describe(mode: int, kid: bytes) -> str:
    if mode == AES:
        return f"AES-256-GCM frames, key id {kid.hex()}"
    return "CRC32C frames"


def configured_codec(config: Settings) -> Codec | None:
    """The format new files are written in: encrypted with the key file's key (read
    now: a rewrite after the file changed uses the new key), checksummed, or Disque's
    plain records (`aof-checksum no`). Raises KeyFileError."""
    if config.aof_encryption_key_file:
        return Codec(load_key(config.aof_encryption_key_file))
    if config.aof_checksum:
        return Codec()
    return None


def describe_codec(codec: Codec | None) -> str:
    return "plain records" if codec is None else codec.describe()


def codec_of_file(path: str, wanted: Codec | None) -> Codec | None:
    """The format a loaded AOF file is in (the loader checked it is sound): `wanted`,
    the configured one, if the file is in it; else checksums only, or Disque's plain
    records. Raises KeyFileError for a file encrypted with another key."""
    with open(path, "rb") as fh:
        header = read_header(fh.read(HEADER_SIZE))
    if header is None:
        return None
    if wanted is not None and header.key_id == wanted.key_id:
        return wanted  # (also checksums only, wanted)
    if header.mode == CRC:
        return Codec()
    raise KeyFileError("the AOF was written with another key than "
                       "aof-encryption-key-file's")


class Header:
    def __init__(self, mode: int, kid: bytes) -> None:
        self.mode = mode
        self.key_id = kid

    def describe(self) -> str:
        return describe(self.mode, self.key_id)


def read_header(buf: Buffer) -> Header | None:
    """The header of a framed file, None for Disque's plain records. Raises Incomplete
    for a file cut off inside its header, FormatError for a damaged one."""
    size = min(len(buf), HEADER_SIZE)
    start = buf[0:size]
    if not start or start[:7] != MAGIC[:min(size, 7)]:
        return None
    if size < HEADER_SIZE:
        raise Incomplete(0)
    magic, mode, kid, check = HEADER.unpack(start)
    if crc32c(start[:-4]) != check:
        raise FormatError(0, "damaged file header (checksum mismatch)")
    if magic != MAGIC or mode not in MODES:
        raise FormatError(0, f"unknown AOF format version {magic[7]} mode {mode}")
    return Header(mode, kid)


class WrongKey(Exception):
    """The file needs a key that was not given: the message says which."""


def reader_for(buf: Buffer, key: bytes | None, *,
               frames_only: bool = False) -> RecordReader | FramedReader:
    """The reader of a file's records, whichever its format. An encrypted file needs
    its key (WrongKey), unless `frames_only` (checks every frame's CRC, yields
    nothing). A file cut off in its header reads as empty with a cut-off tail."""
    try:
        header = read_header(buf)
    except Incomplete:
        reader = RecordReader(b"")
        reader.cut_off = f"{len(buf)} bytes of a file header"
        return reader
    if header is None:
        return RecordReader(buf)
    if header.mode == AES and not frames_only:
        if key is None:
            raise WrongKey(f"the AOF is encrypted ({header.describe()}): set "
                           "aof-encryption-key-file to the file of its key")
        if key_id(key) != header.key_id:
            raise WrongKey(f"the AOF was written with another key (key id "
                           f"{header.key_id.hex()}; the key file holds key id "
                           f"{key_id(key).hex()}): give the key it was written with")
    return FramedReader(buf, header, None if frames_only else key)


class FramedReader:
    """fileformat.RecordReader for a framed file: iterating yields (offset, arguments)
    for each record of each whole frame (the offset is the record's in the file, or
    its frame's when encrypted); `pos` is the offset after the last whole frame,
    `cut_off` says why the iteration stopped early (a cut-off last frame); damage
    raises FormatError at its frame's offset. `frames` counts the frames read."""

    def __init__(self, buf: Buffer, header: Header, key: bytes | None) -> None:
        self.buf = buf
        self.header = header
        self.pos = HEADER_SIZE
        self.cut_off: str | None = None
        self.frames = 0
        self._aead: Any = None
        self._skip = header.mode == AES and key is None  # frames only
        if key is not None and header.mode == AES:
            from cryptography.hazmat.primitives.ciphers.aead import AESGCM
            self._aead = AESGCM(key)

    def __iter__(self) -> Iterator[tuple[int, list[bytes]]]:
        for start, payload in self._frames():
            if payload is not None:
                base = start if self._aead is not None else start + FRAME_SIZE
                at = 0
                while at < len(payload):
                    try:
                        args, after = parse_record(payload, at)
                    except (Incomplete, FormatError) as exc:
                        raise FormatError(start, "a frame whose records do not parse "
                                          f"({exc.__class__.__name__})") from None
                    yield (start if self._aead is not None else base + at), args
                    at = after
            self.frames += 1

    def _frames(self) -> Iterator[tuple[int, bytes | None]]:
        buf = self.buf
        end = len(buf)
        pos = self.pos
        aead = self._aead
        while pos < end:
            head = buf[pos:pos + FRAME_SIZE]
            stop = -1
            problem = "a frame cut off"
            if len(head) == FRAME_SIZE:
                length, complement, check = FRAME.unpack(head)
                if length ^ complement != MASK:
                    problem = "damaged frame header (its length does not match its check)"
                else:
                    stop = pos + FRAME_SIZE + length
                    if stop <= end:
                        payload = buf[pos + FRAME_SIZE:stop]
                        problem = "" if crc32c(payload) == check else "checksum mismatch"
            if problem:
                self.cut_off = frame_cut_off(buf, pos)
                if self.cut_off is None:
                    raise FormatError(pos, problem)
                return
            if aead is not None:
                from cryptography.exceptions import InvalidTag
                try:
                    payload = aead.decrypt(payload[:NONCE_SIZE], payload[NONCE_SIZE:], None)
                except InvalidTag:
                    raise FormatError(pos, "a frame fails authentication (changed "
                                      "without the key)") from None
            yield pos, (None if self._skip else payload)
            pos = self.pos = stop


def frame_cut_off(buf: Buffer, pos: int) -> str | None:
    """Why the bytes from `pos` to the end look like the last frame cut off (a crash
    while it was written, maybe followed by the zeros of a file system that extended
    the file first), or None if they look like damage: a whole frame, or a header
    that is there but wrong."""
    end = len(buf)
    data_end = before_zeros(buf, pos)
    zeros = f", then {end - data_end} zero bytes" if data_end < end else ""
    if data_end == pos:
        return f"{end - pos} zero bytes"
    if data_end - pos < FRAME_SIZE:
        return f"{data_end - pos} bytes of a frame header{zeros}"
    head = buf[pos:pos + FRAME_SIZE]
    length, complement, _ = FRAME.unpack(head)
    if length ^ complement != MASK:
        return None
    if pos + FRAME_SIZE + length <= data_end:
        return None  # the whole frame is there: damage
    return f"{data_end - pos} bytes of a {FRAME_SIZE + length}-byte frame{zeros}"
