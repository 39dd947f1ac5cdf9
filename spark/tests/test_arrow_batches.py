"""The Arrow path of a writing task (disq_spark.arrow) against the row path: the same
commands, byte for byte (so a row keeps its DEDUP key whichever path sends it), the
same bad rows, each job taken apart again from the joined payload; and a write through
it into a real node."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest
from disq_spark import PartitionWriter, WriteOptions
from disq_spark.batches import Batch, rows_of
from support import DisqProcess, call


def options(**kwargs: Any) -> WriteOptions:
    kwargs = {"nodes": ["127.0.0.1:1"],  # nothing is sent but in the last test
              "replicate": 2, "body": 0, **kwargs}
    return WriteOptions(queue="q", job_name="t", retry_ms=30_000, max_body_bytes=10,
                        **kwargs)


def record_batches(values: list[Any], kind: Any, sizes: list[int]) -> list[Any]:
    column = pa.array(values, kind)
    out, start = [], 0
    for size in sizes:
        out.append(pa.record_batch([column.slice(start, size)], names=["body"]))
        start += size
    return out


def both_ways(writer: PartitionWriter, batches: list[Any]) -> tuple[list[Batch], list[Batch]]:
    """The batches the Arrow path and the row path make of the same record batches."""
    commands = writer._arrow_commands(batches[0].schema)
    assert commands is not None
    arrow = list(writer._arrow_batches(batches, commands))
    arrow_bad = writer.stats.bad_examples[:]
    writer.stats.bad_examples.clear()
    rows = list(writer._row_batches(rows_of(iter(batches))))
    assert writer.stats.bad_examples == arrow_bad
    return arrow, rows


@pytest.mark.parametrize("kind", [pa.binary(), pa.string(), pa.large_binary(),
                                  pa.large_string()])
@pytest.mark.parametrize("dedup", [True, False])
@pytest.mark.parametrize("bulk", [True, False])
def test_the_arrow_path_makes_the_row_paths_commands(kind: Any, dedup: bool,
                                                     bulk: bool) -> None:
    values = [f"b{i}" for i in range(40)]
    values[3] = None  # a null body: bad
    values[17] = "x" * 11  # over max_body_bytes: bad
    values[25] = "é"  # text: its UTF-8 bytes
    if kind in (pa.binary(), pa.large_binary()):
        values = [v.encode() if v is not None else None for v in values]
    writer = PartitionWriter(options(batch_size=8, dedup=dedup, bulk=bulk), 3)
    arrow, rows = both_ways(writer, record_batches(values, kind, [13, 27]))
    assert [b.payload for b in arrow] != [] and b"".join(b.payload for b in arrow) == \
        b"".join(b.payload for b in rows)
    assert [b.jobs() for b in arrow] == [[b.job(i) for i in range(b.size)] for b in arrow]
    assert sum((b.jobs() for b in arrow), []) == sum((b.jobs() for b in rows), [])
    assert writer.stats.bad_rows == 4  # each bad row, counted once by each path
    first = arrow[0].job(0)[0]
    assert first.startswith(b"*") != bulk  # ADDJOB commands, or ADDJOBS's arguments
    if bulk and dedup:
        assert first == b"$%d\r\n%s0\r\n$2\r\nb0\r\n" % (
            len(writer.key_prefix) + 1, writer.key_prefix)
    assert [where for where, _ in writer.stats.bad_examples] == [
        "partition 3 row 3", "partition 3 row 17"]


def test_rows_that_need_python_take_the_row_path() -> None:
    schema = pa.schema([("body", pa.binary()), ("k", pa.string()), ("n", pa.int64())])
    assert PartitionWriter(options(), 0)._arrow_commands(schema) is not None
    assert PartitionWriter(options(key=1), 0)._arrow_commands(schema) is None
    assert PartitionWriter(options(priority_field=2), 0)._arrow_commands(schema) is None
    assert PartitionWriter(options(body=2), 0)._arrow_commands(schema) is None  # JSON
    assert PartitionWriter(options(body=lambda row: row[0]), 0)._arrow_commands(
        schema) is None


@pytest.mark.parametrize("bulk", [True, False])
def test_an_arrow_write_into_a_node(node: DisqProcess, bulk: bool) -> None:
    """Bad rows reported, the others queued once, even when written twice; a record
    batch of no row, or of bad rows only, sends nothing."""
    values = [b"job-%d" % i for i in range(500)] + [None]
    values[10] = None
    for _ in range(2):
        writer = PartitionWriter(options(nodes=[f"127.0.0.1:{node.port}"], batch_size=64,
                                         replicate=1, socket_timeout_ms=5000, bulk=bulk), 0)
        stats = writer.write_arrow(record_batches(values, pa.binary(), [0, 200, 300, 0, 1]))
        assert (stats.added, stats.bad_rows, stats.retries) == (499, 2, 0)
        assert writer.client.core.failovers == 0  # (no wait for the replies of nothing)
    assert call(node, "QLEN", "q") == 499
    calls = node.client().info("commandstats")
    assert ("cmdstat_addjobs" in calls) == bulk and ("cmdstat_addjob" in calls) != bulk
