"""Bus message types (Disque's numbering) and the frame format.

A frame is a 4-byte big-endian length followed by a msgpack array:
`[VERSION, sender_id, sender_port, sender_flags, messages]`, where `sender_flags` is
a list of flag names ("leaving", ...) and `messages` a list of `[type, *fields]`.
One frame carries every message a link has to send in a loop turn, so a thousand
GOTJOBs cost one encode, one write and one decode. The fields of each type are
listed below.
"""

from __future__ import annotations

import struct

import msgpack

VERSION = 3  # 2: REPLJOB carries many jobs and their holders once; 3: DEDUP checks
MAX_FRAME = 64 * 1024 * 1024  # a frame longer than this closes the link

PING = 0  # fields: [gossip]  gossip = [[id, ip, port, flags, ping_sent, pong_received], ...]
PONG = 1  # fields: [gossip]
MEET = 2  # fields: [gossip]  a PING that makes the receiver add the sender
FAIL = 3  # fields: [failing node id]
REPLJOB = 4  # fields: [noreply(bool), [holder ids], job copy, ...] (wire.encode_copy;
#              a copy of an ADDJOB with DEDUP ends with its key, then `True` when
#              the receiver must check the key: see replication/dedup.py)
GOTJOB = 5  # fields: [job id, ...] (the confirmations of one loop turn)
ENQUEUE = 6  # fields: [job id, delay s]
QUEUED = 7  # fields: [job id, flags (INCR_NACKS=2 / INCR_DELIV=4)]
SETACK = 8  # fields: [job id, may-have count]
WILLQUEUE = 9  # fields: [job id]
GOTACK = 10  # fields: [job id, known(bool)]
DELJOB = 11  # fields: [job id]
NEEDJOBS = 12  # fields: [queue, count, wait ms]  wait: how long the asker's consumers
#               still wait (0: none wait); without it (a disq before NEEDJOBS_CANCEL),
#               as long as federation.WANTED_FOR_MS
YOURJOBS = 13  # fields: [[serialized job, ...]]
WORKING = 14  # fields: [job id]
PAUSE = 15  # fields: [queue, flags]
# With cluster-secret only: the first message each way on a new link, then the proof.
AUTH = 16  # fields: [nonce (16 random bytes)]
AUTH_PROOF = 17  # fields: [HMAC-SHA256(secret, role + the other side's nonce)]
QLEN_REQUEST = 18  # fields: [request id, queue]  (GLOBALQLEN)
QLEN_REPLY = 19  # fields: [request id, queue length on the sender]
# disq extensions (ADDJOB DEDUP), unknown to Disque:
DEDUP_QUERY = 20  # fields: [[key, ttl s], ...] (the keys of one loop turn): known?
DEDUP_REPLY = 21  # fields: [[key, job id or nil, ms left or -1 = busy], ...] one per key
DEDUP_FORGET = 22  # fields: [key, job id]  that ADDJOB failed: drop the key if it names it
DEDUP_CONFLICT = 23  # fields: [job id, ...]  copies refused: their DEDUP key may exist
# disq extension (federation): the last consumer waiting on the queue left: forget my
# NEEDJOBS. A node that does not know it ignores it (and the third NEEDJOBS field), so
# the bus VERSION is unchanged: it only makes pushes stop sooner.
NEEDJOBS_CANCEL = 24  # fields: [queue]

NAMES = {
    PING: "ping", PONG: "pong", MEET: "meet", FAIL: "fail", REPLJOB: "repljob",
    GOTJOB: "gotjob", ENQUEUE: "enqueue", QUEUED: "queued", SETACK: "setack",
    WILLQUEUE: "willqueue", GOTACK: "gotack", DELJOB: "deljob", NEEDJOBS: "needjobs",
    YOURJOBS: "yourjobs", WORKING: "working", PAUSE: "pause", AUTH: "auth",
    AUTH_PROOF: "auth-proof", QLEN_REQUEST: "qlen-request", QLEN_REPLY: "qlen-reply",
    DEDUP_QUERY: "dedup-query", DEDUP_REPLY: "dedup-reply", DEDUP_FORGET: "dedup-forget",
    DEDUP_CONFLICT: "dedup-conflict", NEEDJOBS_CANCEL: "needjobs-cancel",
}

_LEN = struct.Struct(">I")


def _pack_other(obj: object) -> list:
    """Sets (a job's holders) go as arrays."""
    if isinstance(obj, (frozenset, set)):
        return list(obj)
    raise TypeError(f"cannot send {type(obj).__name__} on the bus")


# One Packer for every frame: msgpack.packb builds a new one per call, which costs
# more than encoding a small frame. Frames are encoded on the event loop only.
_pack = msgpack.Packer(use_bin_type=True, default=_pack_other).pack


def encode_frame(sender_id: str, sender_port: int, sender_flags: list[str],
                 messages: list[list]) -> bytes:
    payload = _pack([VERSION, sender_id, sender_port, sender_flags, messages])
    return _LEN.pack(len(payload)) + payload


class FrameError(Exception):
    """A frame that is not ours or is corrupt: the link is closed."""


class FrameReader:
    """Splits a byte stream into decoded frames."""

    __slots__ = ("_buf",)

    def __init__(self) -> None:
        self._buf = bytearray()

    def feed(self, data: bytes) -> list[list]:
        buf = self._buf
        buf += data
        out: list[list] = []
        pos = 0
        while len(buf) - pos >= 4:
            (length,) = _LEN.unpack_from(buf, pos)
            if length > MAX_FRAME:
                raise FrameError(f"frame of {length} bytes")
            if len(buf) - pos - 4 < length:
                break
            try:
                message = msgpack.unpackb(bytes(buf[pos + 4:pos + 4 + length]), raw=False,
                                          strict_map_key=False, use_list=True)
            except Exception as exc:  # any decoding problem is a corrupt frame
                raise FrameError(f"undecodable frame: {exc}") from None
            pos += 4 + length
            if (isinstance(message, list) and message and message[0] != VERSION
                    and type(message[0]) is int):
                raise FrameError(f"bus protocol version {message[0]}, this node speaks "
                                 f"{VERSION} (all nodes must run the same disq version)")
            if (not isinstance(message, list) or len(message) != 5 or message[0] != VERSION
                    or not isinstance(message[1], str) or type(message[2]) is not int
                    or not isinstance(message[3], list) or not isinstance(message[4], list)):
                raise FrameError("malformed frame header")
            for item in message[4]:
                if not isinstance(item, list) or not item or type(item[0]) is not int:
                    raise FrameError("malformed message")
            out.append(message)
        if pos:
            del buf[:pos]
        return out
