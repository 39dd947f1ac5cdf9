"""Node IDs and job IDs in Disque's format.

A job ID is 40 bytes: `D-` + the first 8 hex chars of the creating node's ID + `-`
+ 24 base64 chars (144 random bits) + `-` + 4 lowercase hex chars holding the TTL in
minutes, forced odd when the job has RETRY > 0 and even for RETRY 0 (at-most-once).
"""

from __future__ import annotations

import binascii
import os
from typing import Final

JOB_ID_LEN: Final = 40
NODE_ID_LEN: Final = 40
_RANDOM_BYTES: Final = 18  # 144 bits -> 24 base64 chars
_BATCH: Final = 4096


def new_node_id() -> str:
    return os.urandom(NODE_ID_LEN // 2).hex()


def is_valid_node_id(node_id: str) -> bool:
    if len(node_id) != NODE_ID_LEN:
        return False
    try:
        int(node_id, 16)
    except ValueError:
        return False
    return True


class JobIdGenerator:
    """Makes job IDs for one node. Random bits come from the OS and are base64-encoded
    in batches (18 bytes -> exactly 24 chars, so the batch splits cleanly): the hot
    path costs a slice and a concatenation."""

    __slots__ = ("_prefix", "_pool", "_pos", "_last_ttl", "_last_retry", "_last_suffix")

    def __init__(self, node_id: str) -> None:
        self._prefix = b"D-" + node_id[:8].encode() + b"-"
        self._pool = b""
        self._pos = 0
        self._last_ttl = self._last_retry = -1
        self._last_suffix = b""

    def next(self, ttl_seconds: int, retry: int) -> bytes:
        pos = self._pos
        if pos >= len(self._pool):
            self._pool = binascii.b2a_base64(os.urandom(_RANDOM_BYTES * _BATCH), newline=False)
            pos = 0
        self._pos = pos + 24
        if ttl_seconds != self._last_ttl or retry != self._last_retry:  # producers repeat
            self._last_ttl, self._last_retry = ttl_seconds, retry
            self._last_suffix = ttl_suffix(ttl_seconds, retry)
        return self._prefix + self._pool[pos:pos + 24] + self._last_suffix


_SUFFIX_CACHE: dict[tuple[int, bool], bytes] = {}


def ttl_suffix(ttl_seconds: int, retry: int) -> bytes:
    """`-xxxx`: TTL in minutes (16 bits, capped), odd for at-least-once jobs."""
    key = (ttl_seconds, retry > 0)
    suffix = _SUFFIX_CACHE.get(key)
    if suffix is None:
        minutes = min(ttl_seconds // 60, 0xFFFF)
        minutes = (minutes | 1) if retry > 0 else (minutes & 0xFFFE)
        suffix = b"-%04x" % minutes
        if len(_SUFFIX_CACHE) < 4096:
            _SUFFIX_CACHE[key] = suffix
    return suffix


def is_valid_job_id(job_id: bytes) -> bool:
    """Disque's validateJobID: length and the fixed separator positions."""
    return (
        len(job_id) == JOB_ID_LEN
        and job_id[0] == 0x44  # 'D'
        and job_id[1] == 0x2D  # '-'
        and job_id[10] == 0x2D
        and job_id[35] == 0x2D
    )


def ttl_minutes_from_id(job_id: bytes) -> int:
    """The raw TTL field of an ID (odd = at-least-once). 0 if it is not hex."""
    try:
        return int(job_id[36:40], 16)
    except ValueError:
        return 0

