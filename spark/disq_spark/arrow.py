"""ADDJOBs joined from Arrow record batches, without a Python step per row.

The data source's tasks get their rows as Arrow record batches. When a row's job is
its body column with a generated DEDUP key (no key column, no per-row AT, PRIORITY or
GROUP: the usual write), Arrow's kernels join the commands of a whole batch into one
buffer, ~0.3 µs a row where building each row's command in Python takes ~1.2 µs: it
is Spark's CPU, on the machines the nodes run on. The commands are the same bytes
either way (PartitionWriter._job's), so a row gets the same DEDUP key whichever way it
is sent. Imported only by a task that writes (pyarrow takes ~0.1 s to import).
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from disq_spark.batches import Batch


def _is_bytes(kind: Any) -> bool:
    """Arrow types whose values are a body as they are (text: its UTF-8 bytes, which
    is what encode_body makes of a str)."""
    return bool(pa.types.is_binary(kind) or pa.types.is_string(kind)
                or pa.types.is_large_binary(kind) or pa.types.is_large_string(kind))


class ArrowCommands:
    """Joins the ADDJOBs of a batch's body column (of type `kind`) with Arrow's
    kernels: `head` (the command up to the body's length), the body, `tail` (the
    options after it), then, with a `key_prefix`, the DEDUP key `key_prefix` + the
    row's position in hex. `key_first`: ADDJOBS's arguments of each job instead (head
    `$`, no tail: [key] body, the key first)."""

    def __init__(self, column: int, kind: Any, head: bytes, tail: bytes,
                 key_prefix: bytes | None, max_body_bytes: int, key_first: bool = False
                 ) -> None:
        self.column = column  # the body column's position
        large = pa.types.is_large_binary(kind) or pa.types.is_large_string(kind)
        self.kind = pa.large_binary() if large else pa.binary()
        self.offsets = pa.int64() if large else pa.int32()
        self.head = pa.scalar(head, self.kind)
        self.crlf = pa.scalar(b"\r\n", self.kind)
        self.key_first = key_first  # ADDJOBS's DEDUP-JOBS key body (else ADDJOB's)
        self.tail = pa.scalar(b"\r\n" + tail + (
            b"$5\r\nDEDUP\r\n$" if key_prefix is not None and not key_first else b""),
            self.kind)
        self.dollar = pa.scalar(b"$", self.kind)
        self.key_prefix = key_prefix
        self.prefix = pa.scalar(b"\r\n" + (key_prefix or b""), self.kind)
        self.empty = pa.scalar(b"", self.kind)
        self.max_body_bytes = max_body_bytes

    @staticmethod
    def fits(kind: Any) -> bool:
        return _is_bytes(kind)

    def _digits(self, numbers: Any) -> Any:
        return pc.cast(pc.cast(numbers, pa.string()), self.kind)

    def encode(self, column: Any, start: int) -> tuple[Batch | None, list[tuple[int, str]]]:
        """The batch of the rows of `column` (the first at position `start`), and the
        rows that cannot be jobs: (position, reason)."""
        if not len(column):
            return None, []  # (a batch of no job would wait for no reply)
        body = column.cast(self.kind)
        lengths = pc.binary_length(body)
        positions: int | list[int] = start
        bad: list[tuple[int, str]] = []
        too_big = pc.greater(lengths, self.max_body_bytes)  # null for a null body
        if body.null_count or pc.any(too_big).as_py():  # rare: row by row
            limit = self.max_body_bytes
            for i, size in enumerate(lengths.to_pylist()):
                if size is None:
                    bad.append((start + i, "null body"))
                elif size > limit:
                    bad.append((start + i,
                                f"body of {size} bytes > max_body_bytes {limit}"))
            keep = pc.fill_null(pc.invert(too_big), False)
            positions = [start + i for i, kept in enumerate(keep.to_pylist()) if kept]
            body, lengths = body.filter(keep), lengths.filter(keep)
            if not positions:
                return None, bad
        parts = [self.head, self._digits(lengths), self.crlf, body, self.tail]
        if self.key_prefix is not None:
            numbers = (range(start, start + len(body)) if isinstance(positions, int)
                       else positions)
            hexes = pa.array([b"%x" % n for n in numbers], self.kind)
            key = [self._digits(pc.add(pc.binary_length(hexes), len(self.key_prefix))),
                   self.prefix, hexes, self.crlf]
            parts = [self.dollar, *key, *parts] if self.key_first else parts + key
        joined = pc.binary_join_element_wise(*parts, self.empty)
        _, offsets, data = joined.buffers()
        bounds = pa.Array.from_buffers(self.offsets, len(joined) + 1, [None, offsets],
                                       offset=joined.offset)
        first, last = bounds[0].as_py(), bounds[-1].as_py()
        return Batch(data.slice(first, last - first).to_pybytes(), len(joined),
                     bounds=bounds, positions=positions), bad
