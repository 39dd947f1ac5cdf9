"""The dedup table behind `ADDJOB ... DEDUP <key>` (a disq extension).

Maps a client's key to the ID of the job added with it, until that job's expiry: the
entry outlives the job's acknowledgement, so a producer that retries after consumers
acked the first attempt's job still gets the old ID and adds nothing. The table is
separate from the jobs; every node holding a copy of a job records its key (the key
travels with REPLJOB), so a key is still known with REPLICATE-1 of its nodes down.

Expiry costs no timer per entry: entries are bucketed by their expiry second, the
server's cron sweeps the due buckets (`sweep`), and `get` drops an expired entry it
meets (lazy expiry).
"""

from __future__ import annotations

import heapq

MAX_KEY_LEN = 256  # bytes: a key is a hash or an ID, not a payload


class DedupTable:
    __slots__ = ("_entries", "_buckets", "_seconds", "hits")

    def __init__(self) -> None:
        self._entries: dict[bytes, tuple[bytes, int]] = {}  # key -> (job id, expiry ms)
        self._buckets: dict[int, list[bytes]] = {}  # expiry second -> keys
        self._seconds: list[int] = []  # heap of the buckets' seconds
        self.hits = 0  # ADDJOBs answered with the ID of a job added before (INFO dedup)

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: bytes, now: int) -> bytes | None:
        """The job ID recorded for `key`, None if none or expired."""
        entry = self._entries.get(key)
        if entry is None:
            return None
        if entry[1] <= now:
            del self._entries[key]
            return None
        return entry[0]

    def expiry(self, key: bytes) -> int:
        """The entry's expiry (ms), 0 if there is none."""
        entry = self._entries.get(key)
        return entry[1] if entry is not None else 0

    def record(self, key: bytes, job_id: bytes, expire_ms: int) -> None:
        """Remember `key` -> `job_id` until `expire_ms` (a later expiry wins)."""
        old = self._entries.get(key)
        if old is not None and old[0] == job_id and old[1] >= expire_ms:
            return
        self._entries[key] = (job_id, expire_ms)
        second = expire_ms // 1000 + 1  # swept once the whole second has passed
        bucket = self._buckets.get(second)
        if bucket is None:
            self._buckets[second] = [key]
            heapq.heappush(self._seconds, second)
        else:
            bucket.append(key)

    def forget(self, key: bytes, job_id: bytes) -> bool:
        """Drop the entry if it still names `job_id` (an ADDJOB that failed)."""
        entry = self._entries.get(key)
        if entry is None or entry[0] != job_id:
            return False
        del self._entries[key]
        return True

    def sweep(self, now: int, budget: int = 10_000) -> int:
        """Drop the expired entries of the due buckets, about `budget` keys per call.
        A key recorded again with a later expiry sits in two buckets: the earlier one
        finds it alive and leaves it. Returns how many entries went."""
        seconds, buckets, entries = self._seconds, self._buckets, self._entries
        removed = 0
        while seconds and seconds[0] * 1000 <= now and budget > 0:
            second = seconds[0]
            bucket = buckets[second]
            while bucket and budget > 0:
                key = bucket.pop()
                budget -= 1
                entry = entries.get(key)
                if entry is not None and entry[1] <= now:
                    del entries[key]
                    removed += 1
            if not bucket:
                heapq.heappop(seconds)
                del buckets[second]
        return removed

    def clear(self) -> None:
        self._entries.clear()
        self._buckets.clear()
        self._seconds.clear()
