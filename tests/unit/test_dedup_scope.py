"""ADDJOB DEDUP keys scoped to their queue (disq/dedup_table.py, `scoped_key`): the table
holds one entry per queue and key, the cluster's checks (DEDUP_QUERY, the copies)
answer a key only in its queue, and a peer's key that is not scoped to the copy's
queue, or not a scoped key at all, is never recorded. Over test_replication's
in-memory bus."""

from __future__ import annotations

from disq.cluster import messages as m
from disq.dedup_table import MAX_SCOPED_KEY_LEN, DedupTable, scoped_key, scoped_to, well_scoped
from disq.node import now_ms
from disq.replication.wire import COPY_FIELDS
from disq.requests import AddJob

from .test_dedup import dedup_add
from .test_replication import cluster


def test_a_scoped_key_names_its_queue_and_nothing_else() -> None:
    key = scoped_key(b"qa", b"order-42")
    assert scoped_to(key, b"qa") and well_scoped(key)
    assert not scoped_to(key, b"qb") and not scoped_to(key, b"a")
    assert not scoped_to(scoped_key(b"xqa", b"order-42"), b"qa")  # (ends the same)
    for bad in (b"", b"\x00", b"\x00\x00q", b"\x00\x05abc", b"k", 7, None, [b"k"],
                (MAX_SCOPED_KEY_LEN + 1).to_bytes(2, "big") + b"k" * (MAX_SCOPED_KEY_LEN + 1)):
        assert not well_scoped(bad) and not scoped_to(bad, b"q"), bad
    assert well_scoped(scoped_key(b"", b"k")) and scoped_to(scoped_key(b"", b"k"), b"")


def test_the_table_keeps_one_entry_per_queue_and_key() -> None:
    table = DedupTable()
    qa, qb = scoped_key(b"qa", b"k"), scoped_key(b"qb", b"k")
    table.record(qa, b"D-a", 9000)
    assert table.get(qb, 0) is None
    table.record(qb, b"D-b", 9000)
    assert (table.get(qa, 0), table.get(qb, 0), len(table)) == (b"D-a", b"D-b", 2)
    assert not table.forget(qb, b"D-a") and table.forget(qa, b"D-a")
    assert table.get(qb, 0) == b"D-b"


def added(replies: list[bytes]) -> bytes:
    assert len(replies) == 1 and replies[0].startswith(b"+D-"), replies
    return replies[0][1:-2]


def test_a_key_asked_for_over_the_bus_is_answered_in_its_queue_only() -> None:
    """REPLICATE 1: the copies cannot check, the node asks every peer (DEDUP_QUERY)."""
    net, (a, b, c) = cluster(3)
    theirs: list[bytes] = []
    dedup_add(a, b"k", theirs, repl=1, queue=b"qb")
    net.pump()
    mine: list[bytes] = []
    dedup_add(b, b"k", mine, repl=1, queue=b"qa")
    net.pump()
    assert added(mine) != added(theirs)
    assert b.node.qlen(b"qa") == 1 and a.node.qlen(b"qb") == 1
    for member, queue, expected in ((c, b"qa", mine), (c, b"qb", theirs), (b, b"qb", theirs)):
        again: list[bytes] = []
        dedup_add(member, b"k", again, repl=1, queue=queue)
        net.pump()
        assert again == expected, (member.id, queue)
    assert sum(x.node.qlen(q) for x in (a, b, c) for q in (b"qa", b"qb")) == 2


def test_copies_check_a_key_in_their_queue_only() -> None:
    """REPLICATE 3 of 3: every node holds qb's key, and the copies of qa's job, which
    check the same key, are taken: nothing refused, no question asked."""
    net, (a, b, c) = cluster(3)
    theirs: list[bytes] = []
    dedup_add(a, b"k", theirs, repl=3, by_copies=True, queue=b"qb")
    net.pump()
    mine: list[bytes] = []
    dedup_add(b, b"k", mine, repl=3, by_copies=True, queue=b"qa")
    net.pump()
    assert added(mine) != added(theirs)
    assert net.sent(m.DEDUP_CONFLICT) == 0 and net.sent(m.DEDUP_QUERY) == 0
    for x in (a, b, c):
        assert x.node.dedup.get(scoped_key(b"qa", b"k"), now_ms()) == added(mine)
        assert x.node.dedup.get(scoped_key(b"qb", b"k"), now_ms()) == added(theirs)


def test_a_copy_carrying_another_queues_key_records_none() -> None:
    net, (a, b) = cluster(2)
    job = a.node.admission.add_job(AddJob(b"qa", b"body", 0, 1))
    for key, recorded in ((scoped_key(b"qa", b"k"), True), (scoped_key(b"qb", b"k"), False),
                          (b"k", False), (7, False)):
        data = [None] * COPY_FIELDS + [key]  # (only what follows the job's fields is read)
        got = b.repl.dedup.copy_key(data, job, now_ms(), a.id)
        assert got == (key if recorded else None), key


def test_a_query_whose_key_is_not_scoped_is_skipped() -> None:
    net, (a, b) = cluster(2)
    replies: list[object] = []
    net.buses[a.id].handlers[m.DEDUP_REPLY] = lambda _, fields: replies.extend(fields)
    net.buses[a.id].send(b.id, m.DEDUP_QUERY, [b"k", 3600], [scoped_key(b"q", b"k"), 3600])
    net.pump()
    assert replies == [[scoped_key(b"q", b"k"), None, 0]]
    assert len(b.node.dedup) == 1  # the reservation of the scoped key only
