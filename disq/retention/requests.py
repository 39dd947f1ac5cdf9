"""REPLAY's and RETAINED's typed requests (a disq extension): the window FROM..TO
(Unix ms of the jobs' creation, both included; TO defaults to now), and WHERE filters
parsed as GETJOB's (where.py)."""

from __future__ import annotations

import hashlib
import time
from typing import ClassVar

from disq_client.spec import REPLAY, RETAINED, CommandOptions

from .. import errors
from ..options import OptionParser, compile_options, parse_options
from ..where import BAD_WHERE, MAX_CONDITIONS, Condition, parse_condition

Key = tuple[int, bytes]
MAX_SHARDS = 65536


def _parse_tail(request: Replay | Retained, parsers: dict[bytes, OptionParser],
                args: list[bytes]) -> bool:
    """The options from args[2] on, WHERE conditions among them; then the window's
    checks. Whether TO was given."""
    start = parse_options(request, parsers, args, 2, b"where")
    while start < len(args):
        if len(request.where) >= MAX_CONDITIONS:
            raise BAD_WHERE
        condition, after = parse_condition(args, start + 1)
        request.where.append(condition)
        request.where_args += args[start + 1:after]
        start = parse_options(request, parsers, args, after, b"where")
    if request.start < 0:
        raise errors.err(f"{args[0].decode().upper()} needs FROM unix-ms")
    end_given = request.end >= 0
    if not end_given:
        request.end = int(time.time() * 1000)
    if request.start > request.end:
        raise errors.err(f"FROM {request.start} is after TO {request.end}: an empty window")
    return end_given


class Replay:
    """REPLAY queue FROM unix-ms [TO unix-ms] [INTO queue] [WHERE key op value ...]."""

    __slots__ = ("queue", "start", "end", "into", "where", "where_args", "end_given")
    OPTIONS: ClassVar[CommandOptions] = REPLAY
    _PARSERS: ClassVar[dict[bytes, OptionParser]] = compile_options(REPLAY)

    def __init__(self, queue: bytes, start: int = -1, end: int = -1,
                 into: bytes | None = None) -> None:
        self.queue = queue
        self.start = start
        self.end = end  # -1: now
        self.into = into  # None: the queue itself
        self.where: list[Condition] = []
        self.where_args: list[bytes] = []  # as given: what peers are sent
        self.end_given = end >= 0

    @classmethod
    def parse(cls, args: list[bytes]) -> Replay:
        request = cls(args[1])
        request.end_given = _parse_tail(request, cls._PARSERS, args)
        return request

    @property
    def target(self) -> bytes:
        return self.into or self.queue

    def digest(self) -> bytes:
        """Names this replay (queue, window, target, filters): a retried REPLAY adds
        its jobs with the same DEDUP keys (without TO, "now" is not part of it: the
        retry adds the jobs acked since, and none twice)."""
        h = hashlib.sha256()
        end = b"%d" % self.end if self.end_given else b"now"
        for part in (self.queue, b"%d" % self.start, end, self.target,
                     *self.where_args):
            h.update(b"%d:" % len(part) + part)
        return h.hexdigest()[:24].encode()

    def dedup_key(self, job_id: bytes) -> bytes:
        return b"replay:" + self.digest() + b":" + job_id


class Retained:
    """RETAINED queue FROM unix-ms [TO unix-ms] [AFTER cursor] [COUNT n] [SHARD
    i/n] [WHERE ...]: this node's retained jobs of the window, COUNT at a time; with
    SHARD, only those whose ID falls in shard i of n (retention/store.py `shard_of`)."""

    __slots__ = ("queue", "start", "end", "after", "count", "shard", "where", "where_args")
    OPTIONS: ClassVar[CommandOptions] = RETAINED
    _PARSERS: ClassVar[dict[bytes, OptionParser]] = compile_options(RETAINED)

    def __init__(self, queue: bytes) -> None:
        self.queue = queue
        self.start = -1
        self.end = -1
        self.after: bytes | None = None
        self.count = 1000
        self.shard: bytes | None = None
        self.where: list[Condition] = []
        self.where_args: list[bytes] = []

    @classmethod
    def parse(cls, args: list[bytes]) -> Retained:
        request = cls(args[1])
        _parse_tail(request, cls._PARSERS, args)
        request.cursor()  # checked now
        request.shard_pair()
        return request

    def cursor(self) -> Key | None:
        """AFTER's cursor: `<ctime>-<job id>` of the last job of the previous page."""
        if self.after is None:
            return None
        ctime, _, job_id = self.after.partition(b"-")
        if not ctime.isdigit() or not job_id:
            raise errors.err("AFTER must be a cursor a RETAINED reply gave")
        return int(ctime), job_id

    def shard_pair(self) -> tuple[int, int] | None:
        if self.shard is None:
            return None
        index, _, count = self.shard.partition(b"/")
        if not (index.isdigit() and count.isdigit()
                and 0 <= int(index) < int(count) <= MAX_SHARDS):
            raise errors.err(f"SHARD must be i/n, 0 <= i < n <= {MAX_SHARDS}")
        return int(index), int(count)


def cursor_of(key: Key) -> bytes:
    return b"%d-%s" % key
