"""A dict that supports Redis-style SCAN cursors (for JSCAN and QSCAN).

Python dicts cannot be walked from a cursor, so keys are spread over 2^k small dicts
by hash. A cursor names the next bucket, advanced in reverse-binary order as Redis's
dictScan does, so a key present for the whole scan is returned at least once even if
the table grows between calls. The table grows while it is small and then stays at
`_MAX_BUCKETS`; lookups cost one extra index.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from itertools import islice
from typing import Final, Generic, TypeVar

K = TypeVar("K")
V = TypeVar("V")

_MAX_BITS: Final = 12
_MAX_BUCKETS: Final = 1 << _MAX_BITS
_GROW_AT: Final = 8  # average items per bucket before doubling


def _reverse_bits(v: int, bits: int) -> int:
    return int(format(v, f"0{bits}b")[::-1], 2)


class ScanTable(Generic[K, V]):
    __slots__ = ("_buckets", "_mask", "_len", "_grow_at")

    def __init__(self) -> None:
        self._buckets: list[dict[K, V]] = [{}]
        self._mask = 0
        self._len = 0
        self._grow_at = _GROW_AT

    def __len__(self) -> int:
        return self._len

    def get(self, key: K | None) -> V | None:
        """The value of `key`; None for an unknown key, or for None (a job that was
        acknowledged before this node saw it has no queue)."""
        return self._buckets[hash(key) & self._mask].get(key)  # type: ignore[arg-type]

    def __contains__(self, key: K) -> bool:
        return key in self._buckets[hash(key) & self._mask]

    def add(self, key: K, value: V) -> bool:
        """Insert; False (and nothing changed) if the key exists."""
        if self._buckets[hash(key) & self._mask].setdefault(key, value) is not value:
            return False
        self._len += 1
        if self._len > self._grow_at:
            self._grow()
        return True

    def pop(self, key: K) -> V | None:
        value = self._buckets[hash(key) & self._mask].pop(key, None)
        if value is not None:
            self._len -= 1
        return value

    def _grow(self) -> None:
        if len(self._buckets) >= _MAX_BUCKETS:
            self._grow_at = 1 << 62  # full size: never again
            return
        size = len(self._buckets) * 2
        self._grow_at = _GROW_AT * size
        mask = size - 1
        buckets: list[dict[K, V]] = [{} for _ in range(size)]
        for bucket in self._buckets:
            for key, value in bucket.items():
                buckets[hash(key) & mask][key] = value
        self._buckets, self._mask = buckets, mask

    def random_sample(self, count: int) -> list[V]:
        """Up to `count` values from a random place on: a random bucket, from a random
        one of its values, then the next buckets, as Redis's dictGetSomeKeys walks
        (eviction samples with it, maxmemory-samples values at a time)."""
        buckets, mask = self._buckets, self._mask
        start = random.randrange(len(buckets))
        skip = random.randrange(len(buckets[start])) if buckets[start] else 0
        out: list[V] = []
        index = start
        for step in range(len(buckets) + 1):  # all around, then the first one's head
            bucket = buckets[index]
            if bucket:
                first = skip if step == 0 else 0
                last = skip if step == len(buckets) else len(bucket)
                out.extend(islice(bucket.values(), first, min(last, first + count - len(out))))
                if len(out) >= count:
                    break
            index = (index + 1) & mask
        return out

    def values(self) -> Iterator[V]:
        for bucket in self._buckets:
            yield from list(bucket.values())

    def clear(self) -> None:
        self._buckets = [{}]
        self._mask = 0
        self._len = 0
        self._grow_at = _GROW_AT

    def scan(
        self, cursor: int, count: int, keep: Callable[[V], bool] | None = None
    ) -> tuple[int, list[V]]:
        """Visit buckets from `cursor` until `count` values were kept (or 10x `count`
        buckets were visited; always at least one). Returns (next cursor, 0 when done;
        the kept values)."""
        out: list[V] = []
        mask = self._mask
        bits = mask.bit_length()
        visits = max(10 * count, 1)
        cursor &= _MAX_BUCKETS - 1
        while True:
            bucket = self._buckets[cursor & mask]
            for value in bucket.values():
                if keep is None or keep(value):
                    out.append(value)
            # Reverse-binary increment over the bits in use (Redis's dictScan).
            if bits == 0:
                return 0, out
            cursor = _reverse_bits(cursor & mask, bits)
            cursor = _reverse_bits((cursor + 1) & mask, bits)
            if cursor == 0:
                return 0, out
            visits -= 1
            if len(out) >= count or visits <= 0:
                return cursor, out
