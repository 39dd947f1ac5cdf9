"""Batches across the cluster (BATCH NEW / CLOSE / STATUS, ADDJOB ... BATCH: a disq
extension). The table and its rules are disq/batches.py; this part moves them.

- Definitions spread as CRON's schedules do (tables.py): BATCH_SET to every reachable
  node at once (BATCH NEW answers once every reachable node holds it), BATCH_SYNC of
  the whole table, without members, to a random peer now and then. A node that learns
  of a closed batch without its members asks a peer for them (BATCH_FETCH).
- A member (ADDJOB ... BATCH) is replicated to a majority of the known nodes before its
  ADDJOB answers (`check_add` raises its REPLICATE), and a node that answered a CLOSE
  takes no copy of a new member (incoming.py asks `BatchTable.accepts`).
- CLOSE (`close`) asks every reachable node (BATCH_CLOSE) which members it held and
  which ended (BATCH_MEMBERS), and needs a majority of the known nodes, itself
  included, to answer: two majorities share a node, so every member whose ADDJOB
  succeeded is counted. The batch is then CLOSED with its members, on every node.
- A member that ends on a node (acked, dead, expired; VOID: its ADDJOB failed) is told
  to every node (BATCH_ENDED, one message per peer per loop turn). The node that fires
  a closed batch asks the others for the ends it has not heard of (BATCH_ENDS_ASK,
  answered with a BATCH_ENDED of those) when none came for a while.
- Firing, as a CRON tick: the first reachable node in the batch ID's order, only on a
  side that reaches a majority, adds each callback (ONDONE; ONSUCCESS when no member
  went dead) with the DEDUP key `batch:<id>:done` / `:success`, replicated to a
  majority: two firers' ADDJOBs share a node, which refuses the second copy of the key.
  Then the batch is DONE on every node. Never before every counted member ended: the
  firer checks its own table, which holds every end it heard of.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final

from ..batches import CLOSED, DONE, END_HOWS, MAX_BID_LEN, OPEN, Batch, Callback
from ..cluster import messages as m
from ..cluster.membership import ClusterNode
from ..cluster.port import BusPort
from ..errors import DisqError
from ..ids import is_valid_job_id
from ..node import Node, now_ms
from ..outcomes import Added
from ..requests import AddJob
from .tables import OnHeld, SyncedTable
from .targets import first_reachable, majority_replication

if TYPE_CHECKING:
    from .dedup_checks import Dedup

log = logging.getLogger("disq")

CLOSE_TIMEOUT_MS: Final = 10_000  # CLOSE waits at most this long for a majority
CLOSE_STEP_MS: Final = 500  # ... and this often asks again the nodes yet to answer,
#                             answering as soon as a majority did (a node killed and not
#                             flagged yet, a slow one: no need to wait for it)
FIRE_TIMEOUT_MS: Final = 5000  # a callback's ADDJOB waits this long for its copies
ASK_AFTER_MS: Final = 2000  # a firer with no end heard this long asks the others
MAX_ASK_IDS: Final = 10_000  # member IDs in one BATCH_ENDS_ASK
EXPIRE_EVERY_MS: Final = 10_000

# A CLOSE's outcome: the members counted, or why it failed.
OnClosed = Callable[[int | DisqError], None]


def callback_key(bid: bytes, which: bytes) -> bytes:
    """The DEDUP key of a batch's callback job: the same on every node."""
    return b"batch:%s:%s" % (bid, which)


class _Closing:
    """A CLOSE waiting for the nodes' answers."""

    __slots__ = ("bid", "waiting", "answered", "members", "ends", "on_closed", "timer",
                 "started")

    def __init__(self, bid: bytes, waiting: set[str], on_closed: OnClosed) -> None:
        self.bid = bid
        self.waiting = waiting  # peers yet to answer
        self.answered = 1  # nodes that answered, this one included
        self.members: set[bytes] = set()
        self.ends: list[tuple[bytes, int]] = []
        self.on_closed = on_closed
        self.timer: asyncio.TimerHandle | None = None
        self.started = now_ms()


class _Light:
    """A batch as the periodic sync sends it: without its members."""

    __slots__ = ("batch",)

    def __init__(self, batch: Batch) -> None:
        self.batch = batch

    def to_wire(self) -> list[Any]:
        return self.batch.to_wire(with_members=False)


class Batches:
    """The cluster side of batches, a part of `Replication`."""

    def __init__(self, node: Node, bus: BusPort, dedup: Dedup,
                 loop: asyncio.AbstractEventLoop | None = None) -> None:
        self.node = node
        self.bus = bus
        self.dedup = dedup
        self.table = node.batches
        self._loop = loop
        self.sync = SyncedTable(bus, m.BATCH_SET, m.BATCH_SYNC, m.BATCH_HELD,
                                self._light, self._merge, loop)
        self._request_id = 0
        self._closing: dict[int, _Closing] = {}
        self._ended_out: list[list[Any]] = []  # [bid, id, how] to tell this loop turn
        self._firing: set[bytes] = set()
        self._heard: dict[bytes, int] = {}  # closed batch -> ms an end was last heard
        self._need_members: set[bytes] = set()
        self._next_expire = 0
        # A batch is done on this node (flows waiting for it: server/flows.py).
        self.on_done: Callable[[bytes], None] = _nothing
        node.on_member_end = self._member_ended
        bus.on(m.BATCH_CLOSE, self._on_close)
        bus.on(m.BATCH_MEMBERS, self._on_members)
        bus.on(m.BATCH_ENDED, self._on_ended)
        bus.on(m.BATCH_ENDS_ASK, self._on_ends_ask)
        bus.on(m.BATCH_FETCH, self._on_fetch)

    # -- the service's side --------------------------------------------------------------
    def define(self, bid: bytes, ondone: Callback | None, onsuccess: Callback | None,
               ttl_s: int, on_held: OnHeld) -> None:
        """BATCH NEW: the batch on this node, then on every node (`on_held`)."""
        batch = self.table.define(bid, ondone, onsuccess, ttl_s, self.node.id, now_ms())
        self.sync.changed(batch.to_wire(), on_held)

    def majority(self) -> int:
        return self.bus.cluster_size // 2 + 1

    def check_add(self, request: AddJob) -> None:
        """ADDJOB ... BATCH: raises unless the batch takes members here; the member's
        copies go to a majority of the known nodes at least (a REPLICATE below is
        raised), synchronously."""
        bid = request.batch
        assert bid is not None
        self.table.check_add(bid, now_ms())
        if request.async_:
            raise DisqError("ERR", "BATCH needs a synchronous ADDJOB (no ASYNC): its "
                                   "copies are counted by CLOSE")
        majority = self.majority()
        if request.repl is None:
            size = self.bus.cluster_size
            request.repl = max(min(size, 3), majority)
        elif request.repl < majority:
            request.repl = majority

    def close(self, bid: bytes, on_closed: OnClosed) -> None:
        """BATCH CLOSE: count the members, from a majority of the nodes (the class's
        docstring says why that is enough)."""
        now = now_ms()
        batch = self.table.get(bid, now)
        if batch is None:
            raise DisqError("NOBATCH", f"no batch '{bid.decode(errors='replace')}'")
        if batch.phase != OPEN:
            raise DisqError("BATCHCLOSED",
                            f"batch '{bid.decode(errors='replace')}' is closed already")
        found = self.table.close_here(bid, now)
        assert found is not None
        peers = {n.id for n in self.bus.reachable_peers()}
        self._request_id += 1
        request_id = self._request_id
        closing = _Closing(bid, peers, on_closed)
        self._take_answer(closing, found[0], found[1])
        self._closing[request_id] = closing
        if peers:
            self.bus.broadcast(m.BATCH_CLOSE, request_id, bid, node_ids=peers)
            loop = self._loop or asyncio.get_running_loop()
            closing.timer = loop.call_later(CLOSE_STEP_MS / 1000, self._close_step,
                                            request_id)
        else:
            self._finish_close(request_id)

    def _take_answer(self, closing: _Closing, held: list[Any], ends: list[Any]) -> None:
        for job_id in held:
            if type(job_id) is bytes and is_valid_job_id(job_id):
                closing.members.add(job_id)
        for item in ends:
            end = _end(item)
            if end is not None:
                closing.ends.append(end)
                closing.members.add(end[0])

    def _close_step(self, request_id: int) -> None:
        """A majority answered: done; else ask again those yet to answer, until
        CLOSE_TIMEOUT_MS."""
        closing = self._closing.get(request_id)
        if closing is None:
            return
        closing.timer = None
        if closing.answered * 2 > self.bus.cluster_size or (
                now_ms() - closing.started >= CLOSE_TIMEOUT_MS):
            self._finish_close(request_id)
            return
        again = [i for i in closing.waiting if self.bus.can_send(i)]
        if again:
            self.bus.broadcast(m.BATCH_CLOSE, request_id, closing.bid, node_ids=again)
        loop = self._loop or asyncio.get_running_loop()
        closing.timer = loop.call_later(CLOSE_STEP_MS / 1000, self._close_step, request_id)

    def _finish_close(self, request_id: int) -> None:
        closing = self._closing.pop(request_id)
        if closing.timer is not None:
            closing.timer.cancel()
        size = self.bus.cluster_size
        if closing.answered * 2 <= size:
            closing.on_closed(DisqError(
                "NOMAJORITY", f"batch not closed: {closing.answered} of {size} nodes "
                              "answered, a majority must count its members"))
            return
        now = now_ms()
        bid = closing.bid
        for job_id, how in closing.ends:
            self.table.ended(bid, job_id, how, now)
        try:
            batch = self.table.closed(bid, closing.members, now)
        except DisqError as exc:
            closing.on_closed(exc)
            return
        if batch is None:  # closed meanwhile (another CLOSE), or expired
            current = self.table.get(bid, now)
            closing.on_closed(
                current.count if current is not None and current.phase >= CLOSED
                else DisqError("NOBATCH", f"no batch '{bid.decode(errors='replace')}'"))
            return
        self._heard[bid] = now
        records = self.table.records.get(bid)
        count = batch.count - (records.void if records is not None else 0)  # (failed adds)

        def held(missing: list[str]) -> None:
            closing.on_closed(count)

        self.sync.changed(batch.to_wire(), held)
        self._check(bid)

    # -- members' ends -------------------------------------------------------------------
    def _member_ended(self, bid: bytes, job_id: bytes, how: int) -> None:
        """The core: a member ended here (news to this node). Told to every node at the
        end of the loop turn; fired if that was the last."""
        if not self._ended_out:
            loop = self._loop or asyncio.get_running_loop()
            loop.call_soon(self._flush_ended)
        self._ended_out.append([bid, job_id, how])
        self._heard[bid] = now_ms()

    def _flush_ended(self) -> None:
        """After the operations of the loop turn (a callback's ADDJOB is no part of an
        ACK's): tell the ends, fire what they completed."""
        items, self._ended_out = self._ended_out, []
        if items:
            self.bus.broadcast(m.BATCH_ENDED, items)
            for bid in {item[0] for item in items}:
                self._check(bid)

    def _on_ended(self, sender: ClusterNode, fields: list[Any]) -> None:
        if not fields or type(fields[0]) is not list:
            return
        now = now_ms()
        changed: set[bytes] = set()
        for item in fields[0]:
            if type(item) is not list or len(item) != 3 or type(item[0]) is not bytes:
                continue
            end = _end(item[1:])
            if end is not None and self.table.ended(item[0], end[0], end[1], now):
                changed.add(item[0])
        for bid in changed:
            self._heard[bid] = now
            self._check(bid)

    # -- bus messages: CLOSE, asks -------------------------------------------------------
    def _on_close(self, sender: ClusterNode, fields: list[Any]) -> None:
        if len(fields) != 2 or type(fields[0]) is not int or not _is_bid(fields[1]):
            return
        found = self.table.close_here(fields[1], now_ms())
        held, ends = found if found is not None else ([], [])
        self.bus.send(sender.id, m.BATCH_MEMBERS, fields[0], fields[1], held, ends)

    def _on_members(self, sender: ClusterNode, fields: list[Any]) -> None:
        if (len(fields) != 4 or type(fields[0]) is not int or type(fields[2]) is not list
                or type(fields[3]) is not list):
            return
        closing = self._closing.get(fields[0])
        if (closing is None or closing.bid != fields[1]
                or sender.id not in closing.waiting):
            return
        closing.waiting.discard(sender.id)
        closing.answered += 1
        self._take_answer(closing, fields[2], fields[3])
        if not closing.waiting:
            self._finish_close(fields[0])

    def _on_ends_ask(self, sender: ClusterNode, fields: list[Any]) -> None:
        if len(fields) < 2 or type(fields[0]) is not int or not _is_bid(fields[1]):
            return
        records = self.table.records.get(fields[1])
        if records is None:
            return
        ended = records.ended
        bid = fields[1]
        ends = [[bid, i, ended[i]] for i in fields[2:2 + MAX_ASK_IDS]
                if type(i) is bytes and i in ended]
        if ends:  # answered as the ends are told (`_on_ended` takes them)
            self.bus.send(sender.id, m.BATCH_ENDED, ends)

    def _on_fetch(self, sender: ClusterNode, fields: list[Any]) -> None:
        if len(fields) != 1 or not _is_bid(fields[0]):
            return
        batch = self.table.get(fields[0], now_ms())
        if batch is not None and batch.members is not None:
            self.bus.send(sender.id, m.BATCH_SET, batch.to_wire())

    def _light(self) -> list[_Light]:
        return [_Light(batch) for batch in self.table.batches.values()]

    def _merge(self, data: object) -> None:
        batch = Batch.from_wire(data)
        if batch is None:
            return
        now = now_ms()
        if self.table.merge(batch, now):
            mine = self.table.batches[batch.bid]
            if mine.phase == CLOSED:
                self._heard.setdefault(batch.bid, now)
                if mine.members is None:
                    self._need_members.add(batch.bid)
                else:
                    self._need_members.discard(batch.bid)
                    self._check(batch.bid)
            else:
                self._need_members.discard(batch.bid)
                self._heard.pop(batch.bid, None)
                if mine.phase == DONE:
                    self.on_done(batch.bid)

    # -- firing ----------------------------------------------------------------------------
    def cron(self, now: int) -> None:
        """Every cron run: fire the closed batches whose members all ended (a firer may
        have died), ask for the ends not heard of, fetch missing members, sync."""
        self.sync.cron(now)
        if now >= self._next_expire:
            self._next_expire = now + EXPIRE_EVERY_MS
            for bid in self.table.expire(now):
                self._heard.pop(bid, None)
                self._need_members.discard(bid)
        peers = [n.id for n in self.bus.reachable_peers() if self.bus.can_send(n.id)]
        for bid in list(self._need_members):
            if peers:
                self.bus.send(random.choice(peers), m.BATCH_FETCH, bid)
        for bid, heard in list(self._heard.items()):
            batch = self.table.get(bid, now)
            if batch is None or batch.phase != CLOSED:
                self._heard.pop(bid, None)
                continue
            if self._check(bid) or now - heard < ASK_AFTER_MS:
                continue
            if first_reachable(bid, self.node.id, self.bus) == self.node.id and peers:
                self._heard[bid] = now
                pending = self.table.pending(batch)[:MAX_ASK_IDS]
                if pending:
                    self._request_id += 1
                    self.bus.broadcast(m.BATCH_ENDS_ASK, self._request_id, bid, *pending,
                                       node_ids=peers)

    def _reached(self) -> int:
        return 1 + len(self.bus.reachable_peers())

    def _check(self, bid: bytes) -> bool:
        """Fire `bid` if it is complete and this node fires it. True if complete."""
        batch = self.table.get(bid, now_ms())
        if batch is None or not self.table.complete(batch):
            return False
        if bid not in self._firing and self._reached() * 2 > self.bus.cluster_size and (
                first_reachable(bid, self.node.id, self.bus) == self.node.id):
            self._fire(batch)
        return True

    def _fire(self, batch: Batch) -> None:
        records = self.table.records.get(batch.bid)
        failed = records is not None and records.dead > 0
        todo: list[tuple[Callback, bytes]] = []
        if batch.ondone is not None:
            todo.append((batch.ondone, b"done"))
        if batch.onsuccess is not None and not failed:
            todo.append((batch.onsuccess, b"success"))
        self._firing.add(batch.bid)
        self._add_callbacks(batch, todo, [])

    def _add_callbacks(self, batch: Batch, todo: list[tuple[Callback, bytes]],
                       added: list[bytes]) -> None:
        """Add the callbacks one after the other, then mark the batch DONE everywhere."""
        bid = batch.bid
        if not todo:
            self._firing.discard(bid)
            done = self.table.done(batch, added, now_ms())
            if done is not None:
                self._heard.pop(bid, None)
                self.sync.changed(done.to_wire())
                self.on_done(bid)
            return
        (queue, body), which = todo[0]
        repl = majority_replication(None, self.bus.cluster_size, self._reached())
        if not repl:  # no majority reached: the majority side fires it
            self._firing.discard(bid)
            return
        request = AddJob(queue, body, FIRE_TIMEOUT_MS, repl, dedup=callback_key(bid, which))

        def answer(outcome: Added) -> None:
            if isinstance(outcome, DisqError):
                self._firing.discard(bid)  # tried again at the next cron run
                log.warning("BATCH %s: its %s callback was not added: -%s %s",
                            bid.decode(errors="replace"), which.decode(), outcome.code,
                            outcome.message)
                return
            self._add_callbacks(batch, todo[1:], [*added, outcome])

        self.dedup.ask(request, answer)


def _nothing(bid: bytes) -> None:
    """`Batches.on_done` before anyone listens."""


def _is_bid(data: object) -> bool:
    return type(data) is bytes and 0 < len(data) <= MAX_BID_LEN


def _end(item: object) -> tuple[bytes, int] | None:
    """A [job id, how] pair from a peer, checked."""
    if (type(item) is list and len(item) == 2 and type(item[0]) is bytes
            and is_valid_job_id(item[0]) and item[1] in END_HOWS):
        return item[0], item[1]
    return None

