"""cluster-secret: the handshake of a new bus link and the tag on every frame after it,
sans-IO (link.py carries the bytes; tests speak the protocol with the same objects).

Both sides of a new link send AUTH [nonce] at once, in a frame whose header names
their node ID. Once a side has the other's, it sends AUTH_PROOF [HMAC-SHA256(secret,
"proof" | its role | transcript)], the transcript being the connector's nonce, the
acceptor's nonce, the connector's ID and the acceptor's ID. A proof is good for this
pair of challenges and these two IDs only: passed on to another link, it proves
nothing there (its challenges differ), and a side's proof can never stand for the
other side's (the role). A relay that hands each side the other's messages (a
stranger on a stopped node's address, between a peer dialling that address and
another node) gets the handshake through, but only as a wire between the two: it
ends up knowing neither key below.

Each direction then has its own key, HMAC-SHA256(secret, "key" | the sender's role |
transcript), and every frame after the proof carries a 16-byte tag: AES-256-GCM of
no plaintext with the frame's payload as associated data (GMAC: OpenSSL's, with the
CPU's AES and carry-less multiply instructions, ~6 GB/s on big frames; through the C
extension disq._bustag, which sets the key up once per link), the count of frames
sent that way before it as the nonce. A frame without the keys, changed,
dropped, reordered or replayed (in its session or another) fails its tag, and the
link is closed before its payload is decoded. Frames then name the proven ID only: a
frame in another node's name closes the link.
"""

from __future__ import annotations

import hashlib
import hmac
import importlib
import os
import struct
from collections.abc import Callable
from typing import Any, Final, Protocol

from ..ids import is_valid_node_id
from . import messages as m

NONCE_LEN: Final = 16  # AUTH's challenge
PROOF_LEN: Final = 32  # AUTH_PROOF's HMAC-SHA256
CONNECTOR: Final = b"connector"
ACCEPTOR: Final = b"acceptor"
_PROOF: Final = b"disq-bus-proof\0"
_KEY: Final = b"disq-bus-key\0"
_NONCE: Final = struct.Struct(">4xQ")  # 12 bytes: the frame counter


class HandshakeError(Exception):
    """The peer did not prove the secret as the protocol asks: the link is closed."""


class TagsOfALink(m.TagCheck, Protocol):
    """The tags of one direction of a link (disq._bustag.Tags, else FrameTags): each
    call takes the next count; `check` (the reader's TagCheck): whether buf[end:end + 16]
    is the tag of buf[start:end]."""

    def tag(self, data: bytes, start: int) -> bytes:
        """The tag of data[start:]."""


class FrameTags:
    """TagsOfALink over the cryptography package (OpenSSL's AES-GCM, as the AOF's
    encryption), where the C extension disq._bustag was not built: the same tags, at
    ~7,400 instructions a call (each builds a cipher context and expands the key)
    against a few hundred."""

    __slots__ = ("_aead", "_count", "_invalid")

    def __init__(self, key: bytes) -> None:
        # imported only with a secret, so a node without one never loads it
        from cryptography.exceptions import InvalidTag
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM
        self._aead = AESGCM(key)
        self._count = 0
        self._invalid = InvalidTag

    def tag(self, data: bytes, start: int) -> bytes:
        nonce = _NONCE.pack(self._count)
        self._count += 1
        with memoryview(data) as whole, whole[start:] as payload:
            tag: bytes = self._aead.encrypt(nonce, b"", payload)
        return tag

    def check(self, buf: bytes | bytearray, start: int, end: int) -> bool:
        nonce = _NONCE.pack(self._count)
        self._count += 1
        with memoryview(buf) as whole, whole[start:end] as payload:
            try:
                self._aead.decrypt(nonce, bytes(whole[end:end + m.TAG_LEN]), payload)
            except self._invalid:
                return False
        return True


def _tags_class() -> Callable[[bytes], TagsOfALink]:
    try:
        module = importlib.import_module("disq._bustag")
    except ImportError:
        return FrameTags
    tags: Callable[[bytes], TagsOfALink] = module.Tags
    return tags


new_tags = _tags_class()


class Handshake:
    """One side of a link's handshake. `hello()` is its first frame's messages;
    `receive` takes each frame that arrives until `done`, and returns the messages of
    the frame to send in answer (if any). Then `peer_id` is the peer's proven node ID
    and `sending` / `receiving` tag the frames each way."""

    def __init__(self, secret: bytes, my_id: str, connector: bool) -> None:
        self.secret = secret
        self.my_id = my_id  # as this side's frame headers name it
        self.role, self.peer_role = (CONNECTOR, ACCEPTOR) if connector else (ACCEPTOR, CONNECTOR)
        self.nonce = os.urandom(NONCE_LEN)
        self.peer_id = ""
        self.peer_nonce = b""
        self.done = False
        self.sending: TagsOfALink | None = None
        self.receiving: TagsOfALink | None = None

    def hello(self) -> list[list[Any]]:
        return [[m.AUTH, self.nonce]]

    def receive(self, sender_id: str, messages: list[list[Any]]) -> list[list[Any]]:
        """A frame of the peer's handshake: its AUTH, then its AUTH_PROOF, each alone
        in its frame (anything beside them could have been added by whoever passes
        the frames on: they carry no tag). Raises HandshakeError otherwise."""
        if self.done:
            raise HandshakeError("a handshake message after the handshake")
        if len(messages) != 1 or len(messages[0]) != 2 or type(messages[0][1]) is not bytes:
            raise HandshakeError("a frame that is not one handshake message")
        mtype, value = messages[0]
        if mtype == m.AUTH and not self.peer_nonce:
            if len(value) != NONCE_LEN or not is_valid_node_id(sender_id):
                raise HandshakeError("a malformed AUTH")
            if sender_id == self.my_id:
                raise HandshakeError("a link to itself")
            self.peer_id, self.peer_nonce = sender_id, value
            return [[m.AUTH_PROOF, self._mac(_PROOF + self.role)]]
        if mtype == m.AUTH_PROOF and self.peer_nonce and sender_id == self.peer_id:
            if not hmac.compare_digest(value, self._mac(_PROOF + self.peer_role)):
                raise HandshakeError("it did not prove the cluster secret")
            self.done = True
            self.sending = new_tags(self._mac(_KEY + self.role))
            self.receiving = new_tags(self._mac(_KEY + self.peer_role))
            return []
        raise HandshakeError("a handshake message out of order")

    def _mac(self, label: bytes) -> bytes:
        if self.role == CONNECTOR:
            transcript = (self.nonce + self.peer_nonce + self.my_id.encode()
                          + self.peer_id.encode())
        else:
            transcript = (self.peer_nonce + self.nonce + self.peer_id.encode()
                          + self.my_id.encode())
        return hmac.new(self.secret, label + transcript, hashlib.sha256).digest()
