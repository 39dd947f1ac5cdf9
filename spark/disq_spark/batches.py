"""The ADDJOBs a writing task sends together (built row by row by PartitionWriter, or
joined from Arrow record batches by disq_spark.arrow): one payload to send, each job
taken apart only when its reply is an error."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

# A job ready to send: its ADDJOB, encoded (body, options, DEDUP key), and the row's
# position in the partition (for the reports). Sent again as it is after an error.
Job = tuple[bytes, int]


class Batch:
    """Jobs sent together: their commands joined (`payload`), and each job's command
    and row position (`job(i)`), made only for the jobs whose reply is an error."""

    __slots__ = ("payload", "size", "_jobs", "_bounds", "_first", "_positions")

    def __init__(self, payload: bytes, size: int, jobs: list[Job] | None = None,
                 bounds: Any = None, positions: int | list[int] = 0) -> None:
        self.payload = payload
        self.size = size
        self._jobs = jobs
        self._bounds = bounds  # Arrow offsets of the commands in the joined buffer
        self._first = bounds[0].as_py() if bounds is not None else 0
        self._positions = positions  # the first row's (rows in a row), or each row's

    @classmethod
    def of(cls, jobs: list[Job]) -> Batch:
        return cls(b"".join([command for command, _ in jobs]), len(jobs), jobs)

    def job(self, i: int) -> Job:
        if self._jobs is not None:
            return self._jobs[i]
        bounds, first = self._bounds, self._first
        command = self.payload[bounds[i].as_py() - first:bounds[i + 1].as_py() - first]
        positions = self._positions
        return command, positions + i if isinstance(positions, int) else positions[i]

    def split(self, size: int) -> list[Batch]:
        """This batch as batches of at most `size` jobs (a joined one: Arrow's kernels
        cost ~0.1 ms a call, so they join a whole record batch at once)."""
        if self.size <= size or self._jobs is not None:
            return [self]
        bounds, first, positions = self._bounds, self._first, self._positions
        out = []
        for start in range(0, self.size, size):
            end = min(start + size, self.size)
            out.append(Batch(
                self.payload[bounds[start].as_py() - first:bounds[end].as_py() - first],
                end - start, bounds=bounds.slice(start, end - start + 1),
                positions=(positions + start if isinstance(positions, int)
                           else positions[start:end])))
        return out

    def jobs(self) -> list[Job]:
        return self._jobs if self._jobs is not None else [self.job(i)
                                                          for i in range(self.size)]


def rows_of(batches: Iterator[Any]) -> Iterator[tuple[Any, ...]]:
    """Arrow record batches as row tuples (the columns by position)."""
    for batch in batches:
        yield from zip(*(column.to_pylist() for column in batch.columns), strict=True)
