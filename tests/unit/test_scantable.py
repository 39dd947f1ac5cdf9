"""disq.scantable.ScanTable: a dict with Redis-style SCAN cursors."""

from __future__ import annotations

import random

import pytest

from disq.scantable import _GROW_AT, _MAX_BUCKETS, ScanTable


def full_scan(table: ScanTable, count: int, between=None, keep=None) -> tuple[list, int]:
    """Scan until the cursor comes back to 0; `between(i)` runs between calls."""
    cursor, out, calls = 0, [], 0
    while True:
        cursor, found = table.scan(cursor, count, keep)
        out.extend(found)
        calls += 1
        if cursor == 0:
            return out, calls
        if between is not None:
            between(calls)
        assert calls < 1_000_000


def filled(n: int, prefix: str = "k") -> ScanTable:
    table: ScanTable = ScanTable()
    for i in range(n):
        assert table.add(f"{prefix}{i}", i)
    return table


def test_dict_operations() -> None:
    table: ScanTable = ScanTable()
    assert len(table) == 0 and table.get("a") is None and "a" not in table
    assert table.add("a", 1) is True
    assert table.add("a", 2) is False  # existing key: unchanged
    assert table.get("a") == 1 and "a" in table and len(table) == 1
    assert table.pop("a") == 1
    assert table.pop("a") is None
    assert len(table) == 0
    table = filled(1000)
    assert len(table) == 1000
    assert sorted(table.values()) == list(range(1000))
    assert all(table.get(f"k{i}") == i for i in range(1000))
    table.clear()
    assert len(table) == 0 and list(table.values()) == []
    assert table.scan(0, 10) == (0, [])


def test_values_tolerates_removal_while_iterating() -> None:
    table = filled(200)
    for value in table.values():
        table.pop(f"k{value}")
    assert len(table) == 0


def test_grows_and_caps() -> None:
    table = filled(100)
    assert len(table._buckets) > 1
    assert len(table) <= _GROW_AT * len(table._buckets)
    big = filled(_GROW_AT * _MAX_BUCKETS + 5000)
    assert len(big._buckets) == _MAX_BUCKETS
    values, _ = full_scan(big, 1000)
    assert len(values) == len(big) and len(set(values)) == len(big)


def test_empty_scan() -> None:
    assert ScanTable().scan(0, 100) == (0, [])
    assert ScanTable().scan(12345, 1) == (0, [])


@pytest.mark.parametrize("n", [1, 7, 8, 9, 100, 2000, 20_000])
@pytest.mark.parametrize("count", [0, 1, 10, 100])
def test_full_scan_returns_each_key_exactly_once(n: int, count: int) -> None:
    table = filled(n)
    values, calls = full_scan(table, count)
    assert sorted(values) == list(range(n))
    if count and n > 10 * count:
        assert calls > 1  # bounded work per call


def test_count_bounds_each_call() -> None:
    table = filled(5000)
    cursor, found = table.scan(0, 10)
    assert cursor != 0
    assert 1 <= len(found) < 200


def test_keep_filter() -> None:
    table = filled(3000)
    values, _ = full_scan(table, 50, keep=lambda v: v % 3 == 0)
    assert sorted(values) == list(range(0, 3000, 3))


@pytest.mark.parametrize("seed", range(5))
def test_keys_present_throughout_are_returned_while_table_grows(seed: int) -> None:
    rng = random.Random(seed)
    table = filled(rng.randrange(20, 60), prefix="old")
    present = set(table.values())
    new_keys = iter(range(10**6, 10**7))

    def grow(call: int) -> None:
        if len(table) > 4000:
            return
        for _ in range(rng.randrange(50, 400)):
            value = next(new_keys)
            table.add(f"new{value}", value)

    values, _ = full_scan(table, rng.choice([1, 2, 3]), between=grow)
    assert present <= set(values)
    assert len(table._buckets) > 8  # it really grew during the scan


@pytest.mark.parametrize("seed", range(5))
def test_keys_present_throughout_returned_with_removals(seed: int) -> None:
    rng = random.Random(seed)
    table = filled(5000)
    stable = set(range(0, 5000, 2))  # even values are never removed

    def churn(call: int) -> None:
        for _ in range(20):
            victim = rng.randrange(1, 5000, 2)
            table.pop(f"k{victim}")
            value = rng.randrange(10**6, 10**7)
            table.add(f"n{value}", value)

    values, _ = full_scan(table, 20, between=churn)
    assert stable <= set(values)


def test_cursor_out_of_range_is_harmless() -> None:
    table = filled(100)
    cursor, found = table.scan(10**12, 10)
    assert isinstance(cursor, int) and cursor >= 0
    assert all(isinstance(v, int) for v in found)


@pytest.mark.parametrize("size", [0, 3, 50, 5000])
def test_random_sample_takes_count_distinct_values(size: int) -> None:
    table: ScanTable[int, int] = ScanTable()
    for i in range(size):
        table.add(i, i)
    for count in (1, 5, 64):
        sample = table.random_sample(count)
        assert len(sample) == len(set(sample)) == min(count, size)
        assert all(0 <= value < size for value in sample)
