"""Batches (BATCH NEW / CLOSE / STATUS and ADDJOB ... BATCH, disq extensions): the
batches a node knows and what it knows of their members. Sans-IO: who tells the other
nodes, counts the members at CLOSE and adds the callback job is
replication/batches.py.

Two things per batch:

- `Batch`, the definition every node holds (synced like CRON's schedules): its ID, its
  callbacks (ONDONE / ONSUCCESS: a queue and a body), its state, OPEN -> CLOSED -> DONE,
  never back. CLOSED carries the members counted at CLOSE (`members`); DONE the counts
  and the callback jobs added. The higher state wins a merge.
- `BatchRecords`, this node's own knowledge: the members whose copy it held (`held`),
  the members it heard ended and how (`ended`), and whether it answered a CLOSE
  (`closing`: from then on it takes no copy of a new member).

Why members are counted that way: a member's ADDJOB is replicated to a majority of the
nodes before it answers, and CLOSE hears from a majority, each of which stops taking
new members' copies before it answers. Two majorities share a node, so every member
whose ADDJOB succeeded is held by a node CLOSE heard: it is counted. An ADDJOB still
under way when CLOSE reached its copies' nodes cannot get a majority of copies any
more: it fails (its job deleted, its ID `VOID`).
"""

from __future__ import annotations

from typing import Any, Final

from .errors import DisqError

OPEN: Final = 0
CLOSED: Final = 1
DONE: Final = 2
STATE_NAMES: Final = {OPEN: b"open", CLOSED: b"closed", DONE: b"done"}

# How a member ended.
ACKED: Final = 1
DEAD: Final = 2  # a dead letter, or expired before it was acked
VOID: Final = 3  # its ADDJOB failed: not a member after all
END_HOWS: Final = (ACKED, DEAD, VOID)

MAX_BID_LEN: Final = 256
MAX_PARENTS: Final = 32  # ADDJOB ... AFTER: parents of one job
MAX_MEMBERS: Final = 1_000_000  # members of one batch
MAX_BATCHES: Final = 100_000  # batches a node holds (open, closed or done)
DEFAULT_TTL_S: Final = 7 * 24 * 3600  # a batch (and what is known of it) lives this long
MAX_TTL_S: Final = 90 * 24 * 3600

# A callback job: (queue, body).
Callback = tuple[bytes, bytes]


class Batch:
    """A batch's definition and state, the same on every node once synced."""

    __slots__ = ("bid", "created", "origin", "expires", "ondone", "onsuccess", "phase",
                 "members", "count", "acked", "dead", "callbacks")

    def __init__(self, bid: bytes, created: int, origin: str, expires: int,
                 ondone: Callback | None, onsuccess: Callback | None) -> None:
        self.bid = bid
        self.created = created  # Unix ms
        self.origin = origin  # the node that defined it (ties of `created`)
        self.expires = expires  # Unix ms: then forgotten everywhere
        self.ondone = ondone
        self.onsuccess = onsuccess
        self.phase = OPEN
        self.members: frozenset[bytes] | None = None  # CLOSED: the members (None: not known here)
        self.count = 0  # CLOSED, DONE: how many members CLOSE counted
        self.acked = 0  # DONE: how many were acked ...
        self.dead = 0  # ... went dead (or expired)
        self.callbacks: list[bytes] = []  # DONE: the callback jobs added

    def definition_key(self) -> tuple[int, str]:
        """Two definitions of one ID (two BATCH NEW racing): the older one wins."""
        return self.created, self.origin

    def to_wire(self, with_members: bool = True) -> list[Any]:
        members = (sorted(self.members) if with_members and self.members is not None
                   else None)
        return [self.bid, self.created, self.origin, self.expires,
                list(self.ondone) if self.ondone else None,
                list(self.onsuccess) if self.onsuccess else None,
                self.phase, members, self.count, self.acked, self.dead, self.callbacks]

    @classmethod
    def from_wire(cls, data: object) -> Batch | None:
        """`to_wire`'s batch, or None if anything is off (a peer's message: every field
        checked and bounded)."""
        if type(data) is not list or len(data) != 12:
            return None
        (bid, created, origin, expires, ondone, onsuccess, phase, members, count, acked,
         dead, callbacks) = data
        if not (type(bid) is bytes and 0 < len(bid) <= MAX_BID_LEN
                and type(created) is int and type(origin) is str and len(origin) <= 64
                and type(expires) is int and phase in STATE_NAMES
                and type(count) is int and 0 <= count <= MAX_MEMBERS
                and type(acked) is int and type(dead) is int
                and 0 <= acked <= count and 0 <= dead <= count
                and type(callbacks) is list and len(callbacks) <= 2
                and all(type(c) is bytes and len(c) <= 64 for c in callbacks)):
            return None
        if not (_is_callback(ondone) and _is_callback(onsuccess)):
            return None
        done = (ondone[0], ondone[1]) if ondone else None
        success = (onsuccess[0], onsuccess[1]) if onsuccess else None
        batch = cls(bid, created, origin, expires, done, success)
        batch.phase = phase
        if members is not None:
            if not (type(members) is list and len(members) == count
                    and all(type(i) is bytes and len(i) <= 64 for i in members)):
                return None
            batch.members = frozenset(members)
        batch.count, batch.acked, batch.dead = count, acked, dead
        batch.callbacks = callbacks
        return batch


def _is_callback(data: object) -> bool:
    """Whether `data` is a callback's wire form: [queue, body], or None."""
    return data is None or (type(data) is list and len(data) == 2 and type(data[0]) is bytes
                            and 0 < len(data[0]) <= 1024 and type(data[1]) is bytes)


class BatchRecords:
    """What this node knows of one batch's members."""

    __slots__ = ("held", "ended", "closing", "acked", "dead", "void")

    def __init__(self) -> None:
        self.held: set[bytes] = set()  # members whose copy this node took
        self.ended: dict[bytes, int] = {}  # member -> how it ended
        self.closing = False  # this node answered a CLOSE: no new member's copy
        # of the batch's counted members (Batch.members): how many ended each way
        self.acked = 0
        self.dead = 0
        self.void = 0

    def count_end(self, how: int) -> None:
        if how == ACKED:
            self.acked += 1
        elif how == DEAD:
            self.dead += 1
        else:
            self.void += 1


class BatchTable:
    """Every batch this node knows, and its records."""

    __slots__ = ("batches", "records", "member_ids", "_orphans")

    def __init__(self) -> None:
        self.batches: dict[bytes, Batch] = {}
        self.records: dict[bytes, BatchRecords] = {}
        self.member_ids = 0  # IDs held in every batch's records and members, bounded
        # records of batches this node does not know (a CLOSE or a member's copy came
        # first), as of the last `expire`: dropped at the next one if still unknown
        self._orphans: set[bytes] = set()

    def __len__(self) -> int:
        return len(self.batches)

    def get(self, bid: bytes, now: int) -> Batch | None:
        batch = self.batches.get(bid)
        return batch if batch is not None and batch.expires > now else None

    # -- definitions -------------------------------------------------------------------
    def define(self, bid: bytes, ondone: Callback | None, onsuccess: Callback | None,
               ttl_s: int, origin: str, now: int) -> Batch:
        """BATCH NEW: a new batch, open. Raises if the ID is taken (a batch lives until
        its TTL, done or not: its ID is not reused before)."""
        if self.get(bid, now) is not None:
            raise DisqError("BATCHEXISTS", f"batch '{bid.decode(errors='replace')}' already exists")
        if len(self.batches) >= MAX_BATCHES:
            self.expire(now)
            if len(self.batches) >= MAX_BATCHES:
                raise DisqError("BATCHFULL", f"too many batches (at most {MAX_BATCHES} at once)")
        batch = Batch(bid, now, origin, now + ttl_s * 1000, ondone, onsuccess)
        self.batches[bid] = batch
        return batch

    def merge(self, batch: Batch, now: int) -> bool:
        """A peer's batch: taken if this node has none, or an older state of it (or the
        same state without the members); the older definition of one ID wins. True if
        the table changed."""
        if batch.expires <= now:
            return False
        mine = self.batches.get(batch.bid)
        if mine is not None and mine.expires > now:
            if batch.definition_key() > mine.definition_key():
                return False
            if batch.definition_key() == mine.definition_key():
                if batch.phase < mine.phase:
                    return False
                if batch.phase == mine.phase:
                    if batch.members is None or mine.members is not None:
                        return False
                    mine.members = batch.members  # (a state the same, now with members)
                    self._counted(mine)
                    return True
        elif len(self.batches) >= MAX_BATCHES:
            return False
        if mine is not None and batch.members is None and mine.members is not None and (
                batch.phase != DONE):
            batch.members = mine.members
        self.batches[batch.bid] = batch
        if mine is not None and mine.members is not None:
            self.member_ids -= len(mine.members)
        self._counted(batch)
        return True

    def _counted(self, batch: Batch) -> None:
        """`batch` now has these members: count their ends known here."""
        if batch.phase == DONE:
            self.forget_records(batch.bid)
            batch.members = None
            return
        if batch.members is None:
            return
        self.member_ids += len(batch.members)
        records = self.records.get(batch.bid)
        if records is None:
            return
        records.acked = records.dead = records.void = 0
        for job_id, how in records.ended.items():
            if job_id in batch.members:
                records.count_end(how)

    def forget_records(self, bid: bytes) -> None:
        records = self.records.pop(bid, None)
        if records is not None:
            self.member_ids -= len(records.held) + len(records.ended)

    def expire(self, now: int) -> list[bytes]:
        """Forget the batches past their TTL (the cron's). Their IDs."""
        gone = [bid for bid, batch in self.batches.items() if batch.expires <= now]
        for bid in gone:
            batch = self.batches.pop(bid)
            if batch.members is not None:
                self.member_ids -= len(batch.members)
            self.forget_records(bid)
        for bid in self._orphans:
            if bid not in self.batches:
                self.forget_records(bid)
        self._orphans = {bid for bid in self.records if bid not in self.batches}
        return gone

    # -- members -------------------------------------------------------------------------
    def _records(self, bid: bytes) -> BatchRecords:
        records = self.records.get(bid)
        if records is None:
            records = self.records[bid] = BatchRecords()
        return records

    def accepts(self, bid: bytes, job_id: bytes, now: int) -> bool:
        """Whether a copy of member `job_id` may be kept here: the batch is open and
        this node answered no CLOSE, or the member was counted (or held here) already."""
        batch = self.get(bid, now)
        if batch is None:
            return False
        if batch.phase == OPEN:
            records = self.records.get(bid)
            return records is None or not records.closing or job_id in records.held
        if batch.phase == CLOSED:
            return batch.members is not None and job_id in batch.members
        return False

    def check_add(self, bid: bytes, now: int) -> None:
        """ADDJOB ... BATCH: raises unless the batch takes new members here."""
        batch = self.get(bid, now)
        if batch is None:
            raise DisqError("NOBATCH", f"no batch '{bid.decode(errors='replace')}'")
        records = self.records.get(bid)
        if batch.phase != OPEN or records is not None and records.closing:
            raise DisqError("BATCHCLOSED", f"batch '{bid.decode(errors='replace')}' is closed")
        if self.member_ids >= MAX_MEMBERS * 4 or (
                records is not None and len(records.held) >= MAX_MEMBERS):
            raise DisqError("BATCHFULL", "too many batch members held on this node")

    def held(self, bid: bytes, job_id: bytes) -> None:
        """A copy of member `job_id` is kept here (added, replicated, moved, loaded)."""
        records = self._records(bid)
        if job_id not in records.held:
            records.held.add(job_id)
            self.member_ids += 1

    def ended(self, bid: bytes, job_id: bytes, how: int, now: int) -> bool:
        """Member `job_id` ended (here, or a peer said so). True if that is news. The
        first end heard stays (a VOID only replaces nothing: an ADDJOB that failed)."""
        batch = self.get(bid, now)
        if batch is None or batch.phase == DONE:
            return False
        records = self._records(bid)
        if job_id in records.ended:
            return False
        records.ended[job_id] = how
        self.member_ids += 1
        if batch.members is not None and job_id in batch.members:
            records.count_end(how)
        return True

    def close_here(self, bid: bytes, now: int) -> tuple[list[bytes], list[list[Any]]] | None:
        """A CLOSE reached this node: it takes no new member's copy from now on (a
        batch it does not know yet too: its records wait for it). The members it held
        and the ends it knows (None: no such batch here)."""
        batch = self.get(bid, now)
        records = self._records(bid)
        if batch is None:
            records.closing = True
            return None
        records.closing = True
        return sorted(records.held), [[i, how] for i, how in records.ended.items()]

    def closed(self, bid: bytes, members: set[bytes], now: int) -> Batch | None:
        """CLOSE counted `members`: the batch CLOSED with them here (None: the batch is
        gone, or was closed already)."""
        batch = self.get(bid, now)
        if batch is None or batch.phase != OPEN:
            return None
        if len(members) > MAX_MEMBERS:
            raise DisqError("BATCHFULL", f"a batch has at most {MAX_MEMBERS} members")
        closed = Batch(bid, batch.created, batch.origin, batch.expires, batch.ondone,
                       batch.onsuccess)
        closed.phase = CLOSED
        closed.members = frozenset(members)
        closed.count = len(members)
        self.merge(closed, now)
        return closed

    def pending(self, batch: Batch) -> list[bytes]:
        """A closed batch's members with no end known here."""
        if batch.members is None:
            return []
        records = self.records.get(batch.bid)
        ended = records.ended if records is not None else {}
        return [i for i in batch.members if i not in ended]

    def complete(self, batch: Batch) -> bool:
        """Whether every counted member of a CLOSED batch ended, as far as this node
        knows."""
        if batch.phase != CLOSED or batch.members is None:
            return False
        records = self.records.get(batch.bid)
        ended = records.acked + records.dead + records.void if records is not None else 0
        return ended >= batch.count

    def done(self, batch: Batch, callbacks: list[bytes], now: int) -> Batch | None:
        """The batch's callbacks were added: DONE with its counts (None: not here)."""
        if batch.phase != CLOSED:
            return None
        records = self.records.get(batch.bid) or BatchRecords()
        finished = Batch(batch.bid, batch.created, batch.origin, batch.expires,
                         batch.ondone, batch.onsuccess)
        finished.phase = DONE
        finished.count = batch.count - records.void
        finished.acked, finished.dead = records.acked, records.dead
        finished.callbacks = callbacks
        self.merge(finished, now)
        return finished

    def counts(self, batch: Batch) -> tuple[int, int, int, int]:
        """BATCH STATUS's (members, pending, acked, dead) as this node knows them. An
        open batch's members: those held here or heard ended (CLOSE counts them all)."""
        if batch.phase == DONE:
            return batch.count, 0, batch.acked, batch.dead
        records = self.records.get(batch.bid)
        if records is None:
            return batch.count, batch.count, 0, 0
        if batch.phase == CLOSED and batch.members is not None:
            total = batch.count - records.void
            return total, total - records.acked - records.dead, records.acked, records.dead
        acked = sum(1 for how in records.ended.values() if how == ACKED)
        dead = sum(1 for how in records.ended.values() if how == DEAD)
        void = sum(1 for how in records.ended.values() if how == VOID)
        known = len(records.held | records.ended.keys()) - void
        return known, known - acked - dead, acked, dead
