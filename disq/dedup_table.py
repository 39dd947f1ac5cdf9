"""The dedup table behind `ADDJOB ... DEDUP <key>` (a disq extension).

A key is scoped to the ADDJOB's queue (as SQS deduplication IDs and BullMQ job IDs
are): the table, the cluster's checks and the bus use `scoped_key(queue, key)`, so the
same key in two queues names two jobs, and an ADDJOB never learns of, nor takes ahead
of, another queue's job by its key (a user allowed some queues only would otherwise
read the IDs of other queues' jobs, or squat their keys). `AddJob.dedup` holds the
scoped key from the request's parsing on.

Maps a (scoped) key to the ID of the job added with it, until that job's expiry:
the entry outlives the job's acknowledgement, so a producer that retries after
consumers acked the first attempt's job still gets the old ID and adds nothing. The
table is separate from the jobs; every node holding a copy of a job records its key
(the key travels with REPLJOB), so a key is still known with REPLICATE-1 of its nodes
down.

A node that was asked about a key it does not know keeps a reservation for it (an
entry without a job ID, for the asking ADDJOB's TTL): that node may have added the job
since, on nodes other than this one, so this node must not vouch for the key alone
(see replication/dedup_checks.py). The reservation names the node that asked last (`asker`):
a copy that does not check its key (its origin asked every node) is refused where
another node asked for the key since (replication/dedup_checks.py, "Late copies").

A copy's key is *unsettled* until the job's origin says its ADDJOB succeeded
(DEDUP_SETTLED): until then the origin may still delete the job (a refused copy, a
timeout), so this node must not answer the job's ID for the key. `record_unsettled`
notes when the origin's ADDJOB gives up at the latest; `settle` makes it a real entry.

Expiry costs no timer per entry: entries are bucketed by their expiry second, the
server's cron sweeps the due buckets (`sweep`), and `get` drops an expired entry it
meets (lazy expiry).

A UNIQUE key (`ADDJOB ... UNIQUE <key>`, `unique_key`: the DEDUP machinery, a bit of
the scoped key's length set) names its job only while the job lives: every look at
its entry (`peek`, so `get`, the cluster's checks and DEDUP_QUERY's answers too) asks
`holds` whether this node holds the job not ended (not acked, not a dead letter, not
deleted or expired), and drops the entry if not. So a stale claim (a job acked,
dead-lettered, deleted; an ID learned from a peer, of a job held elsewhere) is never
answered nor refuses a copy, and the entry of a job that ended costs nothing until
then (the jobs do not know their keys: ACKJOB pays nothing for them).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable
from typing import Final

from disq_client.spec import DEDUP_KEY_MAX_LEN

RESERVED: Final = b""  # the "job ID" of a reservation
# The longest key `scoped_key` takes: a client's (DEDUP_KEY_MAX_LEN, a hash or an ID,
# not a payload), or CRON's tick key (its name, 256 bytes at most, and the tick).
MAX_SCOPED_KEY_LEN: Final = 4 * DEDUP_KEY_MAX_LEN
# In a scoped key's first byte (the length's high bit, above MAX_SCOPED_KEY_LEN): a
# UNIQUE key, which names its job only while the job lives (see the docstring). The same
# client key as DEDUP and as UNIQUE names two entries.
UNIQUE_BIT: Final = 0x80


def scoped_key(queue: bytes, key: bytes) -> bytes:
    """`key` in `queue`'s namespace: the key's length (2 bytes, big-endian), the key,
    the queue. The length makes it unambiguous whatever bytes both hold; the key
    first keeps a dict's comparisons short. One concatenation per DEDUP ADDJOB."""
    return len(key).to_bytes(2, "big") + key + queue


def unique_key(queue: bytes, key: bytes) -> bytes:
    """As `scoped_key`, for `ADDJOB ... UNIQUE key`: UNIQUE_BIT set."""
    return (len(key) | UNIQUE_BIT << 8).to_bytes(2, "big") + key + queue


def is_unique(scoped: bytes) -> bool:
    """Whether `scoped` (a key `scoped_key` or `unique_key` made) is a UNIQUE key."""
    return scoped[0] & UNIQUE_BIT != 0


def _key_len(scoped: bytes) -> int:
    """The length of the client's key in `scoped` (its first two bytes, less the
    UNIQUE bit)."""
    return ((scoped[0] & ~UNIQUE_BIT) << 8) | scoped[1]


def client_key(scoped: bytes) -> bytes:
    """The client's key in `scoped`."""
    return scoped[2:2 + _key_len(scoped)]


def scoped_to(scoped: object, queue: bytes | None) -> bool:
    """Whether `scoped` (from a peer: anything) is a key scoped to `queue` (a job's:
    None for a job whose queue is not known, which no key names)."""
    if type(scoped) is not bytes or len(scoped) < 3 or queue is None:
        return False
    size = _key_len(scoped)
    return (0 < size <= MAX_SCOPED_KEY_LEN and len(scoped) == 2 + size + len(queue)
            and scoped.endswith(queue))


def well_scoped(scoped: object) -> bool:
    """Whether `scoped` (from a peer: anything) is a key `scoped_key` could make."""
    if type(scoped) is not bytes or len(scoped) < 3:
        return False
    size = _key_len(scoped)
    return 0 < size <= MAX_SCOPED_KEY_LEN and len(scoped) >= 2 + size


def _held(job_id: bytes) -> bool:
    return True


class DedupTable:
    """Two dicts of bytes and ints, no tuple per entry: a dict whose values are all
    atomic is left alone by the cycle collector, while one of tuples was put back in
    its young generation at every insert and walked whole by every young collection
    (4 us per ADDJOB with 100k keys, measured in bench/RESULTS.md)."""

    __slots__ = ("_ids", "_expiry", "_unsettled", "_askers", "_buckets", "_seconds", "_last",
                 "hits", "holds")

    def __init__(self, holds: Callable[[bytes], bool] | None = None) -> None:
        self._ids: dict[bytes, bytes] = {}  # key -> job ID (RESERVED: a reservation)
        self._expiry: dict[bytes, int] = {}  # key -> expiry (ms)
        # job ID -> until when (ms) its origin's ADDJOB may still fail: the copies whose
        # key this node must not vouch for yet (`record_unsettled`), and the key (to
        # drop the entry once a copy is found to name no job)
        self._unsettled: dict[bytes, tuple[int, bytes]] = {}
        self._askers: dict[bytes, str] = {}  # key -> the node that asked last (reservations)
        self._buckets: dict[int, list[bytes]] = {}  # expiry second -> keys
        self._seconds: list[int] = []  # heap of the buckets' seconds
        self._last: tuple[int, list[bytes]] = (0, [])  # the last bucket used
        self.hits = 0  # ADDJOBs answered with the ID of a job added before (INFO dedup)
        # Whether this node holds a job, not ended: a UNIQUE key names it only then
        # (`Node.holds_live`; without a node, every job named is held).
        self.holds: Callable[[bytes], bool] = holds or _held

    def __len__(self) -> int:
        return len(self._ids)

    def get(self, key: bytes, now: int) -> bytes | None:
        """The job ID recorded for `key`, None if none (or a reservation) or expired."""
        return self.peek(key, now) or None

    def peek(self, key: bytes, now: int) -> bytes | None:
        """As `get`, but a reservation is RESERVED (b"")."""
        job_id = self._ids.get(key)
        if job_id is None:
            return None
        if self._expiry[key] <= now:
            del self._ids[key], self._expiry[key]
            if self._unsettled:
                self._unsettled.pop(job_id, None)
            if not job_id:
                self._askers.pop(key, None)
            return None
        if key[0] & UNIQUE_BIT and job_id and not self.holds(job_id):
            self.forget(key, job_id)  # a UNIQUE key whose job ended, or is held elsewhere
            return None
        return job_id

    def expiry(self, key: bytes) -> int:
        """The entry's expiry (ms), 0 if there is none."""
        return self._expiry.get(key, 0)

    def record(self, key: bytes, job_id: bytes, expire_ms: int) -> None:
        """Remember `key` -> `job_id` until `expire_ms` (a later expiry wins), a job
        this node may vouch for (settled, if it was not)."""
        ids = self._ids
        old = ids.get(key)
        if old is not None:
            if self._unsettled:
                self._unsettled.pop(old, None)  # (the same job, settled, or another one)
            if not old and job_id:
                self._askers.pop(key, None)  # a reservation no more
        if old == job_id and self._expiry[key] >= expire_ms:
            return
        ids[key] = job_id
        self._expiry[key] = expire_ms
        second = expire_ms // 1000 + 1  # swept once the whole second has passed
        last = self._last
        if last[0] == second:  # the jobs of one burst share their expiry second
            last[1].append(key)
            return
        bucket = self._buckets.get(second)
        if bucket is None:
            self._buckets[second] = bucket = [key]
            heapq.heappush(self._seconds, second)
        else:
            bucket.append(key)
        self._last = (second, bucket)

    def record_unsettled(self, key: bytes, job_id: bytes, expire_ms: int, until: int) -> None:
        """As `record`, for a copy whose origin's ADDJOB may still fail until `until`
        (ms): not to vouch for before `settle`. A copy sent again keeps its state."""
        unsettled = self._unsettled
        if self._ids.get(key) == job_id and job_id not in unsettled:
            self.record(key, job_id, expire_ms)  # settled already
            return
        self.record(key, job_id, expire_ms)
        unsettled[job_id] = (until, key)

    def unsettled_until(self, job_id: bytes) -> int | None:
        """Until when (ms) the ADDJOB of `job_id`, a copy's, may fail; None if settled."""
        entry = self._unsettled.get(job_id)
        return None if entry is None else entry[0]

    def forget_unsettled(self, job_id: bytes) -> None:
        """Drop the entry of `job_id` if it is unsettled: its ADDJOB failed after all
        (its copy's holders found no such job: replication/provisional.py)."""
        entry = self._unsettled.get(job_id)
        if entry is not None:
            self.forget(entry[1], job_id)

    def settle(self, job_ids: Iterable[object]) -> None:
        """The ADDJOBs of `job_ids` succeeded (or can no longer fail): vouch for them.
        (Items of other types, from a bus message, are skipped: `object`, as compiled
        a declared `bytes` would be checked, and raise, before the skip.)"""
        pop = self._unsettled.pop
        for job_id in job_ids:
            if type(job_id) is bytes:
                pop(job_id, None)

    def unsettled(self) -> int:
        """How many keys name a job whose ADDJOB is not settled (INFO, tests)."""
        return len(self._unsettled)

    def reserve(self, key: bytes, now: int, expire_ms: int, asker: str = "") -> None:
        """Another node (`asker`) checks `key` and may add its job: keep a reservation
        until `expire_ms`, naming it, unless a job ID is recorded already."""
        old = self.peek(key, now)
        if old is None or old == RESERVED:
            self.record(key, RESERVED, expire_ms)
            self._askers[key] = asker

    def asker(self, key: bytes) -> str | None:
        """The node that asked for `key` last, if this node keeps a reservation for it
        (as `reserve` was told; None if none)."""
        return self._askers.get(key)

    def forget(self, key: bytes, job_id: bytes) -> bool:
        """Drop the entry if it still names `job_id` (an ADDJOB that failed)."""
        if self._ids.get(key) != job_id:
            return False
        del self._ids[key], self._expiry[key]
        self._unsettled.pop(job_id, None)
        self._askers.pop(key, None)
        return True

    def sweep(self, now: int, budget: int = 10_000) -> int:
        """Drop the expired entries of the due buckets, about `budget` keys per call.
        A key recorded again with a later expiry sits in two buckets: the earlier one
        finds it alive and leaves it. Returns how many entries went."""
        seconds, buckets, ids, expiry = self._seconds, self._buckets, self._ids, self._expiry
        unsettled = self._unsettled
        removed = 0
        while seconds and seconds[0] * 1000 <= now and budget > 0:
            second = seconds[0]
            bucket = buckets[second]
            while bucket and budget > 0:
                key = bucket.pop()
                budget -= 1
                if expiry.get(key, now + 1) <= now:
                    job_id = ids.pop(key)
                    if not job_id:
                        self._askers.pop(key, None)
                    elif unsettled:
                        unsettled.pop(job_id, None)
                    del expiry[key]
                    removed += 1
            if not bucket:
                heapq.heappop(seconds)
                del buckets[second]
                if self._last[0] == second:
                    self._last = (0, [])
        return removed

    def clear(self) -> None:
        self._ids.clear()
        self._expiry.clear()
        self._unsettled.clear()
        self._askers.clear()
        self._buckets.clear()
        self._seconds.clear()
        self._last = (0, [])
