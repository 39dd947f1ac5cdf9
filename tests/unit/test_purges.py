"""The purges' table (QDEL, QPURGE): the newest purge of a queue wins on every node, a
peer's purge is checked before it is taken, and a purge is forgotten after a day."""

from __future__ import annotations

import pytest

from disq.purges import KEEP_MS, MAX_PURGES, Purge, PurgeTable

MS = 1_000_000  # a job's ctime per ms


def test_the_newest_purge_of_a_queue_wins_and_refuses_older_jobs() -> None:
    table = PurgeTable()
    first = table.make(b"q", "node-a", 1000 * MS, whole=False)
    assert table.refuses(b"q", 999 * MS) and not table.refuses(b"q", 1000 * MS)
    assert not table.refuses(b"other", 0) and not table.refuses(None, 0)
    # a purge made later with a clock behind: still after the last one
    second = table.make(b"q", "node-a", 500 * MS, whole=True)
    assert second.at == first.at + 1 and table.entries[b"q"] is second
    assert not table.merge(first)  # an older copy from a peer changes nothing
    newer = Purge(b"q", 2000 * MS, "node-b", False)
    assert table.merge(newer) and table.refuses(b"q", 1999 * MS)
    tie = Purge(b"q", 2000 * MS, "node-c", False)  # same time: the node ID decides
    assert table.merge(tie) and not table.merge(newer)


def test_a_peer_s_purge_is_checked_before_it_is_taken() -> None:
    good = Purge(b"q", 5 * MS, "n" * 40, True)
    assert Purge.from_wire(good.to_wire()) is not None
    for bad in (None, [], [b"q", 5, "n"], ["q", 5, "n", True], [b"", 5, "n", True],
                [b"q" * 1025, 5, "n", True], [b"q", 0, "n", True], [b"q", -1, "n", True],
                [b"q", 1 << 63, "n", True], [b"q", 5, "", True], [b"q", 5, "n", 1],
                [b"q", 5.0, "n", True], [b"q", True, "n", True]):
        assert Purge.from_wire(bad) is None, bad


def test_purges_are_forgotten_after_a_day() -> None:
    table = PurgeTable()
    table.make(b"old", "n", 1000 * MS, whole=False)
    table.make(b"new", "n", (1000 + KEEP_MS) * MS, whole=False)
    table.sweep(1000 + KEEP_MS + 1)
    assert list(table.entries) == [b"new"] and list(table.before) == [b"new"]


def test_the_table_is_bounded() -> None:
    table = PurgeTable()
    for i in range(MAX_PURGES):
        table.merge(Purge(b"q%d" % i, 10 * MS, "n", False))
    assert not table.merge(Purge(b"one-more", 10 * MS, "n", False))
    with pytest.raises(Exception, match="too many queues purged"):
        table.make(b"one-more", "n", 20 * MS, whole=False)
    assert table.merge(Purge(b"q1", 30 * MS, "n", False))  # a known queue: replaced
