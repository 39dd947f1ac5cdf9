"""Queue policies (QPOLICY): what happens to a queue's jobs when they fail,
and how fast the queue may be drained. Sans-IO: the table every node holds; how it
reaches every node is replication/policies.py, what the node does with it node.py
(dead letters, back-off) and ratelimit.py (RATE).

- MAXDELIVERIES n: a job delivered n times (GETJOB WITHCOUNTERS' nacks + additional
  deliveries, plus the first) is not queued again: it becomes a dead letter, moved to
  DEADLETTER (default `dead:<queue>`). A job's own ADDJOB MAXDELIVERIES wins.
- BACKOFF base max: a NACK without DELAY-MS, and the requeue of a job nobody
  acknowledged within its RETRY, wait min(max, base * 2^(n-1)) ms, +-20% jitter, n
  being the job's failed deliveries so far (this one included).
- RATE r: GETJOB delivers at most about r jobs a second from the queue, cluster-wide.
- CONCURRENCY n: at most about n of the queue's jobs delivered and not yet ended at a
  time, cluster-wide (concurrency.py).
- RESULT-TTL s: how long the queue's jobs' results are kept once they end (results.py;
  an hour without it; 0 keeps none).
- RETRY s, TTL s, REPLICATE n, MAXLEN n: the defaults of an ADDJOB to the queue that
  does not give the option (`QueueDefaults`); the ADDJOB's own option wins.
- GROUP-CONCURRENCY n, GROUP-RATE r: CONCURRENCY and RATE for each GROUP of the queue
  (grouplimits.py).
- RETAIN s [RETAIN-BYTES n]: each holder keeps the queue's acknowledged jobs on disk for
  s seconds (at most n bytes of them), for REPLAY (disq/retention/).

As CRON's schedules (schedules.py), changes are ordered by `version` (ms, node ID):
the newest wins everywhere, and QPOLICY DEL is a version too (a tombstone, kept a
while so that an old copy cannot bring the policy back).
"""

from __future__ import annotations

import random
from typing import TYPE_CHECKING, Any

from .purges import PurgeTable

if TYPE_CHECKING:
    from .requests import AddJob

TOMBSTONE_MS = 24 * 3600 * 1000
MAX_QUEUE_NAME_LEN = 1024
JITTER = 0.2  # back-off delays are spread +-20%
DEAD_PREFIX = b"dead:"
MAX_RESULT_TTL = 30 * 24 * 3600  # s: a month (disq_client.spec's)
MAX_RESULT_TTL_MS = MAX_RESULT_TTL * 1000  # the longest a result is kept, as peers and files say it
MAX_CONCURRENCY = 1_000_000  # (disq_client.spec's)
# The ADDJOB defaults' bounds (disq_client.spec's): a TTL or RETRY the bus carries
# (replication/wire.py's MAX_TTL_MS is 2**40 ms), ADDJOB's REPLICATE.
MAX_DEFAULT_SECONDS = 1_000_000_000  # ~31 years
MAX_REPLICATE = 65535
MAX_MAXLEN = 2**32 - 1
MAX_RATE = 1e9
MAX_RETAIN = 10 * 365 * 24 * 3600  # s: ten years (disq_client.spec's)
MAX_RETAIN_BYTES = 2**62


class QueuePolicy:
    __slots__ = ("queue", "max_deliveries", "deadletter", "backoff_base", "backoff_max",
                 "rate", "result_ttl", "concurrency", "defaults", "group_concurrency",
                 "group_rate", "retain", "retain_bytes", "version", "origin", "deleted")

    def __init__(self, queue: bytes, *, max_deliveries: int = 0,
                 deadletter: bytes | None = None, backoff_base: int = 0,
                 backoff_max: int = 0, rate: float = 0.0, result_ttl: int = -1,
                 concurrency: int = 0, defaults: QueueDefaults | None = None,
                 group_concurrency: int = 0, group_rate: float = 0.0, retain: int = 0,
                 retain_bytes: int = 0, version: int = 0, origin: str = "",
                 deleted: bool = False) -> None:
        self.queue = queue
        self.max_deliveries = max_deliveries  # 0: none
        self.deadletter = deadletter  # None: dead:<queue>
        self.backoff_base = backoff_base  # ms; 0: no back-off
        self.backoff_max = backoff_max
        self.rate = rate  # jobs per second; 0: no limit
        self.result_ttl = result_ttl  # s; -1: the default (results.py), 0: none kept
        self.concurrency = concurrency  # jobs running at a time; 0: no limit
        # RETRY, TTL, REPLICATE, MAXLEN for the ADDJOBs that do not give them; None: none
        # (a plain ADDJOB tests this one field: JobService.add)
        self.defaults = defaults
        self.group_concurrency = group_concurrency  # each group's CONCURRENCY; 0: none
        self.group_rate = group_rate  # each group's RATE; 0: none
        self.retain = retain  # s acked jobs are kept on disk (retention/); 0: none
        self.retain_bytes = retain_bytes  # the most bytes of them on each node; 0: no cap
        self.version = version  # ms of the change, `origin` (a node ID) as tiebreak
        self.origin = origin
        self.deleted = deleted

    def newer_than(self, other: QueuePolicy) -> bool:
        return (self.version, self.origin) > (other.version, other.origin)

    @property
    def deadletter_queue(self) -> bytes:
        return self.deadletter or dead_letter_queue(self.queue)

    def backoff_ms(self, failures: int) -> int:
        """The back-off before the job's next delivery after `failures` failed ones
        (0: none)."""
        return backoff_ms(self.backoff_base, self.backoff_max, failures)

    def to_wire(self) -> list[Any]:
        """Nine fields, as nodes without RESULT-TTL read them; a tenth (RESULT-TTL) and
        an eleventh (CONCURRENCY) when set; all seventeen when an ADDJOB default or a
        group limit is set (RETRY, TTL, REPLICATE, MAXLEN, GROUP-CONCURRENCY,
        GROUP-RATE; -1 or 0: none), which nodes older than those refuse, as they
        refuse any policy they cannot apply whole; nineteen with RETAIN (RETAIN,
        RETAIN-BYTES)."""
        wire = [self.queue, self.max_deliveries, self.deadletter, self.backoff_base,
                self.backoff_max, float(self.rate), self.version, self.origin, self.deleted]
        defaults = self.defaults
        retained = self.retain > 0
        extended = (defaults is not None or self.group_concurrency or self.group_rate
                    or retained)
        if self.result_ttl >= 0 or self.concurrency or extended:
            wire.append(self.result_ttl)
        if self.concurrency or extended:
            wire.append(self.concurrency)
        if extended:
            if defaults is None:
                defaults = NO_DEFAULTS
            wire += (defaults.retry, defaults.ttl, defaults.replicate, defaults.maxlen,
                     self.group_concurrency, float(self.group_rate))
        if retained:
            wire += (self.retain, self.retain_bytes)
        return wire

    @classmethod
    def from_wire(cls, data: object) -> QueuePolicy | None:
        """A policy from `to_wire`'s list, or None if anything is off (a peer's
        message or a file: trusted no more than any input)."""
        if type(data) is not list or len(data) not in (9, 10, 11, 17, 19):
            return None
        (queue, max_deliveries, deadletter, base, top, rate, version, origin,
         deleted) = data[:9]
        result_ttl = data[9] if len(data) >= 10 else -1
        concurrency = data[10] if len(data) >= 11 else 0
        if type(result_ttl) is not int or not -1 <= result_ttl <= MAX_RESULT_TTL or (
                type(concurrency) is not int or not 0 <= concurrency <= MAX_CONCURRENCY):
            return None
        defaults, group_concurrency, group_rate, retain, retain_bytes = None, 0, 0.0, 0, 0
        if len(data) == 19:
            retain, retain_bytes = data[17], data[18]
            if (type(retain) is not int or not 0 < retain <= MAX_RETAIN
                    or type(retain_bytes) is not int
                    or not 0 <= retain_bytes <= MAX_RETAIN_BYTES):
                return None
        if len(data) >= 17:
            defaults = QueueDefaults.from_wire(data[11:15])
            group_concurrency, group_rate = data[15], data[16]
            if defaults is None or type(group_concurrency) is not int or not (
                    0 <= group_concurrency <= MAX_CONCURRENCY) or (
                    type(group_rate) is not float or not 0 <= group_rate <= MAX_RATE):
                return None
            if defaults.empty():
                defaults = None
        if not (type(queue) is bytes and 0 < len(queue) <= MAX_QUEUE_NAME_LEN
                and type(max_deliveries) is int and 0 <= max_deliveries <= 65535
                and (deadletter is None or type(deadletter) is bytes
                     and 0 < len(deadletter) <= MAX_QUEUE_NAME_LEN and deadletter != queue)
                and type(base) is int and type(top) is int and 0 <= base <= top < 2**32
                and type(rate) is float and 0 <= rate <= MAX_RATE
                and type(version) is int and type(origin) is str
                and type(deleted) is bool):
            return None
        return cls(queue, max_deliveries=max_deliveries, deadletter=deadletter,
                   backoff_base=base, backoff_max=top, rate=rate, result_ttl=result_ttl,
                   concurrency=concurrency, defaults=defaults,
                   group_concurrency=group_concurrency, group_rate=group_rate,
                   retain=retain, retain_bytes=retain_bytes, version=version, origin=origin, deleted=deleted)


class QueueDefaults:
    """A queue's ADDJOB defaults (QPOLICY RETRY, TTL, REPLICATE, MAXLEN): what an
    ADDJOB to the queue gets for an option it does not give, before ADDJOB's own
    checks run (admission.py), so they are checked as if the ADDJOB had given them."""

    __slots__ = ("retry", "ttl", "replicate", "maxlen")

    def __init__(self, retry: int = -1, ttl: int = 0, replicate: int = 0,
                 maxlen: int = 0) -> None:
        self.retry = retry  # s; -1: none (0 is at-most-once)
        self.ttl = ttl  # s; 0: none
        self.replicate = replicate  # 0: none
        self.maxlen = maxlen  # 0: none

    def empty(self) -> bool:
        return self.retry < 0 and not (self.ttl or self.replicate or self.maxlen)

    def apply(self, request: AddJob) -> None:
        """Fill in the options `request` does not give (AddJob: None, or 0 for TTL
        and MAXLEN, which an ADDJOB cannot give as 0)."""
        if self.retry >= 0 and request.retry is None:
            request.retry = self.retry
        if self.ttl and not request.ttl:
            request.ttl = self.ttl
        if self.replicate and request.repl is None:
            request.repl = self.replicate
        if self.maxlen and not request.maxlen:
            request.maxlen = self.maxlen

    @classmethod
    def from_wire(cls, data: list[Any]) -> QueueDefaults | None:
        retry, ttl, replicate, maxlen = data
        if not (type(retry) is int and -1 <= retry <= MAX_DEFAULT_SECONDS
                and type(ttl) is int and 0 <= ttl <= MAX_DEFAULT_SECONDS
                and type(replicate) is int and 0 <= replicate <= MAX_REPLICATE
                and type(maxlen) is int and 0 <= maxlen <= MAX_MAXLEN):
            return None
        return cls(retry, ttl, replicate, maxlen)


NO_DEFAULTS = QueueDefaults()


def dead_letter_queue(queue: bytes) -> bytes:
    return DEAD_PREFIX + queue


def backoff_ms(base: int, top: int, failures: int) -> int:
    """min(top, base * 2^(failures-1)), +-JITTER (0 without a base)."""
    if not base or failures < 1:
        return 0
    delay = min(top, base << min(failures - 1, 40))
    return max(1, round(delay * random.uniform(1 - JITTER, 1 + JITTER)))


def format_rate(rate: float) -> bytes:
    return b"%d" % rate if rate == int(rate) else repr(rate).encode()


class PolicyTable:
    """Every queue policy this node knows (tombstones included), and the queues' purges
    (QDEL, QPURGE: purges.py)."""

    def __init__(self) -> None:
        self.policies: dict[bytes, QueuePolicy] = {}
        self.purges = PurgeTable()

    def __len__(self) -> int:
        return sum(1 for p in self.policies.values() if not p.deleted)

    def get(self, queue: bytes) -> QueuePolicy | None:
        policy = self.policies.get(queue)
        return None if policy is None or policy.deleted else policy

    def live(self) -> list[QueuePolicy]:
        return sorted((p for p in self.policies.values() if not p.deleted),
                      key=lambda p: p.queue)

    def merge(self, policy: QueuePolicy) -> bool:
        """Take `policy` if it is newer than what this node has. True if it did."""
        mine = self.policies.get(policy.queue)
        if mine is not None and not policy.newer_than(mine):
            return False
        self.policies[policy.queue] = policy
        return True

    def sweep(self, now: int) -> list[bytes]:
        """Forget the tombstones older than TOMBSTONE_MS; their queues."""
        old = [q for q, p in self.policies.items()
               if p.deleted and p.version < now - TOMBSTONE_MS]
        for queue in old:
            del self.policies[queue]
        return old
