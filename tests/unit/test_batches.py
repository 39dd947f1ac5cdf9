"""The batch table (disq/batches.py): definitions, merges, members counted, ends."""

from __future__ import annotations

import pytest

from disq.batches import (
    ACKED,
    CLOSED,
    DEAD,
    DONE,
    OPEN,
    VOID,
    Batch,
    BatchTable,
)
from disq.errors import DisqError

NOW = 1_800_000_000_000
IDS = [f"D-aaaaaaaa-{i:024d}-05a1".encode() for i in range(4)]


def table_with(bid: bytes = b"b") -> BatchTable:
    table = BatchTable()
    table.define(bid, (b"done", b"x"), None, 3600, "node-a", NOW)
    return table


def test_a_batch_is_defined_once_until_its_ttl() -> None:
    table = table_with()
    with pytest.raises(DisqError, match="already exists"):
        table.define(b"b", None, None, 60, "node-a", NOW)
    assert table.expire(NOW + 3600 * 1000) == [b"b"]
    table.define(b"b", None, None, 60, "node-a", NOW + 3600 * 1000)


def test_members_are_taken_until_this_node_answers_a_close() -> None:
    table = table_with()
    table.check_add(b"b", NOW)
    table.held(b"b", IDS[0])
    assert table.accepts(b"b", IDS[1], NOW)
    held, ends = table.close_here(b"b", NOW)  # type: ignore[misc]
    assert held == [IDS[0]] and ends == []
    assert not table.accepts(b"b", IDS[1], NOW)  # a new member: refused
    assert table.accepts(b"b", IDS[0], NOW)  # one held already: its copy again
    with pytest.raises(DisqError, match="closed"):
        table.check_add(b"b", NOW)
    with pytest.raises(DisqError, match="no batch"):
        table.check_add(b"nope", NOW)


def test_a_closed_batch_is_complete_once_every_member_ended() -> None:
    table = table_with()
    table.ended(b"b", IDS[0], ACKED, NOW)  # an end heard before CLOSE counts too
    batch = table.closed(b"b", {IDS[0], IDS[1], IDS[2]}, NOW)
    assert batch is not None and batch.phase == CLOSED and batch.count == 3
    assert not table.complete(batch)
    assert sorted(table.pending(batch)) == [IDS[1], IDS[2]]
    assert table.ended(b"b", IDS[1], DEAD, NOW)
    assert not table.ended(b"b", IDS[1], ACKED, NOW)  # the first end stays
    assert table.counts(batch) == (3, 1, 1, 1)
    assert table.ended(b"b", IDS[2], VOID, NOW)  # its ADDJOB failed: not a member
    assert table.complete(batch)
    assert table.counts(batch) == (2, 0, 1, 1)
    done = table.done(batch, [IDS[3]], NOW)
    assert done is not None and done.phase == DONE
    assert (done.count, done.acked, done.dead, done.callbacks) == (2, 1, 1, [IDS[3]])
    assert b"b" not in table.records  # what was known of the members goes once done
    assert table.closed(b"b", set(), NOW) is None  # never back


def test_merges_take_the_further_phase_and_the_older_definition() -> None:
    table = table_with()
    mine = table.batches[b"b"]
    newer_definition = Batch(b"b", NOW + 5, "node-b", NOW + 10_000, None, None)
    assert not table.merge(newer_definition, NOW)
    closed = Batch(b"b", mine.created, mine.origin, mine.expires, mine.ondone, None)
    closed.phase, closed.count = CLOSED, 2
    assert table.merge(closed, NOW)  # (without its members: the light sync)
    assert table.batches[b"b"].members is None
    full = Batch.from_wire(closed.to_wire())
    assert full is not None
    full.members = frozenset(IDS[:2])
    assert table.merge(full, NOW)
    assert table.batches[b"b"].members == frozenset(IDS[:2])
    older = Batch(b"b", mine.created, mine.origin, mine.expires, mine.ondone, None)
    assert older.phase == OPEN and not table.merge(older, NOW)
    assert not table.merge(Batch(b"x", NOW, "n", NOW - 1, None, None), NOW)  # expired


@pytest.mark.parametrize("wire", [
    None, [], [b"b"] * 12, [b"", NOW, "n", NOW, None, None, 0, None, 0, 0, 0, []],
    [b"b", NOW, "n", NOW, [b"q"], None, 0, None, 0, 0, 0, []],
    [b"b", NOW, "n", NOW, None, None, 7, None, 0, 0, 0, []],
    [b"b", NOW, "n", NOW, None, None, 1, [b"x"], 2, 0, 0, []],
    [b"b", NOW, "n", NOW, None, None, 2, None, 1, 2, 0, []],
    [b"b" * 257, NOW, "n", NOW, None, None, 0, None, 0, 0, 0, []],
])
def test_a_peer_s_bad_batch_is_refused(wire: object) -> None:
    assert Batch.from_wire(wire) is None


def test_the_wire_form_round_trips() -> None:
    batch = Batch(b"b", NOW, "node-a", NOW + 1, (b"q", b"body"), (b"ok", b""))
    batch.phase, batch.members, batch.count = CLOSED, frozenset(IDS[:3]), 3
    back = Batch.from_wire(batch.to_wire())
    assert back is not None
    assert (back.ondone, back.onsuccess, back.members, back.count) == (
        (b"q", b"body"), (b"ok", b""), frozenset(IDS[:3]), 3)
    light = Batch.from_wire(batch.to_wire(with_members=False))
    assert light is not None and light.members is None and light.count == 3


def test_records_of_a_batch_never_known_are_dropped() -> None:
    table = BatchTable()
    assert table.close_here(b"ghost", NOW) is None  # unknown here: it will refuse...
    table.define(b"ghost", None, None, 60, "n", NOW)
    assert not table.accepts(b"ghost", IDS[1], NOW)  # ... new members once it knows it
    del table.batches[b"ghost"]
    table.held(b"ghost", IDS[0])  # a member's copy came before its batch
    assert b"ghost" in table.records and table.member_ids == 1
    table.expire(NOW)
    assert b"ghost" in table.records  # one pass of grace: its batch may come
    table.expire(NOW)
    assert b"ghost" not in table.records and table.member_ids == 0
